"""Configuration pieces that algorithms share: local training and the round policy.

Algorithms compose these (``local: LocalConfig``) rather than inherit them, so each algorithm's
`Config` lists its own fields in one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    """Base for every scenario section: unknown fields are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True,
                              allow_inf_nan=False)


class SgdConfig(Strict):
    """SGD with optional heavy-ball momentum and decoupled-from-loss L2 weight decay
    (added to the gradient, as `torch.optim.SGD` does)."""

    name: Literal["sgd"] = "sgd"
    momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)


OptimizerConfig = SgdConfig


class LocalConfig(Strict):
    """What one client does between receiving a model and sending its update."""

    steps: int = Field(10, ge=1, le=1_000_000, description="local steps tau per round")
    batch_size: int = Field(32, ge=1, le=1_000_000)
    lr: float = Field(0.05, gt=0, description="client learning rate")
    sampling: Literal["with_replacement"] = Field(
        "with_replacement",
        description="minibatches drawn with replacement from the client's samples")
    optimizer: OptimizerConfig = SgdConfig()


class CohortConfig(Strict):
    """Who takes part in a round and when the server stops waiting."""

    clients_per_round: int | None = Field(None, ge=1, description="K clients per round")
    client_fraction: float | None = Field(
        None, gt=0, le=1, description="K = max(1, round(C * N)); 0.1 when neither is given")
    over_selection: float = Field(
        1.0, ge=1, le=100, description="select ceil(K * over_selection), keep the first K")
    deadline_s: float | None = Field(
        None, gt=0, description="drop clients not delivered this long after the round starts")

    def k(self, num_clients: int) -> int:
        if self.clients_per_round is not None:
            return self.clients_per_round
        return max(1, round((self.client_fraction or 0.1) * num_clients))

    @model_validator(mode="after")
    def _one_of(self):
        if self.clients_per_round is not None and self.client_fraction is not None:
            raise ValueError("give clients_per_round or client_fraction, not both")
        return self
