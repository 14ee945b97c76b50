"""Configuration pieces that algorithms share: local training and the round policy.

Algorithms compose these (``local: LocalConfig``) rather than inherit them, so each algorithm's
`Config` lists its own fields in one place.
"""

from __future__ import annotations

import math
import types
from decimal import ROUND_HALF_UP, Decimal
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError


class Strict(BaseModel):
    """Base for every scenario section: unknown fields are errors, values are immutable, and
    true/false is not a number (pydantic would read them as 1 and 0)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )

    @model_validator(mode="before")
    @classmethod
    def _booleans_are_not_numbers(cls, data: Any) -> Any:
        for name, value in data.items() if isinstance(data, dict) else ():
            if isinstance(value, bool) and name in cls.model_fields:
                kinds = _types_in(cls.model_fields[name].annotation)
                if bool not in kinds and kinds & {int, float}:
                    raise PydanticCustomError(
                        "not_a_number",
                        "{field_name}: expected a number, got {value}",
                        {"field_name": name, "value": str(value).lower()},
                    )
        return data


def _types_in(annotation: Any) -> set:
    """The plain types an annotation admits: float | None -> {float, NoneType}."""
    args = get_args(annotation)
    if get_origin(annotation) is Annotated:
        return _types_in(args[0])
    if args and get_origin(annotation) in (Union, types.UnionType):
        return set().union(*map(_types_in, args))
    return {annotation} if isinstance(annotation, type) else set()


class SgdConfig(Strict):
    """SGD with optional heavy-ball momentum and L2 weight decay added to the gradient, as
    `torch.optim.SGD` does. SGDM of the Delta-SGD paper is momentum 0.9."""

    default_lr: ClassVar[float] = 0.05
    name: Literal["sgd"] = "sgd"
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy-ball momentum (0: plain SGD)")
    weight_decay: float = Field(0.0, ge=0, description="L2 coefficient added to the gradient")


class AdamConfig(Strict):
    """Adam (Kingma & Ba 2015) as `torch.optim.Adam`; default lr 0.001 (the Delta-SGD paper's
    tuned value and torch's default)."""

    default_lr: ClassVar[float] = 1e-3
    name: Literal["adam"]
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta1")
    b2: float = Field(0.999, ge=0, lt=1, description="second-moment decay beta2")
    eps: float = Field(1e-8, gt=0, description="added to the denominator's square root")
    weight_decay: float = Field(0.0, ge=0, description="L2 coefficient added to the gradient")


class AdagradConfig(Strict):
    """Adagrad (Duchi et al. 2011) as `torch.optim.Adagrad`; default lr 0.01 (the Delta-SGD
    paper's tuned value and torch's default)."""

    default_lr: ClassVar[float] = 1e-2
    name: Literal["adagrad"]
    eps: float = Field(1e-10, gt=0, description="added to the denominator's square root")
    initial_accumulator: float = Field(0.0, ge=0, description="starting sum of squared gradients")
    weight_decay: float = Field(0.0, ge=0, description="L2 coefficient added to the gradient")


class SpsConfig(Strict):
    """Stochastic Polyak step (Loizou et al. 2021): (f_i(x) - f*) / (c ||g||^2 + eps). Defaults
    are those the Delta-SGD paper used: f* = 0, c = 0.5, no cap."""

    default_lr: ClassVar[None] = None
    name: Literal["sps"]
    c: float = Field(0.5, gt=0, description="c in the step's denominator")
    f_star: float = Field(0.0, description="f*, the loss the step aims at (a lower bound)")
    max_step: float | None = Field(None, gt=0, description="SPS_max cap on the step size")
    eps: float = Field(1e-8, ge=0, description="added to the denominator")


class DeltaSgdConfig(Strict):
    """Delta-SGD (Kim et al.), Algorithm 1 with the paper's defaults gamma 2, delta 0.1,
    eta0 0.2, theta0 1; two gradients a step on the same minibatch."""

    default_lr: ClassVar[None] = None
    name: Literal["delta_sgd"]
    eta0: float = Field(0.2, gt=0, description="first step size")
    theta0: float = Field(1.0, gt=0, description="first step-size ratio")
    gamma: float = Field(2.0, gt=0, description="amplifier of the curvature term")
    delta: float = Field(0.1, gt=0, description="factor of theta in the growth term")


OptimizerConfig = Annotated[
    SgdConfig | AdamConfig | AdagradConfig | SpsConfig | DeltaSgdConfig, Field(discriminator="name")
]


class ConstantLr(Strict):
    """The same learning rate every round (what no schedule, null, also means)."""

    kind: Literal["constant"]

    def multiplier(self, round: int) -> float:
        return 1.0


class ExponentialLr(Strict):
    """lr * gamma^(t - 1) in round t (torch's ExponentialLR stepped once a round): OledFL's
    0.1 * 0.998^t (its digest, l.275), the first round at lr."""

    kind: Literal["exponential"]
    gamma: float = Field(gt=0, le=1, description="factor per round (OledFL: 0.998)")

    def multiplier(self, round: int) -> float:
        return self.gamma ** (max(round, 1) - 1)


class StepLr(Strict):
    """lr times `gamma` once per `every_rounds` rounds (torch's StepLR), or at each round of
    `at_rounds` (torch's MultiStepLR): Delta-SGD's baselines divide by 10 after 50% and again
    after 75% of the rounds (gamma 0.1, at_rounds [T/2, 3T/4]). The change takes effect in
    the round after the one named."""

    kind: Literal["step"]
    gamma: float = Field(gt=0, le=1, description="multiplies lr at each step (Delta-SGD: 0.1)")
    every_rounds: int | None = Field(None, ge=1, description="step after every k rounds")
    at_rounds: tuple[Annotated[int, Field(ge=1)], ...] | None = Field(
        None, description="step after each of these rounds (a list, increasing)"
    )

    @model_validator(mode="after")
    def _every_or_at(self) -> StepLr:
        if (self.every_rounds is None) == (self.at_rounds is None):
            raise ValueError("give every_rounds or at_rounds, one of them")
        if self.at_rounds is not None and list(self.at_rounds) != sorted(set(self.at_rounds)):
            raise ValueError("at_rounds must increase")
        return self

    def multiplier(self, round: int) -> float:
        done = max(round, 1) - 1  # rounds finished before this one
        if self.every_rounds is not None:
            steps = done // self.every_rounds
        else:
            steps = sum(r <= done for r in self.at_rounds or ())
        return self.gamma**steps


class CosineLr(Strict):
    """Cosine annealing from lr to floor * lr over `rounds` rounds, then floor * lr (torch's
    CosineAnnealingLR with T_max = rounds, stepped once a round; Loshchilov & Hutter 2017
    without restarts): lr (floor + (1 - floor) (1 + cos(pi (t - 1) / rounds)) / 2)."""

    kind: Literal["cosine"]
    rounds: int = Field(ge=1, description="rounds to reach the floor (e.g. run.rounds)")
    floor: float = Field(0.0, ge=0, le=1, description="the last lr as a share of lr")

    def multiplier(self, round: int) -> float:
        done = min(max(round, 1) - 1, self.rounds)
        return self.floor + (1 - self.floor) * (1 + math.cos(math.pi * done / self.rounds)) / 2


# Per round only: none of the five papers changes the rate within a round's local steps
# (OledFL decays per round, Delta-SGD's baselines step per round; DFL, block-cyclic and DRDM
# keep it constant), so there is no per-step schedule.
LrScheduleConfig = Annotated[
    ConstantLr | ExponentialLr | StepLr | CosineLr, Field(discriminator="kind")
]


class LocalConfig(Strict):
    """What one client does between receiving a model and sending its update: `steps` local
    steps on minibatches drawn with replacement, or `epochs` passes over its own data in
    minibatches drawn without replacement (a client with more data takes more steps)."""

    steps: int | None = Field(
        10, ge=1, le=1_000_000, description="local steps tau per round (null with epochs)"
    )
    epochs: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="E passes over the client's data per round, ceil(n_k / B) * E steps",
    )
    drop_last: bool = Field(
        False, description="epochs: drop each epoch's short last batch (floor(n_k / B) * E)"
    )
    batch_size: int = Field(32, ge=1, le=1_000_000, description="samples per minibatch B")
    sampling: Literal["with_replacement"] = Field(
        "with_replacement",
        description="steps: minibatches drawn with replacement from the client's samples",
    )
    optimizer: OptimizerConfig = Field(
        SgdConfig(), description="the local optimizer, by `name` (default SGD)"
    )
    lr: float | None = Field(
        None, gt=0, description="learning rate of sgd, adam, adagrad; default: the optimizer's"
    )
    lr_schedule: LrScheduleConfig | None = Field(
        None,
        description="the learning rate per round: constant, exponential, step or cosine "
        "(null: constant); sgd, adam, adagrad only",
    )
    sam_rho: float | None = Field(
        None, gt=0, description="wrap the optimizer in SAM with this radius (2x gradients)"
    )
    optimizer_state: Literal["reset", "persist"] = Field(
        "reset", description="reset: fresh each round; persist: kept per client across rounds"
    )
    path: Literal["auto", "batched", "sequential"] = Field(
        "auto",
        description="train the cohort in one batched call, one client at a time, or "
        "in as large batches as fit in memory (auto)",
    )

    @model_validator(mode="before")
    @classmethod
    def _sgd_by_default(cls, data: Any) -> Any:
        """`optimizer:` without `name:` is SGD, as before optimizers had names."""
        opt = data.get("optimizer") if isinstance(data, dict) else None
        if isinstance(opt, dict) and "name" not in opt:
            data = {**data, "optimizer": {"name": "sgd", **opt}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _epochs_replace_steps(cls, data: Any) -> Any:
        """`epochs:` without `steps:` means epochs mode; both set is a mistake."""
        if isinstance(data, dict) and data.get("epochs") is not None:
            if data.get("steps") is not None:
                raise PydanticCustomError(
                    "steps_or_epochs", "give steps or epochs, not both (set the other to null)"
                )
            data = {**data, "steps": None}
        return data

    @model_validator(mode="after")
    def _one_mode(self) -> LocalConfig:
        if self.steps is None and self.epochs is None:
            raise ValueError("give steps (local steps per round) or epochs")
        if self.drop_last and self.epochs is None:
            raise ValueError("drop_last applies to epochs only")
        return self

    @property
    def mode(self) -> str:
        return "steps" if self.epochs is None else "epochs"

    @field_validator("lr", "lr_schedule")
    @classmethod
    def _lr_is_used(cls, value: Any, info: ValidationInfo) -> Any:
        opt = info.data.get("optimizer")
        if value is not None and opt is not None and opt.default_lr is None:
            raise ValueError(
                f"{opt.name} sets its own step size; remove {info.field_name} or set it to null"
            )
        return value

    def lr_at(self, round: int | None = None) -> float | None:
        """The learning rate of round `round` (1, 2, ...: the schedule's; None or round 0, the
        records' row before training: the first round's): `lr`, or the optimizer's default,
        times the schedule's factor. None for optimizers that set their own step size."""
        base = self.lr if self.lr is not None else self.optimizer.default_lr
        if base is None or self.lr_schedule is None or round is None:
            return base
        return base * self.lr_schedule.multiplier(round)


class NoServerOptimizer(Strict):
    """The algorithm's own server step (FedAvg's weighted mean, SCAFFOLD's eta_g step)."""

    name: Literal["none"] = "none"


ServerVariant = Literal["reddi", "flower"]
VARIANT_DESCRIPTION = (
    "reddi: Reddi et al. 2021, Algorithm 2 (plain mean of the client deltas, no bias "
    "correction, v starts at tau^2); flower: Flower 1.41's strategy (sample-weighted "
    "mean, v starts at 0, FedAdam's bias-corrected eta, FedAdagrad without momentum)"
)


class FedAvgMConfig(Strict):
    """Server momentum (Hsu et al. 2019; Reddi et al.'s FedAvgM): m = momentum m + Delta,
    x += lr m. lr 1 and momentum 0 is FedAvg's step."""

    name: Literal["fedavgm"]
    lr: float = Field(1.0, gt=0, description="server learning rate eta")
    momentum: float = Field(0.9, ge=0, lt=1, description="server momentum beta")
    variant: ServerVariant = Field("reddi", description=VARIANT_DESCRIPTION)


class FedAdamConfig(Strict):
    """FedAdam (Reddi et al. 2021, Algorithm 2): v = b2 v + (1 - b2) Delta^2."""

    name: Literal["fedadam"]
    lr: float = Field(0.1, gt=0, description="server learning rate eta (Flower's default)")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta1")
    b2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta2")
    tau: float = Field(1e-3, gt=0, description="adaptivity tau, added to sqrt(v)")
    variant: ServerVariant = Field("reddi", description=VARIANT_DESCRIPTION)


class FedYogiConfig(Strict):
    """FedYogi (Reddi et al. 2021, Algorithm 2): v = v - (1 - b2) Delta^2 sign(v - Delta^2)."""

    name: Literal["fedyogi"]
    lr: float = Field(0.01, gt=0, description="server learning rate eta (Flower's default)")
    b1: float = Field(0.9, ge=0, lt=1, description="first-moment decay beta1")
    b2: float = Field(0.99, ge=0, lt=1, description="second-moment decay beta2")
    tau: float = Field(1e-3, gt=0, description="adaptivity tau, added to sqrt(v)")
    variant: ServerVariant = Field("reddi", description=VARIANT_DESCRIPTION)


class FedAdagradConfig(Strict):
    """FedAdagrad (Reddi et al. 2021, Algorithm 2): v = v + Delta^2. Flower's variant has no
    momentum (beta1 = 0): b1 defaults to 0.9 under reddi and 0 under flower, which refuses
    any other."""

    name: Literal["fedadagrad"]
    lr: float = Field(0.1, gt=0, description="server learning rate eta (Flower's default)")
    b1: float | None = Field(
        None, ge=0, lt=1, description="first-moment decay beta1 (reddi 0.9, flower 0)"
    )
    tau: float = Field(1e-3, gt=0, description="adaptivity tau, added to sqrt(v)")
    variant: ServerVariant = Field("reddi", description=VARIANT_DESCRIPTION)

    @model_validator(mode="after")
    def _flower_has_no_momentum(self) -> FedAdagradConfig:
        if self.variant == "flower" and self.b1 not in (None, 0.0):
            raise PydanticCustomError(
                "inconsistent",
                "Flower's FedAdagrad has no server momentum (beta1 = 0); "
                "remove b1 or set it to 0, got {b1}",
                {"field": "algorithm.server_optimizer.b1", "b1": self.b1},
            )
        return self

    @property
    def beta1(self) -> float:
        """The b1 in effect."""
        return self.b1 if self.b1 is not None else (0.9 if self.variant == "reddi" else 0.0)


ServerOptimizerConfig = Annotated[
    NoServerOptimizer | FedAvgMConfig | FedAdamConfig | FedYogiConfig | FedAdagradConfig,
    Field(discriminator="name"),
]
SERVER_OPTIMIZER_DESCRIPTION = (
    "a server optimizer over the pseudo-gradient -Delta_t (Reddi et al. 2021): none, "
    "fedavgm, fedadam, fedyogi, fedadagrad"
)


class ServerRuleConfig(Strict):
    """How the server combines the delivered models (`flnet.learn.aggregate.combine`):
    weighted_mean, sum_k n_k x_k / sum_k n_k with n_k the sample counts (FedAvg's line 8);
    mean, each client weighing the same; median, coordinate-wise; trimmed_mean, per coordinate
    the mean without the floor(trim_fraction * D) largest and as many smallest of the D
    delivered values (the last two: Yin et al., "Byzantine-Robust Distributed Learning", ICML
    2018; each client weighs the same, its sample count being its own claim)."""

    rule: Literal["weighted_mean", "mean", "median", "trimmed_mean"] = Field(
        description="weighted_mean, mean, median or trimmed_mean"
    )
    trim_fraction: float | None = Field(
        None,
        ge=0,
        lt=0.5,
        description="trimmed_mean only (and required there): the share dropped at each end",
    )

    @model_validator(mode="after")
    def _trim_with_trimmed_mean(self) -> ServerRuleConfig:
        if self.rule == "trimmed_mean" and self.trim_fraction is None:
            raise PydanticCustomError(
                "inconsistent",
                "trimmed_mean needs a trim_fraction in [0, 0.5) (Yin et al. 2018 take 0.1)",
                {"field": "algorithm.server.trim_fraction"},
            )
        if self.rule != "trimmed_mean" and self.trim_fraction is not None:
            raise PydanticCustomError(
                "inconsistent",
                "only trimmed_mean trims; remove trim_fraction (rule {rule})",
                {"field": "algorithm.server.trim_fraction", "rule": self.rule},
            )
        return self


def _not_with_a_server_optimizer(
    rule: ServerRuleConfig | None, info: ValidationInfo
) -> ServerRuleConfig | None:
    """A server rule and a server optimizer are two answers to one question (what the server
    does with the delivered models): the optimizer steps along its own mean of the deltas
    (variant reddi: plain, flower: sample-weighted), so the pair is refused, not guessed at.
    Needs the algorithm's `server` field declared after its `server_optimizer`."""
    optimizer = info.data.get("server_optimizer")
    if rule is not None and optimizer is not None and optimizer.name != "none":
        raise PydanticCustomError(
            "inconsistent",
            "a server optimizer ({optimizer}) steps along its own mean of the deltas; give "
            "algorithm.server or algorithm.server_optimizer, not both",
            {"field": "algorithm.server", "optimizer": optimizer.name},
        )
    return rule


# an algorithm's `server` field: null is its own rule
OptionalServerRule = Annotated[
    ServerRuleConfig | None, AfterValidator(_not_with_a_server_optimizer)
]
SERVER_RULE_DESCRIPTION = (
    "how the server combines the delivered models: weighted_mean (by sample counts), mean, "
    "median or trimmed_mean (coordinate-wise, each client weighing the same); null: the "
    "algorithm's own (FedAvg, FedProx, MOON: weighted_mean; SCAFFOLD (its dy), MM-PSGD, "
    "MC-PSGD: mean). Not with a server_optimizer"
)


CohortSampling = Literal[
    "uniform", "by_data_size_with_replacement", "by_data_size_without_replacement"
]


class CohortConfig(Strict):
    """Who takes part in a round and when the server stops waiting."""

    clients_per_round: int | None = Field(None, ge=1, description="K clients per round")
    client_fraction: float | None = Field(
        None, gt=0, le=1, description="K = max(1, C * N rounded half up); 0.1 when neither is given"
    )
    over_selection: float = Field(
        1.0, ge=1, le=100, description="select ceil(K * over_selection), keep the first K"
    )
    deadline_s: float | None = Field(
        None, gt=0, description="drop clients not delivered this long after the round starts"
    )
    sampling: CohortSampling = Field(
        "uniform",
        description="uniform: K distinct clients, models weighed by sample count; "
        "by_data_size_with_replacement: K draws with p_k = n_k / n, each draw weighing the "
        "same (FedProx's Algorithm 2); by_data_size_without_replacement: K distinct clients "
        "drawn by size, each weighing the same (flnet.algorithms.selection)",
    )

    def k(self, num_clients: int) -> int:
        """K, or C * N rounded half up (0.15 of 10 clients is 2, 0.25 is 3), at least 1. The
        product is taken in decimal, as the fraction was written, so 0.35 * 10 is exactly 3.5."""
        if self.clients_per_round is not None:
            return self.clients_per_round
        exact = Decimal(repr(self.client_fraction or 0.1)) * num_clients
        return max(1, int(exact.to_integral_value(rounding=ROUND_HALF_UP)))

    @model_validator(mode="after")
    def _one_of(self) -> CohortConfig:
        if self.clients_per_round is not None and self.client_fraction is not None:
            raise ValueError("give clients_per_round or client_fraction, not both")
        if self.sampling == "by_data_size_with_replacement" and self.over_selection != 1:
            raise ValueError(
                "over_selection keeps the first K distinct clients to arrive; with draws "
                "with replacement use by_data_size_without_replacement or over_selection 1"
            )
        return self


def _samples_uniformly(cohort: CohortConfig) -> CohortConfig:
    """An algorithm whose paper samples uniformly and whose server step is not FedAvg's mean
    (SCAFFOLD, FedDyn, MM-PSGD, MC-PSGD) refuses sampling by data size rather than guess how
    its aggregate should weigh the draws."""
    if cohort.sampling != "uniform":
        raise PydanticCustomError(
            "inconsistent",
            "sampling {sampling} is FedProx's device sampling, for FedAvg, FedProx and MOON; "
            "this algorithm samples uniformly",
            {"field": "algorithm.cohort.sampling", "sampling": cohort.sampling},
        )
    return cohort


# the cohort of an algorithm that samples uniformly only
UniformCohortConfig = Annotated[CohortConfig, AfterValidator(_samples_uniformly)]


class DeadlinePartialWork(Strict):
    """FedProx's systems heterogeneity under a deadline (Li et al. 2020, Section 5.2): each
    client does the local steps that fit, floor((deadline_s - its download and upload time
    alone on the band) / its step time), at least 1 and at most the full work, decided when
    the round starts. FedProx aggregates the partial updates; FedAvg gives every client the
    full work and drops those still busy at the deadline."""

    kind: Literal["deadline"]


class StragglerPartialWork(Strict):
    """The FedProx code's stragglers (litian96/FedProx, trainers/fedprox.py): in each round
    all but round(K * (1 - fraction)) of the K selected clients straggle and do a number of
    local epochs (or steps) drawn uniformly from [1, E] (the paper's text; the code stops at
    E - 1); FedAvg (trainers/fedavg.py) trains only the others."""

    kind: Literal["stragglers"]
    fraction: float = Field(
        ge=0, le=1, description="share of each round's cohort that straggles (drop_percent)"
    )


PartialWorkConfig = Annotated[
    DeadlinePartialWork | StragglerPartialWork, Field(discriminator="kind")
]


class ConstantStaleness(Strict):
    """s(staleness) = 1: every update mixes in with the same weight (FedAsync+Const)."""

    kind: Literal["constant"]


class PolynomialStaleness(Strict):
    """s(staleness) = (staleness + 1)^-a (FedAsync+Poly; a = 1/2 is FedBuff's sqrt)."""

    kind: Literal["polynomial"] = "polynomial"
    a: float = Field(0.5, gt=0, description="exponent (the FedAsync paper's 0.5)")


class HingeStaleness(Strict):
    """s(staleness) = 1 up to b, then 1 / (a (staleness - b) + 1) (FedAsync+Hinge)."""

    kind: Literal["hinge"]
    a: float = Field(10.0, gt=0, description="slope past b (the FedAsync paper's 10)")
    b: int = Field(4, ge=0, description="staleness still weighed 1 (the FedAsync paper's 4)")


StalenessConfig = Annotated[
    ConstantStaleness | PolynomialStaleness | HingeStaleness, Field(discriminator="kind")
]


class _TopologyCommon(Strict):
    weights: Literal["metropolis_hastings", "uniform"] = Field(
        "metropolis_hastings",
        description="metropolis_hastings: 1/(1+max(deg_i,deg_j)), doubly stochastic on any "
        "graph; uniform: 1/(deg_i+1) over self and neighbours, row-stochastic",
    )
    laziness: float = Field(
        0.0, ge=0, lt=1, description="W <- (1-a) W + a I; 0.5 is the lazy (I + W) / 2"
    )


class GraphTopology(_TopologyCommon):
    """A fixed graph among the gossiping nodes; grid and torus need a square node count; star
    joins node 0 to every other."""

    kind: Literal["ring", "grid", "torus", "exponential", "full", "star"] = "ring"


class ErdosRenyiTopology(_TopologyCommon):
    """G(n, p) drawn from the seed (stream TOPOLOGY), redrawn until connected."""

    kind: Literal["erdos_renyi"]
    p: float = Field(ge=0, le=1, description="edge probability")


class GeometricTopology(_TopologyCommon):
    """The random geometric graph of the clients' positions (clients.positions): i ~ j when
    they are at most radius_m apart; refused when disconnected."""

    kind: Literal["random_geometric"]
    radius_m: float = Field(gt=0, description="radio range: the longest edge")


class EdgesTopology(_TopologyCommon):
    """An undirected graph given as its edge list, nodes 0..n-1."""

    kind: Literal["edges"]
    edges: list[Annotated[list[int], Field(min_length=2, max_length=2)]] = Field(
        description="[[i, j], ...], each undirected edge once, no self loops"
    )


class RandomKTopology(_TopologyCommon):
    """Time-varying: every iteration each node draws k distinct other nodes (stream NEIGHBOURS,
    keyed by the iteration). directed (the default: DisPFL's code, `_benefit_choose`, on which
    the OledFL digest says OledFL's experiments are built): node i mixes the models of the k it
    drew, W[i, j] = 1 / (k + 1) on them and itself: row-stochastic, not doubly stochastic.
    The OledFL paper's text calls its topology "random bidirectional" (l.275) and its
    Definition 1 assumes W symmetric: that is directed: false, the union of the draws as
    undirected edges (about 2k neighbours each), with weights: metropolis_hastings."""

    kind: Literal["random_k"]
    k: int = Field(ge=1, description="neighbours each node draws per iteration")
    directed: bool = Field(True, description="i hears the k it drew; false: links both ways")
    weights: Literal["metropolis_hastings", "uniform"] = Field(
        "uniform",
        description="directed needs uniform (1/(k+1)); undirected: either rule",
    )

    @model_validator(mode="after")
    def _directed_is_uniform(self) -> RandomKTopology:
        if self.directed and self.weights != "uniform":
            raise PydanticCustomError(
                "inconsistent",
                "a directed random_k graph mixes with uniform weights 1/(k+1) (each node "
                "chose its k senders); metropolis_hastings needs undirected edges "
                "(directed: false)",
                {"field": "algorithm.topology.weights"},
            )
        return self


class MatrixTopology(Strict):
    """A mixing matrix given by hand: W[i][j] is the weight node i gives node j's model."""

    kind: Literal["matrix"]
    matrix: list[list[float]] = Field(description="n x n, non-negative, rows summing to 1")


TopologyConfig = Annotated[
    GraphTopology
    | ErdosRenyiTopology
    | GeometricTopology
    | EdgesTopology
    | RandomKTopology
    | MatrixTopology,
    Field(discriminator="kind"),
]


def topology_problem(topology: TopologyConfig, num_nodes: int) -> tuple[str, str] | None:
    """(field, message) when a topology cannot be built on `num_nodes` nodes, else None; what
    depends on random draws (Erdos-Renyi connectivity) is checked when the graph is drawn."""
    if topology.kind in ("grid", "torus") and math.isqrt(num_nodes) ** 2 != num_nodes:
        return (
            "kind",
            f"a {topology.kind} needs a square number of nodes, but there are {num_nodes}",
        )
    if topology.kind == "matrix" and len(topology.matrix) != num_nodes:
        return ("matrix", f"has {len(topology.matrix)} rows for {num_nodes} nodes")
    if topology.kind == "matrix":
        for i, row in enumerate(topology.matrix):
            if len(row) != num_nodes:
                return (
                    "matrix",
                    f"row {i} has {len(row)} entries; an n x n matrix on {num_nodes} nodes "
                    f"needs {num_nodes} in every row",
                )
    if topology.kind == "random_k" and topology.k > num_nodes - 1:
        return ("k", f"{topology.k} neighbours, but there are {num_nodes - 1} other nodes")
    if topology.kind == "edges":
        for i, (a, b) in enumerate(topology.edges):
            if not (0 <= a < num_nodes and 0 <= b < num_nodes) or a == b:
                return (
                    f"edges[{i}]",
                    f"[{a}, {b}] must join two different nodes in 0..{num_nodes - 1}",
                )
    return None
