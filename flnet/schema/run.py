"""The scenario's `run` and `output` sections: when to stop, how often to evaluate and
checkpoint, and where and how the tables are written."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flnet.config import Strict


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
    target_accuracy: float | None = Field(None, gt=0, le=1)
    eval_every: int = Field(
        1, ge=1, description="steps (rounds, iterations, server updates) between evaluations"
    )
    checkpoint_every: int | None = Field(
        None, ge=1, description="steps between checkpoints (null: by wall time only)"
    )
    checkpoint_interval_s: float | None = Field(
        60.0, gt=0, description="wall-clock seconds between checkpoints (null: by rounds only)"
    )


class OutputConfig(Strict):
    dir: str | None = Field(None, description="default: runs/<scenario name>")
    format: Literal["parquet", "csv"] = "parquet"
