"""Each client's rows as a view: offsets plus one concatenated index array (CSR), not a Python
list of arrays per client, so a population costs a few bytes per client, not an object each.

A `ClientViews` holds `slots` row groups (``indices[offsets[s]:offsets[s + 1]]``) and a rule that
maps a client to its slot:

- ``dense``: client k is slot k (one group per client);
- ``shared``: client k is slot ``k mod slots`` (``data.share_rows``: more clients than rows, so
  clients k, k + S, k + 2S, ... hold the same rows);
- ``subset``: only the clients in the sorted array `owners` have rows (slot = their position),
  e.g. the test rows of the evaluation sample of a lazily generated population.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike


class ClientViews:
    def __init__(
        self,
        offsets: np.ndarray,
        indices: np.ndarray,
        num_clients: int,
        owners: np.ndarray | None = None,
    ) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)  # [S + 1]
        self.indices = np.asarray(indices, dtype=np.int64)  # [R]
        self.num_clients = int(num_clients)
        self.owners = None if owners is None else np.asarray(owners, dtype=np.int64)
        self.slots = len(self.offsets) - 1

    @classmethod
    def from_lists(cls, parts: Sequence[np.ndarray], num_clients: int | None = None) -> ClientViews:
        """From one index array per slot (the partition functions' output at small N)."""
        sizes = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
        indices = np.concatenate(parts) if len(parts) else np.empty(0, np.int64)
        return cls(
            np.concatenate([[0], np.cumsum(sizes)]),
            indices,
            len(parts) if num_clients is None else num_clients,
        )

    @property
    def shared(self) -> bool:
        return self.owners is None and self.slots < self.num_clients

    def slot(self, clients: ArrayLike) -> np.ndarray:
        """[C] slot of each client."""
        clients = np.asarray(clients, dtype=np.int64)
        if self.owners is not None:
            pos = np.searchsorted(self.owners, clients)
            if np.any(pos >= len(self.owners)) or np.any(
                self.owners[np.minimum(pos, len(self.owners) - 1)] != clients
            ):
                raise KeyError("some clients have no rows in this view")
            return pos
        return clients % self.slots if self.shared else clients

    def sizes(self, clients: ArrayLike | None = None) -> np.ndarray:
        """[C] rows of each client in `clients` (all clients when None)."""
        per_slot = np.diff(self.offsets)
        if clients is None:
            if self.owners is not None:
                raise ValueError("a subset view has no size for every client")
            return per_slot if not self.shared else np.resize(per_slot, self.num_clients)
        return per_slot[self.slot(clients)]

    def __len__(self) -> int:
        return self.num_clients

    def __getitem__(self, client: int) -> np.ndarray:
        s = int(self.slot(np.array([client]))[0])
        return self.indices[self.offsets[s] : self.offsets[s + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:  # one array per client: for tests and small N
        return (self[k] for k in range(self.num_clients))

    def gather(self, clients: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The rows of `clients`, concatenated in their order, and [C] how many each has."""
        slots = self.slot(clients)
        starts, sizes = self.offsets[slots], np.diff(self.offsets)[slots]
        total = int(sizes.sum())
        # position j of client c's run is starts[c] + j: one arange shifted per run
        run_start = np.repeat(starts - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes)
        return self.indices[np.arange(total) + run_start], sizes
