"""The scenario's `run` and `output` sections: when to stop, how often to evaluate and
checkpoint, and where and how the tables are written."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flnet.config import Strict


class DivergenceConfig(Strict):
    """When a run counts as diverged: it then stops with status `diverged` and the rule that
    fired in its summary (`diverged_by`). The first evaluation (round 0, the initial model)
    is where `loss_above_start` starts from and is never counted as at chance."""

    non_finite: bool = Field(
        True,
        description="a model or an evaluation figure that is not finite (false: recorded as is)",
    )
    loss_above_start: float | None = Field(
        None, gt=1, description="test loss above this many times its first value (null: off)"
    )
    consensus_above: float | None = Field(
        None, gt=0, description="gossip: consensus distance above this bound (null: off)"
    )
    chance_for: int | None = Field(
        None,
        ge=1,
        description="this many evaluations in a row (after round 0) with test accuracy at "
        "chance, 1/classes + chance_margin or below (null: off)",
    )
    chance_margin: float = Field(
        0.01, ge=0, lt=1, description="accuracy this far above 1/classes still counts as chance"
    )


class RunConfig(Strict):
    """When to stop (the first limit reached) and how often to evaluate."""

    # below every random-stream tag (flnet.rng.Stream), so a stream key never equals a
    # minibatch key [seed, round, client]
    rounds: int = Field(
        100,
        ge=1,
        le=1_000_000,
        description="steps of the algorithm's pattern: rounds, gossip iterations or server updates",
    )
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description="stop at the end of the step (round, iteration, server update) that "
        "reaches this simulated time: that step runs to its end, it is not cut at the budget",
    )
    energy_budget_j: float | None = Field(
        None,
        gt=0,
        description="stop at the end of the step that reaches this energy (not cut at it)",
    )
    target_accuracy: float | None = Field(
        None,
        gt=0,
        le=1,
        description="stop at the first evaluation whose test accuracy reaches it; also the "
        "target flnet analyze reads costs to (null: run every round; analyze uses 0.9)",
    )
    eval_every: int = Field(
        1, ge=1, description="steps (rounds, iterations, server updates) between evaluations"
    )
    checkpoint_every: int | None = Field(
        None, ge=1, description="steps between checkpoints (null: by wall time only)"
    )
    checkpoint_interval_s: float | None = Field(
        60.0, gt=0, description="wall-clock seconds between checkpoints (null: by rounds only)"
    )
    threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="threads a cohort trained in several calls (CNNs on the CPU take one or "
        "two clients a call) is split over, and a CNN's evaluation passes; results are the "
        "same bit for bit for any number. "
        "One by default: on a shared, loaded 2-core machine two measured no faster "
        "(benchmarks/cohort_threads.py); on idle cores, set it to their number",
    )
    divergence: DivergenceConfig = DivergenceConfig()
    global_train_loss: bool = Field(
        False,
        description="also record the global model's mean loss over every training row at "
        "each evaluation (global_train_loss; a forward pass over the training set)",
    )


class OutputConfig(Strict):
    dir: str | None = Field(None, description="default: runs/<scenario name>")
    format: Literal["parquet", "csv"] = Field(
        "parquet", description="file format of records and ledger"
    )
