"""Every algorithm's `Config`, in one light module (pydantic only, no torch), so the scenario
schema, `flnet validate` and `flnet schema` load without the maths. Each algorithm module
re-exports its own as `Config`; its record (`flnet.algorithms.records`) names it, and the
scenario's union is built from the records.

Configs compose rather than inherit from one another (equinox's rule): a concrete config is
`final`; what several share is a `Field` constant, a function their validators call, or an
abstract base. Each class lists its fields in the order they had when they were inherited, so
the schema and resolved scenarios keep theirs."""

from __future__ import annotations

from typing import Literal, Protocol, cast, final

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from flnet.config import (
    SERVER_OPTIMIZER_DESCRIPTION,
    SERVER_RULE_DESCRIPTION,
    CohortConfig,
    GraphTopology,
    LocalConfig,
    NoServerOptimizer,
    OptionalServerRule,
    PartialWorkConfig,
    PolynomialStaleness,
    ServerOptimizerConfig,
    StalenessConfig,
    Strict,
    TopologyConfig,
    UniformCohortConfig,
)
from flnet.schema.compression import CompressionConfig, IdentityCompression

TOPOLOGY_HELP = "who gossips with whom and the mixing weights, by `kind` (default: a ring)"

PARTIAL_WORK = Field(
    None,
    description="systems heterogeneity as in FedProx's experiments: clients that cannot do "
    "the full local work (deadline: what fits before cohort.deadline_s; stragglers: a random "
    "share of the cohort); FedProx aggregates their partial updates, FedAvg drops them",
)


class _PartialWorkNeedsADeadline(Strict):
    @model_validator(mode="after")
    def _deadline_given(self) -> _PartialWorkNeedsADeadline:
        partial = getattr(self, "partial_work", None)
        cohort: CohortConfig = getattr(self, "cohort")  # noqa: B009  # both subclasses have one
        if partial is not None and partial.kind == "deadline" and cohort.deadline_s is None:
            raise PydanticCustomError(
                "inconsistent",
                "partial work under a deadline needs algorithm.cohort.deadline_s (seconds)",
                {"field": "algorithm.partial_work.kind"},
            )
        return self


@final
class FedAvgConfig(_PartialWorkNeedsADeadline):
    name: Literal["fedavg"] = "fedavg"
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server_optimizer: ServerOptimizerConfig = Field(
        NoServerOptimizer(), description=SERVER_OPTIMIZER_DESCRIPTION
    )
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)
    partial_work: PartialWorkConfig | None = PARTIAL_WORK


@final
class FedProxConfig(_PartialWorkNeedsADeadline):
    name: Literal["fedprox"] = "fedprox"
    mu: float = Field(0.01, ge=0, description="proximal weight (the Delta-SGD code's example)")
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server_optimizer: ServerOptimizerConfig = Field(
        NoServerOptimizer(), description=SERVER_OPTIMIZER_DESCRIPTION
    )
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)
    partial_work: PartialWorkConfig | None = PARTIAL_WORK


@final
class DpsgdConfig(Strict):
    """D-PSGD (Lian et al. 2017): gossip on `topology`, one local step per exchange."""

    name: Literal["dpsgd"] = "dpsgd"
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
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


@final
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


@final
class FedAsyncConfig(Strict):
    """FedAsync (Xie, Koyejo and Gupta 2019): asynchronous clients; every arriving model is
    mixed into the server's with weight alpha * s(staleness). Defaults are from the paper's
    experiments: alpha 0.6, rho 0.005, FedAsync+Poly with a = 0.5."""

    name: Literal["fedasync"] = "fedasync"
    concurrency: int = Field(10, ge=1, description="clients training at once")
    alpha: float = Field(0.6, gt=0, le=1, description="mixing hyperparameter alpha")
    rho: float = Field(
        0.005, ge=0, description="weight of the clients' regularizer (rho / 2) ||x - x_tau||^2"
    )
    staleness: StalenessConfig = Field(
        PolynomialStaleness(), description="s: constant, polynomial (a) or hinge (a, b)"
    )
    local: LocalConfig = LocalConfig()


def _not_plain_sgd(field: str, value: object, allowed: str) -> PydanticCustomError:
    """SCAFFOLD's refusal of a client optimizer other than plain SGD, naming the field."""
    return PydanticCustomError(
        "inconsistent",
        "SCAFFOLD's option II control variates assume plain SGD steps of size eta_l; "
        "{value} is not allowed; {allowed}",
        {"field": field, "value": value, "allowed": allowed},
    )


@final
class ScaffoldConfig(Strict):
    name: Literal["scaffold"] = "scaffold"
    server_lr: float = Field(1.0, gt=0, description="global step size eta_g (1: x += mean dy)")
    cohort: UniformCohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server_optimizer: ServerOptimizerConfig = Field(
        NoServerOptimizer(), description=SERVER_OPTIMIZER_DESCRIPTION + " (replaces eta_g)"
    )
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)

    @model_validator(mode="after")
    def _plain_sgd_clients(self) -> ScaffoldConfig:
        """Option II's c_i+ = c_i - c + (x - y) / (K eta_l) assumes the clients took K plain
        SGD steps of size eta_l (Algorithm 1 line 10): another optimizer, momentum (y moves by
        the accumulated velocity, not eta_l times one gradient per step) or SAM (its gradients
        are taken at perturbed points) gives wrong control variates. Weight decay is allowed:
        it is plain SGD on f_i + (weight_decay / 2) ||y||^2, so option II holds for that f_i."""
        local = self.local
        if local.optimizer.name != "sgd":
            raise _not_plain_sgd(
                "algorithm.local.optimizer.name", repr(local.optimizer.name), "allowed: 'sgd'"
            )
        if local.optimizer.momentum:
            raise _not_plain_sgd(
                "algorithm.local.optimizer.momentum", local.optimizer.momentum, "allowed: 0"
            )
        if local.sam_rho is not None:
            raise _not_plain_sgd("algorithm.local.sam_rho", local.sam_rho, "allowed: null")
        return self

    @model_validator(mode="after")
    def _one_server_step_size(self) -> ScaffoldConfig:
        if self.server_optimizer.name != "none" and self.server_lr != 1.0:
            raise PydanticCustomError(
                "inconsistent",
                "a server optimizer takes the server step itself; leave server_lr at 1 "
                "and set algorithm.server_optimizer.lr, got {server_lr}",
                {"field": "algorithm.server_lr", "server_lr": self.server_lr},
            )
        return self


@final
class FedDynConfig(Strict):
    """FedDyn (Acar et al. 2021): a dynamic regulariser per client, the server's h."""

    name: Literal["feddyn"] = "feddyn"
    alpha: float = Field(
        0.01,
        gt=0,
        description="alpha, the dynamic-regularisation weight (the paper's grid: 0.1, 0.01, 0.001)",
    )
    cohort: UniformCohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()


@final
class MoonConfig(Strict):
    """MOON (Li et al. 2021): model-contrastive local loss, FedAvg's server."""

    name: Literal["moon"] = "moon"
    mu: float = Field(1.0, ge=0, description="weight of the contrastive term (Delta-SGD code: 1)")
    temperature: float = Field(
        0.5, gt=0, description="tau of the contrastive term (Delta-SGD code: 0.5)"
    )
    cohort: CohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server_optimizer: ServerOptimizerConfig = Field(
        NoServerOptimizer(), description=SERVER_OPTIMIZER_DESCRIPTION
    )
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)


AVERAGING_DESCRIPTION = (
    "how a block's predictor averages its rounds' models: uniform (the paper's "
    "eq. 7-8) or exponential (weights base^(r - j), the paper's experiments)"
)
AVERAGING_BASE = Field(
    0.5, gt=0, lt=1, description="exponential averaging's base (the paper's experiments: 0.5)"
)


@final
class MmPsgdConfig(Strict):
    """MM-PSGD (Ding et al. 2020, Algorithm 1): FedAvg's chain, one predictor per data block."""

    name: Literal["mm_psgd"] = "mm_psgd"
    averaging: Literal["uniform", "exponential"] = Field(
        "uniform", description=AVERAGING_DESCRIPTION
    )
    averaging_base: float = AVERAGING_BASE
    cohort: UniformCohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)


@final
class McPsgdConfig(Strict):
    """MC-PSGD (Ding et al. 2020, Algorithm 2): a block-mixed chain and one block-separate
    chain per block; predictor m folds in whichever has the lower mean client loss."""

    name: Literal["mc_psgd"] = "mc_psgd"
    averaging: Literal["uniform", "exponential"] = Field(
        "uniform", description=AVERAGING_DESCRIPTION
    )
    averaging_base: float = AVERAGING_BASE
    separate_lr: float | None = Field(
        None, gt=0, description="eta, the block-separate chains' step size (none: local.lr)"
    )
    loss_batch_size: int = Field(
        32,
        ge=1,
        description="rows (drawn with replacement) on which each client reports the two "
        "models' losses (the paper: its local data)",
    )
    cohort: UniformCohortConfig = CohortConfig()
    local: LocalConfig = LocalConfig()
    server: OptionalServerRule = Field(None, description=SERVER_RULE_DESCRIPTION)

    @model_validator(mode="after")
    def _fresh_optimizers(self) -> McPsgdConfig:
        if self.local.optimizer_state == "persist":
            raise PydanticCustomError(
                "inconsistent",
                "mc_psgd trains two chains per client: algorithm.local.optimizer_state must be "
                "'reset' (one persisted state cannot serve both)",
                {"field": "algorithm.local.optimizer_state"},
            )
        return self


Sampling = Literal["dedup_weighted", "with_replacement", "without_replacement"]
LambdaInit = Literal["uniform", "samples"]

# DRFA's fields, which DRDM has too (DRDM is DRFA plus FedDyn's regulariser)
DRFA_CLIENTS_PER_ROUND = Field(
    10, ge=1, description="m: clients drawn from lambda, and clients of the dual step"
)
DRFA_DUAL_LR = Field(0.01, gt=0, description="gamma; the dual step is tau * gamma")
DRFA_SAMPLING = Field(
    cast(Sampling, "dedup_weighted"),
    description="dedup_weighted: m draws with replacement from lambda, each distinct "
    "client trained once, weighted by its draws, its state updated once; "
    "with_replacement: as dedup_weighted but each draw updates the state; "
    "without_replacement: m distinct clients drawn in proportion to lambda",
)
DRFA_LAMBDA_INIT = Field(
    cast(LambdaInit, "uniform"), description="lambda at round 0: 1/N each, or n_i / n (DRFA's code)"
)
DRFA_DEADLINE_S = Field(
    None, gt=0, description="drop clients not delivered this long after a round trip starts"
)


def _tau_local_steps(local: LocalConfig) -> None:
    if local.epochs is not None:
        raise PydanticCustomError(
            "inconsistent",
            "DRFA and DRDM take tau local steps (t' is drawn from 1..tau and the dual "
            "step is tau * gamma); give algorithm.local.steps, not epochs",
            {"field": "algorithm.local.epochs"},
        )


@final
class DrfaConfig(Strict):
    """DRFA (Deng et al. 2021), as DRDM's paper writes it (its Algorithms 1-3 without FedDyn)."""

    name: Literal["drfa"] = "drfa"
    clients_per_round: int = DRFA_CLIENTS_PER_ROUND
    dual_lr: float = DRFA_DUAL_LR
    sampling: Sampling = DRFA_SAMPLING
    lambda_init: LambdaInit = DRFA_LAMBDA_INIT
    deadline_s: float | None = DRFA_DEADLINE_S
    local: LocalConfig = LocalConfig()

    @model_validator(mode="after")
    def _steps(self) -> DrfaConfig:
        _tau_local_steps(self.local)
        return self


@final
class DrdmConfig(Strict):
    """DRDM (Krouka et al. 2025): DRFA plus FedDyn's dynamic regulariser (Algorithms 1-3)."""

    name: Literal["drdm"] = "drdm"
    clients_per_round: int = DRFA_CLIENTS_PER_ROUND
    dual_lr: float = DRFA_DUAL_LR
    sampling: Sampling = DRFA_SAMPLING
    lambda_init: LambdaInit = DRFA_LAMBDA_INIT
    deadline_s: float | None = DRFA_DEADLINE_S
    local: LocalConfig = LocalConfig()
    mu: float = Field(
        0.1, gt=0, description="mu, the dynamic-regularisation weight (FedDyn's alpha)"
    )

    @model_validator(mode="after")
    def _steps(self) -> DrdmConfig:
        _tau_local_steps(self.local)
        return self


# ------------------------------------------------------------ serverless: local steps, then gossip
# Every local-steps-then-gossip method has the graph (`topology`) and the local work (`local`);
# all but C-DFL a gossip timeout.

GOSSIP_TIMEOUT_S = Field(
    None,
    gt=0,
    description="a node stops waiting for messages this long after a gossip step "
    "starts; late ones count as lost",
)


@final
class DfedavgConfig(Strict):
    """DFedAvg (Sun et al. 2022): K local SGD steps, then one gossip mix of the results."""

    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig()
    name: Literal["dfedavg"] = "dfedavg"


@final
class DfedavgmConfig(Strict):
    """DFedAvgM (Sun et al. 2022): DFedAvg whose local steps carry momentum theta."""

    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig()
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


@final
class DfedsamConfig(Strict):
    """DFedSAM (Shi et al. 2023): DFedAvg with SAM local steps (radius local.sam_rho)."""

    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig(sam_rho=0.1)
    name: Literal["dfedsam"] = "dfedsam"

    @model_validator(mode="after")
    def _sam(self) -> DfedsamConfig:
        _needs_sam(self.local, "DFedSAM")
        return self


OLE_BETA = Field(
    0.4,
    ge=0,
    lt=1,
    description="Ole coefficient: x_0 = x + beta (x - x_K of the last round); stable "
    "only if lambda_min(W) > (beta - 1) / (beta + 1)",
)


@final
class OledflSgdConfig(Strict):
    """OledFL-SGD (Li et al.): DFedAvg started from the opposite lookahead point."""

    beta: float = OLE_BETA
    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig()
    name: Literal["oledfl_sgd"] = "oledfl_sgd"


@final
class OledflSamConfig(Strict):
    """OledFL-SAM (Li et al.): DFedSAM started from the opposite lookahead point."""

    beta: float = OLE_BETA
    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig(sam_rho=0.1)
    name: Literal["oledfl_sam"] = "oledfl_sam"

    @model_validator(mode="after")
    def _sam(self) -> OledflSamConfig:
        _needs_sam(self.local, "OledFL-SAM")
        return self


@final
class DflConfig(Strict):
    """DFL (Liu et al.): tau1 = local.steps local steps, then tau2 = gossip_steps mixes."""

    timeout_s: float | None = GOSSIP_TIMEOUT_S
    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig(steps=4)
    name: Literal["dfl"] = "dfl"
    gossip_steps: int = Field(4, ge=1, le=10_000, description="tau2: gossip steps per round")


@final
class CdflConfig(Strict):
    """C-DFL (Liu et al., Algorithm 2): DFL whose gossip steps are CHOCO-Gossip steps on
    compressed innovations. No timeout: a lost q would split the public copies."""

    topology: TopologyConfig = Field(GraphTopology(), description=TOPOLOGY_HELP)
    local: LocalConfig = LocalConfig(steps=4)
    name: Literal["cdfl"] = "cdfl"
    gossip_steps: int = Field(4, ge=1, le=10_000, description="tau2: gossip steps per round")
    consensus_step: float = Field(1.0, gt=0, le=1, description="gamma (the paper runs 1)")
    compression: CompressionConfig = Field(
        IdentityCompression(), description="how each gossip message is compressed, by `kind`"
    )
    order: Literal["paper", "compress_first"] = Field(
        "paper",
        description="paper: mix with the public copies, then compress (Algorithm 2); "
        "compress_first: compress, update the copies, then mix (CHOCO-SGD's order)",
    )


class AnyAlgorithmConfig(Protocol):
    """`Scenario.algorithm` as the type checker sees it. At run time it is the union of the
    records' configs (`records.CONFIGS`), which mypy cannot follow. Code outside an algorithm's
    own module reads its name (the rest by getattr), so every config matches this without
    being listed here."""

    @property
    def name(self) -> str: ...
