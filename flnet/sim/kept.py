"""Rows of floats kept by client, for at most a bound of clients: what is cheaper to keep than
to compute again, never one row per registered client. Full, it is emptied (every row is a
function of its client, so dropping it loses only the work), and an id's row lives in one
[limit, width] array: about 100 bytes of dictionary a client besides its floats."""

from __future__ import annotations

import numpy as np


class KeptRows:
    """At most `limit` rows of `width` floats, by client id."""

    def __init__(self, width: int, limit: int) -> None:
        self.width, self.limit = width, limit
        self._slot: dict[int, int] = {}  # client -> its row
        self._rows = np.empty((min(64, limit), width))

    def __len__(self) -> int:
        return len(self._slot)

    def clear(self) -> None:
        self._slot.clear()

    def row(self, client: int) -> np.ndarray | None:
        """`client`'s row (a view: read it before the next `put`), or None."""
        slot = self._slot.get(client)
        return None if slot is None else self._rows[slot]

    def get(self, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[C] whether each client's row is kept, and [C, width] the rows (garbage where not)."""
        slots = np.array([self._slot.get(c, -1) for c in clients.tolist()], dtype=np.int64)
        found = slots >= 0
        rows = np.zeros((len(clients), self.width))
        rows[found] = self._rows[slots[found]]
        return found, rows

    def put(self, clients: np.ndarray, rows: np.ndarray) -> None:
        """Keep `rows` ([C, width]) as the clients' (not where C alone is over the limit)."""
        if len(clients) > self.limit:
            return
        ids = clients.tolist()
        if len(self._slot) + sum(c not in self._slot for c in ids) > self.limit:
            self._slot.clear()
        slots = [self._slot.setdefault(c, len(self._slot)) for c in ids]
        if len(self._slot) > len(self._rows):
            grown = np.empty(
                (min(max(2 * len(self._rows), len(self._slot)), self.limit), self.width)
            )
            grown[: len(self._rows)] = self._rows
            self._rows = grown
        self._rows[slots] = rows
