"""When a run counts as diverged (`run.divergence`): the rules a user sets, judged by the
Recorder at each evaluation over the records so far.

A run that breaks one stops with status `diverged`; its summary names the rule (`diverged_by`)
and the step (`diverged_round`). A non-finite model or evaluation leaves no row (its figures
would read as results); the other rules fire on a finite evaluation, which is kept as the
row that shows why.
"""

from __future__ import annotations

from flnet.schema import DivergenceConfig

NON_FINITE = "non_finite"  # the rule of today's runs: a NaN or infinite model or figure
LOSS_ABOVE_START = "loss_above_start"
CONSENSUS_ABOVE = "consensus_above"
CHANCE_FOR = "chance_for"


class Rules:
    """The scenario's divergence rules for a task with `num_classes` classes."""

    def __init__(self, cfg: DivergenceConfig, num_classes: int) -> None:
        self.cfg = cfg
        self.chance = 1.0 / num_classes + cfg.chance_margin  # at or below: at chance

    @property
    def non_finite(self) -> bool:
        return self.cfg.non_finite

    def fired(self, rows: list[dict]) -> str | None:
        """The first rule, in the order loss_above_start, consensus_above, chance_for, that
        the records `rows` (oldest first, the newest evaluation last) break; None if none."""
        if not rows:
            return None
        cfg, last = self.cfg, rows[-1]
        k = cfg.loss_above_start
        if k is not None and last["test_loss"] > k * rows[0]["test_loss"]:
            return LOSS_ABOVE_START
        bound = cfg.consensus_above
        if bound is not None and last.get("consensus_distance", 0.0) > bound:
            return CONSENSUS_ABOVE
        n = cfg.chance_for
        if n is not None and len(rows) >= n:
            recent = rows[-n:]
            if all(r["round"] > 0 and r["test_accuracy"] <= self.chance for r in recent):
                return CHANCE_FOR
        return None


def explained(rule: str | None, cfg: DivergenceConfig) -> str:
    """What the rule that fired means, for the user: "the consensus distance exceeded 1e+06"."""
    if rule == LOSS_ABOVE_START:
        return f"the test loss exceeded {cfg.loss_above_start:g} times its first value"
    if rule == CONSENSUS_ABOVE:
        return f"the consensus distance exceeded {cfg.consensus_above:g}"
    if rule == CHANCE_FOR:
        return (
            f"the test accuracy was at chance (within {cfg.chance_margin:g}) for "
            f"{cfg.chance_for} evaluations in a row"
        )
    return "the model or its loss is no longer finite"
