"""Every algorithm's `Config`, in one light module (pydantic only, no torch), so the scenario
schema, `flnet validate` and `flnet schema` load without the maths. Each algorithm module
re-exports its own as `Config`; a new algorithm adds its class here and to `CONFIGS`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from flnet.config import CohortConfig, GraphTopology, LocalConfig, Strict, TopologyConfig


class FedAvgConfig(Strict):
    name: Literal["fedavg"] = "fedavg"
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()


class FedProxConfig(Strict):
    name: Literal["fedprox"] = "fedprox"
    mu: float = Field(0.01, ge=0, description="proximal weight (the Delta-SGD code's example)")
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()


class DpsgdConfig(Strict):
    """D-PSGD (Lian et al. 2017): gossip on `topology`, one local step per exchange."""

    name: Literal["dpsgd"] = "dpsgd"
    topology: TopologyConfig = GraphTopology()
    local: LocalConfig = LocalConfig(steps=1)
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="a node stops waiting for messages this long after the "
        "iteration starts; late ones count as lost",
    )

    @model_validator(mode="after")
    def _one_step(self) -> DpsgdConfig:
        if self.local.steps != 1:
            raise PydanticCustomError(
                "inconsistent",
                "D-PSGD takes one gradient step per communication (Lian et al. "
                "2017, Algorithm 1); must be 1, got {steps}",
                {"field": "algorithm.local.steps", "steps": self.local.steps},
            )
        return self


class FedBuffConfig(Strict):
    """FedBuff (Nguyen et al. 2022): asynchronous clients, a buffer of K deltas."""

    name: Literal["fedbuff"] = "fedbuff"
    concurrency: int = Field(10, ge=1, description="clients training at once (C)")
    buffer_size: int = Field(5, ge=1, description="deltas per server update (K)")
    server_lr: float = Field(1.0, gt=0, description="eta_g")
    staleness_weighting: Literal["sqrt", "none"] = Field(
        "sqrt", description="sqrt: 1/sqrt(1 + staleness); none: every delta weighs 1"
    )
    local: LocalConfig = LocalConfig()


class ScaffoldConfig(Strict):
    name: Literal["scaffold"] = "scaffold"
    server_lr: float = Field(1.0, gt=0, description="global step size eta_g (1: x += mean dy)")
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()

    @model_validator(mode="after")
    def _has_a_learning_rate(self) -> ScaffoldConfig:
        if self.local.optimizer.default_lr is None:
            raise ValueError(
                f"local.optimizer: option II control variates need the local "
                f"learning rate eta_l; {self.local.optimizer.name} has none "
                "(use sgd, adam or adagrad)"
            )
        return self


class FedDynConfig(Strict):
    """FedDyn (Acar et al. 2021): a dynamic regulariser per client, the server's h."""

    name: Literal["feddyn"] = "feddyn"
    alpha: float = Field(
        0.01,
        gt=0,
        description="alpha, the dynamic-regularisation weight (the paper's grid: 0.1, 0.01, 0.001)",
    )
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()


class MoonConfig(Strict):
    """MOON (Li et al. 2021): model-contrastive local loss, FedAvg's server."""

    name: Literal["moon"] = "moon"
    mu: float = Field(1.0, ge=0, description="weight of the contrastive term (Delta-SGD code: 1)")
    temperature: float = Field(
        0.5, gt=0, description="tau of the contrastive term (Delta-SGD code: 0.5)"
    )
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()


Sampling = Literal["dedup_weighted", "with_replacement", "without_replacement"]


class DrfaConfig(Strict):
    """DRFA (Deng et al. 2021), as DRDM's paper writes it (its Algorithms 1-3 without FedDyn)."""

    name: Literal["drfa"] = "drfa"
    clients_per_round: int = Field(
        10, ge=1, description="m: clients drawn from lambda, and clients of the dual step"
    )
    dual_lr: float = Field(0.01, gt=0, description="gamma; the dual step is tau * gamma")
    sampling: Sampling = Field(
        "dedup_weighted",
        description="dedup_weighted: m draws with replacement from lambda, each distinct "
        "client trained once, weighted by its draws, its state updated once; "
        "with_replacement: as dedup_weighted but each draw updates the state; "
        "without_replacement: m distinct clients drawn in proportion to lambda",
    )
    lambda_init: Literal["uniform", "samples"] = Field(
        "uniform", description="lambda at round 0: 1/N each, or n_i / n (DRFA's code)"
    )
    deadline_s: float | None = Field(
        None, gt=0, description="drop clients not delivered this long after a round trip starts"
    )
    local: LocalConfig = LocalConfig()

    @model_validator(mode="after")
    def _steps(self) -> DrfaConfig:
        if self.local.epochs is not None:
            raise PydanticCustomError(
                "inconsistent",
                "DRFA and DRDM take tau local steps (t' is drawn from 1..tau and the dual "
                "step is tau * gamma); give algorithm.local.steps, not epochs",
                {"field": "algorithm.local.epochs"},
            )
        return self


class DrdmConfig(DrfaConfig):
    """DRDM (Krouka et al. 2025): DRFA plus FedDyn's dynamic regulariser (Algorithms 1-3)."""

    name: Literal["drdm"] = "drdm"  # type: ignore[assignment]  # a subclass names itself
    mu: float = Field(
        0.1, gt=0, description="mu, the dynamic-regularisation weight (FedDyn's alpha)"
    )


# The members of CONFIGS as one type, for annotations (scenario.AlgorithmConfig is built from
# CONFIGS at run time, which mypy cannot follow): keep the two in step.
AnyAlgorithmConfig = (
    FedAvgConfig
    | FedProxConfig
    | DpsgdConfig
    | FedBuffConfig
    | ScaffoldConfig
    | FedDynConfig
    | MoonConfig
    | DrfaConfig
    | DrdmConfig
)

CONFIGS = {
    "fedavg": FedAvgConfig,
    "fedprox": FedProxConfig,
    "dpsgd": DpsgdConfig,
    "fedbuff": FedBuffConfig,
    "scaffold": ScaffoldConfig,
    "feddyn": FedDynConfig,
    "moon": MoonConfig,
    "drfa": DrfaConfig,
    "drdm": DrdmConfig,
}
