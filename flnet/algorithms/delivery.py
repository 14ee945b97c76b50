"""What a central round trip delivered, in cohort order: the one place where the delivered
members' positions are sorted, their rows gathered and their sample counts looked up.

Cohort order, not arrival order: the server's sums then run in one order whatever the radio's
timing, so timing never changes a model's last bits (so radio settings cannot change the
model; `flnet.reuse` relies on it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from flnet.learn.aggregate import delivered_rows

if TYPE_CHECKING:  # annotations only
    import torch

    from flnet.sim.patterns import Delivery


class Delivered(NamedTuple):
    """The members of a cohort whose upload arrived."""

    positions: np.ndarray  # [D] their cohort positions, increasing
    num_samples: np.ndarray  # [D] their training rows (weighted_mean's weights)

    def rows(self, stacked: torch.Tensor) -> torch.Tensor:
        """Their rows of a cohort's `stacked` [C, ...] -> [D, ...] (no copy when all
        delivered)."""
        return delivered_rows(stacked, self.positions)


def delivered(done: Delivery, cohort: np.ndarray, samples: np.ndarray) -> Delivered | None:
    """`done`'s delivered members of `cohort` ([C] client ids) in cohort order, with their
    counts from `samples` ([N] training rows of each client); None when nobody delivered."""
    if not len(done.positions):
        return None
    positions = np.sort(done.positions)
    return Delivered(positions, samples[cohort[positions]])
