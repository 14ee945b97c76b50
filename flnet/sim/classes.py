"""Energy by device class (`clients.device_classes`): each client row's joules added to its
class's running total, exactly (Shewchuk's partials, as the ledger's totals), so a record's
`energy_j_<name>` is bit for bit `math.fsum` of that class's rows so far.

The totals are fed by the ledger (a `flnet.sim.ledger.Subscriber` of its rows), replayed
rows included, so a resumed run has the same totals without checkpointing them. The only
per-client cost is the population's int8 `device_class` column.
"""

from __future__ import annotations

import math

import numpy as np

from flnet.sim.ledger import _add_exact


class ClassEnergy:
    """Running joules per device class."""

    def __init__(self, names: list[str], device_class: np.ndarray) -> None:
        self.names, self._class = names, device_class
        self._partials: list[list[float]] = [[] for _ in names]

    def spend(self, client: int, t_s: float, energy_j: float, outcome: str) -> None:
        """A client's row of `energy_j` (a `flnet.sim.ledger.Subscriber`)."""
        if energy_j:
            _add_exact(self._partials[int(self._class[client])], energy_j)

    def figures(self) -> dict[str, float]:
        """The records' `energy_j_<name>` columns: joules spent by each class so far."""
        return {f"energy_j_{n}": math.fsum(p) for n, p in zip(self.names, self._partials)}
