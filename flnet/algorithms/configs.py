"""Every algorithm's `Config`, in one light module (pydantic only, no torch), so the scenario
schema, `flnet validate` and `flnet schema` load without the maths. Each algorithm module
re-exports its own as `Config`; a new algorithm adds its class here and to `CONFIGS`."""

from __future__ import annotations

from typing import Annotated, Literal

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


# ------------------------------------------------------------ serverless: local steps, then gossip


class _Decentralized(Strict):
    """What every local-steps-then-gossip method shares: the graph and the local work."""

    topology: TopologyConfig = GraphTopology()
    local: LocalConfig = LocalConfig()


class _Timeout(Strict):
    timeout_s: float | None = Field(
        None,
        gt=0,
        description="a node stops waiting for messages this long after a gossip step "
        "starts; late ones count as lost",
    )


class DfedavgConfig(_Decentralized, _Timeout):
    """DFedAvg (Sun et al. 2022): K local SGD steps, then one gossip mix of the results."""

    name: Literal["dfedavg"] = "dfedavg"


class DfedavgmConfig(_Decentralized, _Timeout):
    """DFedAvgM (Sun et al. 2022): DFedAvg whose local steps carry momentum theta."""

    name: Literal["dfedavgm"] = "dfedavgm"
    momentum: float = Field(0.9, gt=0, lt=1, description="theta in x = y_k + theta (y_k - y_{k-1})")

    @model_validator(mode="after")
    def _plain_sgd(self) -> DfedavgmConfig:
        opt = self.local.optimizer
        if opt.name != "sgd" or opt.momentum:
            raise PydanticCustomError(
                "inconsistent",
                "DFedAvgM's local steps are SGD with its own momentum (algorithm.momentum); "
                "use optimizer sgd with momentum 0, got {opt}",
                {"field": "algorithm.local.optimizer", "opt": f"{opt.name} {opt.model_dump()}"},
            )
        return self


def _needs_sam(local: LocalConfig, method: str) -> None:
    if local.sam_rho is None:
        raise PydanticCustomError(
            "inconsistent",
            "{method} takes SAM local steps: give the radius (the OledFL paper uses 0.1), got null",
            {"field": "algorithm.local.sam_rho", "method": method},
        )


class DfedsamConfig(_Decentralized, _Timeout):
    """DFedSAM (Shi et al. 2023): DFedAvg with SAM local steps (radius local.sam_rho)."""

    name: Literal["dfedsam"] = "dfedsam"
    local: LocalConfig = LocalConfig(sam_rho=0.1)

    @model_validator(mode="after")
    def _sam(self) -> DfedsamConfig:
        _needs_sam(self.local, "DFedSAM")
        return self


class _Ole(Strict):
    beta: float = Field(
        0.4,
        ge=0,
        lt=1,
        description="Ole coefficient: x_0 = x + beta (x - x_K of the last round); stable "
        "only if lambda_min(W) > (beta - 1) / (beta + 1)",
    )


class OledflSgdConfig(_Decentralized, _Timeout, _Ole):
    """OledFL-SGD (Li et al.): DFedAvg started from the opposite lookahead point."""

    name: Literal["oledfl_sgd"] = "oledfl_sgd"


class OledflSamConfig(_Decentralized, _Timeout, _Ole):
    """OledFL-SAM (Li et al.): DFedSAM started from the opposite lookahead point."""

    name: Literal["oledfl_sam"] = "oledfl_sam"
    local: LocalConfig = LocalConfig(sam_rho=0.1)

    @model_validator(mode="after")
    def _sam(self) -> OledflSamConfig:
        _needs_sam(self.local, "OledFL-SAM")
        return self


class DflConfig(_Decentralized, _Timeout):
    """DFL (Liu et al.): tau1 = local.steps local steps, then tau2 = gossip_steps mixes."""

    name: Literal["dfl"] = "dfl"
    local: LocalConfig = LocalConfig(steps=4)
    gossip_steps: int = Field(4, ge=1, le=10_000, description="tau2: gossip steps per round")


class IdentityCompression(Strict):
    kind: Literal["identity"] = "identity"


class TopKCompression(Strict):
    kind: Literal["top_k"]
    fraction: float = Field(
        gt=0, le=1, description="delta = k / d: the share of coordinates kept (largest |x|)"
    )


class RandKCompression(Strict):
    kind: Literal["rand_k"]
    fraction: float = Field(
        gt=0, le=1, description="delta = k / d: the share of coordinates kept (uniform draw)"
    )


class QsgdCompression(Strict):
    kind: Literal["qsgd"]
    levels: int = Field(ge=1, le=2**20, description="s: quantisation levels")


class RandomGossipCompression(Strict):
    kind: Literal["random_gossip"]
    p: float = Field(gt=0, le=1, description="a node sends its message with probability p")


CompressionConfig = Annotated[
    IdentityCompression
    | TopKCompression
    | RandKCompression
    | QsgdCompression
    | RandomGossipCompression,
    Field(discriminator="kind"),
]


class CdflConfig(_Decentralized):
    """C-DFL (Liu et al., Algorithm 2): DFL whose gossip steps are CHOCO-Gossip steps on
    compressed innovations. No timeout: a lost q would split the public copies."""

    name: Literal["cdfl"] = "cdfl"
    local: LocalConfig = LocalConfig(steps=4)
    gossip_steps: int = Field(4, ge=1, le=10_000, description="tau2: gossip steps per round")
    consensus_step: float = Field(1.0, gt=0, le=1, description="gamma (the paper runs 1)")
    compression: CompressionConfig = IdentityCompression()
    order: Literal["paper", "compress_first"] = Field(
        "paper",
        description="paper: mix with the public copies, then compress (Algorithm 2); "
        "compress_first: compress, update the copies, then mix (CHOCO-SGD's order)",
    )


# The members of CONFIGS as one type, for annotations (scenario.AlgorithmConfig is built from
# CONFIGS at run time, which mypy cannot follow): keep the two in step.
AnyAlgorithmConfig = (
    FedAvgConfig
    | FedProxConfig
    | DpsgdConfig
    | FedBuffConfig
    | ScaffoldConfig
    | DfedavgConfig
    | DfedavgmConfig
    | DfedsamConfig
    | OledflSgdConfig
    | OledflSamConfig
    | DflConfig
    | CdflConfig
)

CONFIGS = {
    "fedavg": FedAvgConfig,
    "fedprox": FedProxConfig,
    "dpsgd": DpsgdConfig,
    "fedbuff": FedBuffConfig,
    "scaffold": ScaffoldConfig,
    "dfedavg": DfedavgConfig,
    "dfedavgm": DfedavgmConfig,
    "dfedsam": DfedsamConfig,
    "oledfl_sgd": OledflSgdConfig,
    "oledfl_sam": OledflSamConfig,
    "dfl": DflConfig,
    "cdfl": CdflConfig,
}
