"""How one client's piece of work will go, known when it starts (`World.fate`): what the
event-by-event jobs (`flnet.sim.patterns`) and the round plan (`flnet.sim.at_once`) both act on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

Ends = str | Callable[[], str]  # a job's outcome if it runs to its end (or how to judge it then)


class Fate(NamedTuple):
    """How one client's piece of work will go, known when it starts (`World.fate`).

    Every way a member's work can fail ends it the same way: the member's `stop(outcome)` at
    that instant, charging the job under way up to then. `cut_s` is when its online session
    ends (outcome `interrupted`; inf: never). A dropout happens at a point of the work's
    progress: phase `drop_phase` (0 download, 1 compute, 2 upload; 3: no dropout) after
    `drop_fraction` of its bits or FLOPs, so that job is started with that share of its work
    and ends as `dropped`. `judge` (check at_completion) gives the upload's outcome at its end.
    """

    cut_s: float = math.inf
    drop_phase: int = 3
    drop_fraction: float = 1.0
    slowdown: float = 1.0
    judge: Callable[..., str] | None = None  # (t_s: the upload's end; default now) -> outcome
    cut_outcome: str = "interrupted"  # battery: the cut is where the battery runs empty

    def portion(self, phase: int) -> tuple[float, Ends]:
        """(share of the phase's work to run, its outcome if it runs to its end)."""
        if phase == self.drop_phase:
            return self.drop_fraction, "dropped"
        if phase == 2 and self.judge is not None:
            return 1.0, self.judge
        return 1.0, "ok"


SURE = Fate()  # work that nothing cuts, slows or drops
