"""Per-client state that outlives a round, stored only for the clients that have taken part.

A `ClientTable` holds one row per client that has been written (an optimizer's state, SCAFFOLD's
control variate c_i, FedDyn's gradient term, MOON's previous model); every other client reads a
declared initial row. A row is a pytree of tensors (one tensor, or a NamedTuple of several), kept
as one preallocated ``[capacity, *shape]`` tensor per leaf, grown geometrically in blocks, and a
client -> row index as two sorted numpy arrays (looked up with `searchsorted`). So a table for a
million registered clients costs memory only for the rows written, and a cohort's rows are found
without a Python loop over its clients.

A table also knows which rows changed since it was last saved (`changes`, `mark_saved`): a
checkpoint appends only those to the run's table journal (`flnet.journal`), never the rows that
no client touched since the previous checkpoint.

`Keep` is a cohort's new rows computed now by the eager maths, written into the table only for
the clients whose local work completes in simulated time: the time side calls `commit` with their
cohort positions (`flnet.sim` declares the `ClientState` protocol it calls).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

BLOCK_ROWS = 64  # rows added at least per growth


class ClientTable:
    """Rows ``[*shape]`` per client (a pytree of tensors), for the clients written so far.

    `initial` is the row every unwritten client reads (e.g. ``torch.zeros(P)``); its leaves set
    the shapes, dtypes and device of the stored rows.
    """

    def __init__(self, initial: Any, block_rows: int = BLOCK_ROWS) -> None:
        self.initial, self._spec = tree_flatten(initial)
        if not self.initial or not all(isinstance(x, torch.Tensor) for x in self.initial):
            raise TypeError("a ClientTable row is a tensor or a pytree of tensors")
        self.block_rows = block_rows
        self.device = self.initial[0].device
        self._clear()

    def _clear(self) -> None:
        self._store = [leaf.new_empty((0, *leaf.shape)) for leaf in self.initial]
        self._clients = np.empty(0, np.int64)  # [R] client of each row, in the order written
        self._keys = np.empty(0, np.int64)  # [R] written clients, sorted
        self._slots = np.empty(0, np.int64)  # [R] row of each sorted client
        self._dirty = np.empty(0, bool)  # [R] row written since the last save

    def __len__(self) -> int:
        """Rows written (distinct clients)."""
        return len(self._clients)

    @property
    def nbytes(self) -> int:
        """Bytes of the written rows (not the spare capacity)."""
        return len(self) * sum(leaf.nbytes for leaf in self.initial)

    @property
    def capacity(self) -> int:
        """Rows allocated (written rows plus spare room for the next ones)."""
        return self._store[0].shape[0]

    def _find(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(written [C] bool, row [C]; the row is meaningful where written) per client."""
        clients = np.asarray(clients, np.int64)
        if not len(self):
            return np.zeros(len(clients), bool), np.zeros(len(clients), np.int64)
        at = np.minimum(np.searchsorted(self._keys, clients), len(self) - 1)
        return self._keys[at] == clients, self._slots[at]

    def written(self, clients: np.ndarray) -> np.ndarray:
        """[C] bool: which clients have a row."""
        return self._find(clients)[0]

    def rows(self, clients: np.ndarray, default: Any = None) -> Any:
        """The clients' rows, leaves ``[C, *shape]`` (fresh tensors): stored rows, and for the
        others `default`'s rows (a pytree of ``[C, *shape]``) or else the initial row."""
        written, slot = self._find(clients)
        c = len(written)
        fallback = (
            tree_flatten(default)[0]
            if default is not None
            else [leaf.expand(c, *leaf.shape) for leaf in self.initial]
        )
        if not written.any():
            out = [f.clone() for f in fallback]
        else:
            idx = torch.as_tensor(slot, device=self.device)
            mask = torch.as_tensor(written, device=idx.device)
            out = [
                torch.where(mask.view(-1, *[1] * (f.dim() - 1)), s.index_select(0, idx), f)
                for s, f in zip(self._store, fallback)
            ]
        return tree_unflatten(out, self._spec)

    def put(self, clients: np.ndarray, rows: Any) -> None:
        """Write the clients' rows (leaves ``[C, *shape]``); clients must be distinct."""
        clients = np.asarray(clients, np.int64)
        leaves = tree_flatten(rows)[0]
        if len(leaves) != len(self._store):
            raise ValueError(f"rows have {len(leaves)} leaves, the table {len(self._store)}")
        written, slot = self._find(clients)
        new = clients[~written]
        if len(new):
            first = len(self)
            self._reserve(first + len(new))
            slot = slot.copy()
            slot[~written] = new_slots = np.arange(first, first + len(new))
            self._clients = np.concatenate([self._clients, new])
            self._dirty = np.concatenate([self._dirty, np.zeros(len(new), bool)])
            order = np.argsort(new)
            at = np.searchsorted(self._keys, new[order])  # a merge: O(R), no re-sort
            self._keys = np.insert(self._keys, at, new[order])
            self._slots = np.insert(self._slots, at, new_slots[order])
        self._dirty[slot] = True
        idx = torch.as_tensor(slot, device=self.device)
        for store, leaf in zip(self._store, leaves):
            store.index_copy_(0, idx, leaf.to(store.device, store.dtype))

    def _reserve(self, rows: int) -> None:
        capacity = self.capacity
        if rows <= capacity:
            return
        grown = -(-max(rows, capacity * 3 // 2) // self.block_rows) * self.block_rows
        for i, store in enumerate(self._store):
            bigger = store.new_empty((grown, *store.shape[1:]))
            bigger[: len(self)] = store[: len(self)]
            self._store[i] = bigger

    def state_dict(self) -> dict:
        """The written rows only (copies, so a checkpoint does not save the spare capacity),
        as tensors loadable with ``torch.load(weights_only=True)``."""
        return self._selected(np.arange(len(self)))

    def changes(self) -> dict:
        """The rows written since the last `mark_saved` (or load), as `state_dict` gives them:
        what a checkpoint appends to the table journal."""
        return self._selected(np.flatnonzero(self._dirty))

    def mark_saved(self) -> None:
        """Every row is now saved: `changes` is empty until the next `put`."""
        self._dirty[:] = False

    def _selected(self, slots: np.ndarray) -> dict:
        """The rows at `slots` (copies) and their clients."""
        idx = torch.as_tensor(slots, device=self.device)
        return {
            "clients": torch.from_numpy(self._clients[slots]),
            "rows": [store.index_select(0, idx) for store in self._store],
        }

    def load_state_dict(self, state: dict) -> None:
        """Replace every row by `state`'s; they count as saved (they came from a checkpoint)."""
        clients = state["clients"].cpu().numpy().astype(np.int64)
        self._clear()
        if len(clients):
            self.put(clients, tree_unflatten(list(state["rows"]), self._spec))
        self.mark_saved()


class Keep:
    """A cohort's new rows for `table`, kept by the clients whose local work completes.

    `clients` [C] is the cohort; `rows` a pytree of ``[C, *shape]`` in cohort order. The time
    side calls `commit(positions)` with the cohort positions whose work completed (at the
    simulated instant it completes); work interrupted before then writes nothing, and a lost
    upload does not undo a commit.
    """

    def __init__(self, table: ClientTable, clients: np.ndarray, rows: Any) -> None:
        self.table = table
        self.clients = np.asarray(clients, np.int64)
        self.rows = rows

    def commit(self, positions: np.ndarray) -> None:
        positions = np.asarray(positions, np.int64)
        if not len(positions):
            return
        leaves, spec = tree_flatten(self.rows)
        idx = torch.as_tensor(positions, device=leaves[0].device)
        self.table.put(
            self.clients[positions],
            tree_unflatten([leaf.index_select(0, idx) for leaf in leaves], spec),
        )


class Keeps:
    """Several `Keep`s committed together (e.g. an algorithm's state and the optimizer's)."""

    def __init__(self, *keeps: Keep | None) -> None:
        self.keeps = [k for k in keeps if k is not None]

    def commit(self, positions: np.ndarray) -> None:
        for keep in self.keeps:
            keep.commit(positions)
