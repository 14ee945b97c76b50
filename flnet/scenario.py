"""The scenario file: one validated schema for everything a run needs.

``load_scenario(path)`` reads YAML (safely), follows ``extends:`` chains, applies ``--set``
overrides and validates. Every mistake becomes one `ScenarioError` whose lines name the field
(``radio.uplink.bandwidth_hz``) and what is allowed.
"""

from __future__ import annotations

import copy
import json
import math
import reprlib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

import flnet.userfiles as userfiles
from flnet import units
from flnet.algorithms.configs import CONFIGS
from flnet.config import Strict, topology_problem
from flnet.dists import AnyDist, Dist, NonNegativeDist, PerClient, PositiveDist, Uniform
from flnet.errors import ScenarioError, UnitWarning
from flnet.learn.references import ReferenceName

# ---------------------------------------------------------------- data and model


class IidPartition(Strict):
    """Shuffle the training set and cut it into equal parts."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Strict):
    """Label skew (Hsu et al. 2019): each class is spread over clients with proportions
    ~ Dir(alpha); client sizes come out unequal."""

    kind: Literal["dirichlet"]
    alpha: float = Field(gt=0, description="smaller alpha, stronger label skew")
    min_size: int = Field(2, ge=1, description="resample until every client has this many")


class ShardsPartition(Strict):
    """Pathological split: every client holds exactly `classes_per_client` classes, each class
    cut into equal shards (McMahan et al. 2017; OledFL's Path(k))."""

    kind: Literal["shards"]
    classes_per_client: int = Field(ge=1)


class SizeSkewPartition(Strict):
    """Quantity skew. zipf (DRDM): client i (from 1) holds d i^-sigma / sum_j j^-sigma samples;
    lognormal: sizes proportional to exp(N(0, sigma^2)) draws."""

    kind: Literal["zipf", "lognormal"]
    sigma: float = Field(ge=0, description="0: equal sizes; larger: more skew")
    alpha: float | None = Field(
        None, gt=0, description="each client's class mixture ~ Dir(alpha); none: iid labels"
    )
    min_size: int = Field(2, ge=1, description="smallest client size allowed")


class NaturalPartition(Strict):
    """The data set's own clients (synthetic: one generated user per client)."""

    kind: Literal["natural"]


Partition = Annotated[
    IidPartition | DirichletPartition | ShardsPartition | SizeSkewPartition | NaturalPartition,
    Field(discriminator="kind"),
]


class SyntheticConfig(Strict):
    """FedProx's Synthetic(alpha, beta): per-client logistic models and inputs."""

    alpha: float = Field(1.0, ge=0, description="how much the clients' models differ")
    beta: float = Field(1.0, ge=0, description="how much the clients' inputs differ")
    num_features: int = Field(60, ge=1)
    num_classes: int = Field(10, ge=2)
    size_log_mean: float = Field(4.0, description="client sizes: lognormal(mean, std) + min")
    size_log_std: float = Field(2.0, ge=0)
    min_samples: int = Field(50, ge=2)
    test_fraction: float = Field(0.1, gt=0, lt=1, description="of each client's samples")


class Mnist1dConfig(Strict):
    """MNIST-1D's procedural generator (80/20 train/test split)."""

    num_samples: int = Field(5000, ge=20)
    seed: int = Field(
        42, ge=0, le=2**32 - 1, description="the generator's seed; 42 is the published set"
    )


class BlockCyclicConfig(Strict):
    """Block-cyclic data (Ding et al.): a cycle of M blocks; in block m client i trains on its
    own block-m rows (label windows, flnet/learn/data/blocks.py)."""

    num_blocks: int = Field(2, ge=1, le=100, description="blocks per cycle (M)")
    rounds_per_block: int | None = Field(
        None, ge=1, description="the block follows rounds: E rounds per block (the paper)"
    )
    block_s: float | None = Field(
        None,
        gt=0,
        description="the block follows simulated time: seconds per block (a day "
        "of M blocks is M * block_s)",
    )

    @model_validator(mode="after")
    def _one_clock(self) -> BlockCyclicConfig:
        if (self.rounds_per_block is None) == (self.block_s is None):
            raise inconsistent(
                "data.blocks.rounds_per_block",
                "give exactly one of data.blocks.rounds_per_block (rounds) and "
                "data.blocks.block_s (seconds)",
            )
        return self


class RandomReluFeatures(Strict):
    kind: Literal["random_relu"]
    dim: int = Field(512, ge=1)
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="fixes the backbone, independent of the run seed"
    )


class Resnet18Features(Strict):
    kind: Literal["resnet18"]
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="fixes the backbone, independent of the run seed"
    )


class NpzFeatures(Strict):
    kind: Literal["npz"]
    path: str = Field(description="arrays x_train [N, F] and x_test [M, F]")


Features = Annotated[
    RandomReluFeatures | Resnet18Features | NpzFeatures, Field(discriminator="kind")
]

Dataset = Literal[
    "digits",
    "synthetic",
    "mnist1d",
    "mnist",
    "fashion_mnist",
    "kmnist",
    "cifar10",
    "cifar100",
]
DATASETS: tuple[str, ...] = get_args(Dataset)


class DataConfig(Strict):
    dataset: Dataset = Field("digits", description="see the README")
    root: str = Field("data", description="folder holding the real data sets' files")
    download: bool = Field(False, description="fetch missing real data sets (needs network)")
    partition: Partition = IidPartition()
    local_test_fraction: float | None = Field(
        None, gt=0, le=1, description="per-client test rows from the client's label mix"
    )
    features: Features | None = Field(None, description="frozen features instead of inputs")
    validation_fraction: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="hold this share of the training set out (stratified, before "
        "partitioning) as the server's validation set: validation_accuracy and "
        "validation_loss in the records",
    )
    input_scale: float = Field(
        1.0,
        gt=0,
        description="multiply every input the model sees (train, validation, test; the "
        "features when set) by this: 16 turns digits into raw 0-16 pixel values",
    )
    share_rows: bool | Annotated[int, Field(ge=1)] = Field(
        False,
        description="more clients than training rows: the partition is made for S "
        "slots (true: as many as rows; a number: that many) and client k "
        "holds slot k mod S",
    )
    eval_clients: int = Field(
        1000,
        ge=1,
        description="per-client figures use every client up to this many, else "
        "a sample of this size drawn once from the seed",
    )
    synthetic: SyntheticConfig = SyntheticConfig()
    mnist1d: Mnist1dConfig = Mnist1dConfig()
    blocks: BlockCyclicConfig | None = Field(
        None,
        description="block-cyclic data: each client's rows change with the block of the "
        "day; replaces data.partition (which must stay iid)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DataConfig:
        if self.blocks is not None and (
            self.partition.kind != "iid"
            or self.share_rows is not False
            or self.local_test_fraction is not None
            or self.dataset == "synthetic"
        ):
            raise inconsistent(
                "data.blocks",
                "block-cyclic data makes its own partition: leave data.partition iid, "
                "data.share_rows false and data.local_test_fraction unset, on a data set "
                "in memory (not synthetic)",
            )
        if self.partition.kind == "natural" and self.dataset != "synthetic":
            raise inconsistent(
                "data.partition.kind",
                f"'natural' needs a data set with its "
                f"own clients ('synthetic'), not {self.dataset!r}",
            )
        if self.partition.kind == "natural" and self.local_test_fraction is not None:
            raise inconsistent(
                "data.local_test_fraction",
                "a natural partition already has "
                "each client's own test split (synthetic.test_fraction)",
            )
        for name, unset in (
            ("validation_fraction", self.validation_fraction is None),
            ("input_scale", self.input_scale == 1.0),
        ):
            if self.partition.kind == "natural" and not unset:
                raise inconsistent(
                    f"data.{name}",
                    "a natural synthetic population is generated per client when it "
                    "takes part; use another partition (the pooled users) for this option",
                )
        return self


class _ModelCommon(Strict):
    costs_as: ReferenceName | None = Field(
        None,
        description="charge messages and FLOPs as this reference model's (the papers' models "
        "at their input sizes, flnet/learn/references.py); none: the model trained",
    )


class MlpConfig(_ModelCommon):
    kind: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [64])


class LogisticConfig(_ModelCommon):
    """Multinomial logistic regression: one linear layer."""

    kind: Literal["logistic"]


class CnnConfig(_ModelCommon):
    """One of the papers' CNNs, exactly as published (see flnet/learn/models.py)."""

    kind: Literal["cnn_mcmahan", "cnn_dfl_mnist", "cnn_dfl_cifar", "cnn_tutorial", "cnn_kmnist"]


class Resnet18Config(_ModelCommon):
    """CIFAR ResNet-18 with GroupNorm in place of BatchNorm."""

    kind: Literal["resnet18"]
    norm_groups: int = Field(32, ge=1, description="GroupNorm groups; must divide 64")

    @model_validator(mode="after")
    def _divides(self) -> Resnet18Config:
        if 64 % self.norm_groups:
            raise inconsistent(
                "model.norm_groups",
                f"{self.norm_groups} does not divide the 64 channels of the first stage",
            )
        return self


ModelConfig = Annotated[
    MlpConfig | LogisticConfig | CnnConfig | Resnet18Config, Field(discriminator="kind")
]

# ---------------------------------------------------------------- devices and radio


TraceMapping = Literal["permuted", "in_order", "by_id"]
TRACE_MAPPING_HELP = (
    "which trace client simulated client k replays: trace client order[k mod M] of the M "
    "trace clients (ascending ids), where permuted: order is a permutation drawn from the "
    "seed; in_order: the identity; or by_id: the trace client whose id is k (none: never "
    "online; a capacity trace must then hold ids 0..count-1)"
)


class CapacityTraceConfig(Strict):
    """Per-client speeds replayed from a capacity trace (flnet.sim.traces): they replace the
    FLOP-based compute time and the Shannon link rates."""

    path: str = Field(
        description="CSV: client, compute_s_per_sample, up_rate_bps, down_rate_bps "
        "(`flnet traces fedscale` writes one from FedScale's device capacity pickle)"
    )
    mapping: TraceMapping = Field("permuted", description=TRACE_MAPPING_HELP)
    compute_power_w: float = Field(
        gt=0,
        description="battery power while computing: a trace-timed computation costs "
        "compute_power_w * its seconds (transfers cost the radio's powers * their seconds)",
    )


class AlwaysAvailable(Strict):
    """Every client is online at every instant."""

    kind: Literal["always"]


class _AvailabilityCommon(Strict):
    check: Literal["during", "at_completion"] = Field(
        "during",
        description=(
            "during: work stops (outcome interrupted) the instant the client's session ends; "
            "at_completion (FedScale's rule): work runs to its end and its upload is discarded "
            "(outcome lost, all its energy charged) if the client is offline then"
        ),
    )


class BernoulliAvailability(_AvailabilityCommon):
    """Online with probability p, drawn per round (stream: per work start)."""

    kind: Literal["bernoulli"]
    p: float = Field(gt=0, le=1, description="probability a client is online when asked")


class DiurnalAvailability(_AvailabilityCommon):
    """Online sessions following a local hour-of-day curve, clients spread over time zones
    (defaults: ../shared/papers/digests/wireless_energy_models.md section 5.4)."""

    kind: Literal["diurnal"]
    mean_online: float = Field(0.2, gt=0, lt=1, description="mean of the cosine curve")
    amplitude: float = Field(
        0.6, ge=0, le=1, description="relative swing: peak/trough = (1+a)/(1-a); 0.6 gives 4x"
    )
    peak_hour: float = Field(3.0, ge=0, lt=24, description="local hour the curve peaks at")
    hourly_online: list[Annotated[float, Field(ge=0, lt=1)]] | None = Field(
        None,
        min_length=24,
        max_length=24,
        description="24 online fractions at local hours 0..23 (linear between); replaces the "
        "cosine",
    )
    session_mean_s: float = Field(
        3600.0, gt=0, le=6 * 3600, description="mean online-session length (exponential)"
    )
    time_zones_h: list[Annotated[float, Field(ge=-12, le=14)]] = Field(
        default_factory=lambda: [0.0], min_length=1, description="UTC offsets clients live in"
    )
    time_zone_weights: list[Annotated[float, Field(gt=0)]] | None = Field(
        None, description="share of clients per zone (default: equal)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> DiurnalAvailability:
        if self.hourly_online is None and self.mean_online * (1 + self.amplitude) >= 1:
            raise inconsistent(
                "clients.availability.amplitude",
                f"mean_online * (1 + amplitude) = {self.mean_online * (1 + self.amplitude):g}"
                " must be below 1 (a probability of being online)",
            )
        weights = self.time_zone_weights
        if weights is not None and len(weights) != len(self.time_zones_h):
            raise inconsistent(
                "clients.availability.time_zone_weights",
                f"{len(weights)} weights for {len(self.time_zones_h)} time_zones_h",
            )
        return self


class TraceAvailability(_AvailabilityCommon):
    """Clients are online exactly when an availability trace says (flnet.sim.traces)."""

    kind: Literal["trace"]
    path: str = Field(
        description="CSV: client, online_from_s, online_until_s [, tz_offset_s, period_s]; "
        "`# period_s: P` before the header makes it periodic"
    )
    mapping: TraceMapping = Field("permuted", description=TRACE_MAPPING_HELP)


AvailabilityConfig = Annotated[
    AlwaysAvailable | BernoulliAvailability | DiurnalAvailability | TraceAvailability,
    Field(discriminator="kind"),
]


class UniformPositions(Strict):
    """Clients dropped uniformly at random in a side_m x side_m square (stream POSITIONS)."""

    kind: Literal["uniform"]
    side_m: float = Field(gt=0, description="side of the square area")


class GivenPositions(Strict):
    """Each client's (x, y) in metres, in client order."""

    kind: Literal["given"]
    xy_m: list[Annotated[list[float], Field(min_length=2, max_length=2)]] = Field(
        description="[[x, y], ...], one per client"
    )


class BatteryConfig(Strict):
    """Per-device batteries drained by the ledger's rows and charged in a nightly window
    (flnet.sim.battery; defaults: ../shared/papers/digests/wireless_energy_models.md sections
    5.1 and 5.3, hours assumed). A device below its threshold is offline until it has
    recharged to threshold + resume_margin_soc; work that would run it empty stops (outcome
    battery)."""

    capacity_j: PositiveDist = Field(  # type: ignore[assignment]  # number -> Constant
        50_000.0, description="battery capacity in joules (50 kJ: ~3,600 mAh at 3.85 V)"
    )
    initial_soc: NonNegativeDist = Field(
        default_factory=lambda: Uniform(kind="uniform", low=0.3, high=1.0),
        description="state of charge at time 0, a fraction of capacity (clipped to [0, 1])",
    )
    threshold_soc: NonNegativeDist = Field(  # type: ignore[assignment]
        0.2, description="opt-out threshold: below this fraction the device stops taking part"
    )
    resume_margin_soc: float = Field(
        0.1, ge=0, le=1, description="an opted-out device returns at threshold + this fraction"
    )
    idle_power_w: float = Field(0.0, ge=0, description="drain of an idle device, always on")
    charging: Literal["window", "trace"] = Field(
        "window",
        description="when a device charges: window: in the daily charging window of its "
        "local time; trace: while its availability trace's charging column says 1 (needs "
        "clients.availability kind trace with that column)",
    )
    charging_power_w: float = Field(
        10.0, ge=0, description="charging power while charging (window or trace)"
    )
    charging_start_hour: float = Field(
        22.0, ge=0, lt=24, description="local hour the daily charging window opens"
    )
    charging_end_hour: float = Field(
        7.0, ge=0, lt=24, description="local hour it closes (before the start: past midnight)"
    )
    time_zones_h: list[Annotated[float, Field(ge=-12, le=14)]] | None = Field(
        None,
        min_length=1,
        description="UTC offsets for the charging window, one drawn per client (stream "
        "BATTERY_ZONES); none: the diurnal availability's zone of each client, else UTC",
    )


DEVICE_CLASS_NAME = r"^[a-z][a-z0-9_]{0,31}$"  # a column-safe name: energy_j_<name>
MAX_DEVICE_CLASSES = 100  # drawn into one int8 column


class DeviceClass(Strict):
    """A named share of the clients (phones, tablets, ...), with its own device distributions
    where given; the records charge each class's energy (`energy_j_<name>`)."""

    name: str = Field(
        pattern=DEVICE_CLASS_NAME,
        description="lower-case letters, digits and _, starting with a letter (a records "
        "column: energy_j_<name>)",
    )
    share: float = Field(gt=0, le=1, description="fraction of the clients in this class")
    cpu_hz: PositiveDist | None = Field(
        None, description="this class's CPU frequency f (none: clients.cpu_hz)"
    )
    flops_per_cycle: PositiveDist | None = Field(
        None, description="this class's training FLOPs per cycle (none: clients.flops_per_cycle)"
    )
    kappa: NonNegativeDist | None = Field(
        None, description="this class's switched capacitance (none: clients.kappa)"
    )
    battery_capacity_j: PositiveDist | None = Field(
        None, description="this class's battery capacity (none: clients.battery.capacity_j)"
    )

    @model_validator(mode="after")
    def _no_per_client(self) -> DeviceClass:
        for name in ("cpu_hz", "flops_per_cycle", "kappa", "battery_capacity_j"):
            if isinstance(getattr(self, name), PerClient):
                raise inconsistent(
                    f"clients.device_classes.{name}",
                    "a class's distribution cannot be per_client (give it in clients instead)",
                )
        return self


class ClientsConfig(Strict):
    """The client population: numbers or per-client distributions, availability and device
    behaviour (stragglers, dropout)."""

    count: int = Field(10, ge=1, le=10_000_000)
    cpu_hz: PositiveDist = Field(  # type: ignore[assignment]  # number -> Constant
        1.0e9, description="CPU frequency f"
    )
    flops_per_cycle: PositiveDist = Field(  # type: ignore[assignment]  # number -> Constant
        4.0, description="training FLOPs per CPU cycle"
    )
    kappa: NonNegativeDist = Field(  # type: ignore[assignment]  # number -> Constant
        1.0e-28, description="effective switched capacitance: J = kappa * cycles * f^2"
    )
    availability: AvailabilityConfig = Field(
        default_factory=lambda: AlwaysAvailable(kind="always"),
        description="who is online when: always, bernoulli, diurnal, or trace (from a file)",
    )
    dropout_probability: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="a started task fails with this probability at a uniform point of its "
        "work (outcome dropped)",
    )
    slowdown_probability: float = Field(
        0.0, ge=0, le=1, description="a task's compute is slowed with this probability"
    )
    slowdown_factor: float = Field(
        1.0, ge=1, description="a slowed task's compute takes this many times longer"
    )
    capacity_trace: CapacityTraceConfig | None = Field(
        None,
        description="replay measured per-client compute and link speeds (replaces cpu_hz, "
        "flops_per_cycle, kappa and the radio's rates for time; null: from those)",
    )
    positions: UniformPositions | GivenPositions | None = Field(
        None,
        discriminator="kind",
        description="where the clients stand (metres), for D2D path loss and random "
        "geometric graphs; none: no positions",
    )
    battery: BatteryConfig | None = Field(
        None,
        description="per-device batteries drained by the ledger and charged nightly "
        "(flnet.sim.battery); none: unlimited energy",
    )
    device_classes: list[DeviceClass] | None = Field(
        None,
        min_length=1,
        max_length=MAX_DEVICE_CLASSES,
        description="named classes of devices with a share each (summing to 1), drawn per "
        "client (stream DEVICE_CLASSES, one byte a client) and overriding the device "
        "distributions they give; the records get energy_j_<name> per class; none: no classes",
    )

    @model_validator(mode="after")
    def _one_position_each(self) -> ClientsConfig:
        if isinstance(self.positions, GivenPositions) and len(self.positions.xy_m) != self.count:
            raise inconsistent(
                "clients.positions.xy_m",
                f"lists {len(self.positions.xy_m)} positions for clients.count = {self.count}",
            )
        if (
            self.battery is not None
            and self.battery.charging == "trace"
            and self.availability.kind != "trace"
        ):
            raise inconsistent(
                "clients.battery.charging",
                "trace needs clients.availability of kind trace (with a charging column), "
                f"not {self.availability.kind}; or use window",
            )
        classes = self.device_classes or []
        names = [c.name for c in classes]
        if len(set(names)) != len(names):
            raise inconsistent("clients.device_classes.name", f"names must be unique, got {names}")
        if classes and abs(math.fsum(c.share for c in classes) - 1.0) > 1e-9:
            raise inconsistent(
                "clients.device_classes.share",
                f"shares sum to {math.fsum(c.share for c in classes):g}, must sum to 1",
            )
        for name in ("cpu_hz", "flops_per_cycle", "kappa"):
            if self.capacity_trace is not None and any(
                getattr(c, name) is not None for c in classes
            ):
                raise inconsistent(
                    f"clients.device_classes.{name}",
                    "a capacity trace replaces the device columns; drop the class's "
                    f"{name} or clients.capacity_trace",
                )
        if self.battery is None and any(c.battery_capacity_j is not None for c in classes):
            raise inconsistent(
                "clients.device_classes.battery_capacity_j",
                "needs clients.battery (there is no battery to size)",
            )
        for name in ("capacity_j", "initial_soc", "threshold_soc"):
            d = getattr(self.battery, name, None)
            if isinstance(d, PerClient) and len(d.values) != self.count:
                raise inconsistent(
                    f"clients.battery.{name}",
                    f"lists {len(d.values)} values for clients.count = {self.count}",
                )
        return self


class Band(Strict):
    bandwidth_hz: float = Field(gt=0)
    sharing: Literal["shared", "dedicated"] = Field(
        "shared",
        description="shared: concurrent transfers split the band equally; "
        "dedicated: every transfer gets the whole band",
    )

    @field_validator("bandwidth_hz")
    @classmethod
    def _rates_stay_finite(cls, hz: float) -> float:
        if hz < units.MIN_BANDWIDTH_HZ:
            raise ValueError(
                f"{hz:g} Hz is below {units.MIN_BANDWIDTH_HZ:g} Hz: no radio "
                "band is that narrow, and its rate b log2(1 + SNR) overflows"
            )
        return hz


class LogDistance(Strict):
    """Log-distance path loss with log-normal shadowing (Rappaport, Wireless Communications,
    2nd ed., section 4.9, eqs. 4.68-4.69): PL(d) = PL(d0) + 10 n log10(d / d0) + X_sigma, with
    PL(d0) free-space (Friis) at the reference distance d0. Defaults: n = 3 (Rappaport's Table
    4.2 gives 2.7-3.5 for urban cellular, 3-5 shadowed urban; 2 is free space), sigma = 4 dB,
    2.4 GHz, d0 = 1 m; noise -174 dBm/Hz thermal plus a 9 dB device noise figure (3GPP's usual
    UE assumption). Distances below d0 count as d0 (the model's far-field limit)."""

    kind: Literal["log_distance"] = "log_distance"
    exponent: float = Field(3.0, gt=0, le=10, description="path-loss exponent n")
    shadowing_std_db: float = Field(
        4.0, ge=0, description="sigma of X_sigma, drawn once per unordered pair (reciprocal)"
    )
    carrier_hz: float = Field(2.4e9, gt=0, description="sets the free-space loss at d0")
    reference_m: float = Field(1.0, gt=0, description="d0")
    noise_psd_dbm_hz: float = Field(-174.0, description="thermal noise density")
    noise_figure_db: float = Field(9.0, ge=0, description="the receiver's noise figure")


class D2D(Strict):
    """Client-to-client links (gossip), reciprocal: a pair's channel is drawn once for both
    directions. The SNR is given in dB over the D2D band (`snr_db`, drawn per unordered pair),
    or comes from the clients' positions through `path_loss` and the sender's transmit power.
    The sender is charged its tx power (+ circuit), each receiver its rx power, each on its
    own ledger row, for the airtime of the transmission. See the README's gossip radio."""

    bandwidth_hz: float = Field(1.0e6, gt=0)
    sharing: Literal["shared", "dedicated", "tdma"] = Field(
        "dedicated",
        description="dedicated: orthogonal links, each transmission has the whole band (an "
        "exchange takes its slowest link); shared: concurrent transmissions split one band "
        "equally; tdma: one band, one transmission at a time (an exchange takes the sum of "
        "its airtimes)",
    )
    snr_db: Dist = Field(  # type: ignore[assignment]  # number -> Constant
        20.0, description="per unordered pair, over the D2D band (when path_loss is none)"
    )
    path_loss: LogDistance | None = Field(
        None, description="SNR from clients.positions and tx_power_dbm instead of snr_db"
    )
    transmission: Literal["unicast", "broadcast"] = Field(
        "unicast",
        description="unicast: one transmission per neighbour; broadcast: one transmission to "
        "all a sender's neighbours at the weakest one's rate",
    )
    half_duplex: bool = Field(
        False,
        description="a node's radio sends or receives, one transmission at a time; "
        "transmissions start in request order as soon as their sender and receivers are free",
    )
    loss_probability: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="each message is lost with this probability, independently per "
        "receiver; its airtime is still charged",
    )


class _RadioCommon(Strict):
    tx_power_dbm: Dist = Field(  # type: ignore[assignment]  # number -> Constant
        10.0, description="client transmit power"
    )
    tx_circuit_power_w: NonNegativeDist = Field(  # type: ignore[assignment]  # number -> Constant
        0.0, description="radio electronics power while transmitting, on top of tx power"
    )
    rx_power_w: NonNegativeDist = Field(  # type: ignore[assignment]  # number -> Constant
        0.0, description="client power while receiving"
    )
    rayleigh_fading: bool = Field(False, description="|h|^2 ~ Exp(1) drawn per transfer")
    uplink: Band = Band(bandwidth_hz=20e6, sharing="shared")
    downlink: Band = Band(bandwidth_hz=20e6, sharing="dedicated")
    d2d: D2D = D2D()


class PhysicalRadio(_RadioCommon):
    """SNR from geometry: path loss 128.1 + 37.6 log10(d_km) dB plus lognormal shadowing."""

    mode: Literal["physical"] = "physical"
    distance_m: PositiveDist = Field(
        Uniform(kind="uniform", low=50.0, high=500.0), description="client to access point"
    )
    path_loss_at_1km_db: float = 128.1
    path_loss_slope_db: float = Field(37.6, description="dB per decade of distance")
    shadowing_std_db: float = Field(8.0, ge=0, description="per client, drawn once")
    noise_psd_dbm_hz: float = -174.0
    ap_tx_power_dbm: float = Field(30.0, description="access point power; sets downlink SNR")

    @field_validator("distance_m")
    @classmethod
    def _far_field(cls, d: AnyDist) -> AnyDist:
        nearest = units.nearest_distance_m(d)
        if nearest < units.REFERENCE_DISTANCE_M:
            tail = " (its 6-sigma tail)" if d.kind == "lognormal" else ""
            km = (
                "; did you mean km?"
                if not tail and nearest * 1e3 >= units.REFERENCE_DISTANCE_M
                else ""
            )
            raise ValueError(
                f"reaches {nearest:.3g} m{tail}, below the path-loss model's reference "
                f"distance of {units.REFERENCE_DISTANCE_M:g} m (the log-distance model's gain "
                f"grows without bound as d -> 0){km}"
            )
        return d

    @model_validator(mode="after")
    def _gain_below_one(self) -> PhysicalRadio:
        for d in (
            units.nearest_distance_m(self.distance_m),
            units.farthest_distance_m(self.distance_m),
        ):
            loss_db = self.path_loss_at_1km_db + self.path_loss_slope_db * math.log10(d / 1e3)
            if not loss_db >= 0:
                raise inconsistent(
                    "radio.path_loss_at_1km_db",
                    f"with path_loss_slope_db = "
                    f"{self.path_loss_slope_db:g} the path loss at {d:.4g} m is "
                    f"{loss_db:.4g} dB, below 0 dB: a receiver would get more "
                    "power than was sent",
                )
        return self


class DirectRadio(_RadioCommon):
    """SNR given directly, in dB over each link's whole band."""

    mode: Literal["direct"]
    uplink_snr_db: Dist = 20.0  # type: ignore[assignment]  # number -> Constant
    downlink_snr_db: Dist = 20.0  # type: ignore[assignment]  # number -> Constant


Radio = Annotated[PhysicalRadio | DirectRadio, Field(discriminator="mode")]

# ---------------------------------------------------------------- run control and output


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
    time_budget_s: float | None = Field(None, gt=0, description="stop once sim time reaches it")
    energy_budget_j: float | None = Field(None, gt=0, description="stop once energy reaches it")
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


def _algorithm_union() -> Any:
    configs = tuple(CONFIGS.values())
    if len(configs) == 1:
        return configs[0]
    return Annotated[Union[configs], Field(discriminator="name")]  # noqa: UP007 (a tuple)


if TYPE_CHECKING:  # mypy cannot follow the union built from CONFIGS; the same members
    from flnet.algorithms.configs import AnyAlgorithmConfig as AlgorithmConfig
else:
    AlgorithmConfig = _algorithm_union()


class Scenario(Strict):
    name: str = Field(
        "scenario",
        description="one plain path component: the default results folder is runs/<name>",
    )
    seed: int = Field(0, ge=0, le=2**32 - 1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    data: DataConfig = DataConfig()
    model: ModelConfig = MlpConfig()
    algorithm: AlgorithmConfig
    clients: ClientsConfig = ClientsConfig()
    radio: Radio = PhysicalRadio()
    run: RunConfig = RunConfig()
    output: OutputConfig = OutputConfig()

    @model_validator(mode="before")
    @classmethod
    def _default_tags(cls, data: Any) -> Any:
        """`radio:` without `mode:` is physical; `model:` without `kind:` is an MLP."""
        if isinstance(data, dict):
            for section, tag, default in (("radio", "mode", "physical"), ("model", "kind", "mlp")):
                if isinstance(data.get(section), dict) and tag not in data[section]:
                    data = {**data, section: {tag: default, **data[section]}}
        return data

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """The name becomes a folder name (runs/<name>): never a path that leaves it."""
        bad = (
            "is empty"
            if not name
            else "is '.' or '..'"
            if name in (".", "..")
            else "holds a path separator"
            if "/" in name or "\\" in name
            else "holds a NUL character"
            if "\0" in name
            else "is longer than 255 bytes"
            if len(name.encode("utf-8", "replace")) > 255
            else None
        )
        if bad:
            raise ValueError(
                f"{bad}; the name is a folder name (runs/<name>), so it must be one "
                f"plain path component: not empty, not '.' or '..', no '/', '\\' "
                f"or NUL, at most 255 bytes"
            )
        return name

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        n = self.clients.count
        cohort = getattr(self.algorithm, "cohort", None)
        if cohort is not None and cohort.k(n) > n:
            raise inconsistent(
                "algorithm.cohort.clients_per_round",
                f"{cohort.k(n)} clients per round but clients.count is {n}",
            )
        m = getattr(self.algorithm, "clients_per_round", None)  # DRFA, DRDM: m
        if m is not None and m > n:
            raise inconsistent(
                "algorithm.clients_per_round",
                f"m = {m} clients per round (and in the dual step) but clients.count is {n}",
            )
        topology = getattr(self.algorithm, "topology", None)
        problem = topology_problem(topology, n) if topology is not None else None
        if problem is not None:
            raise inconsistent(f"algorithm.topology.{problem[0]}", problem[1])
        if self.data.blocks is not None and self.algorithm.name not in BLOCK_AWARE:
            raise inconsistent(
                "data.blocks",
                f"block-cyclic data is followed by {', '.join(BLOCK_AWARE)} only; "
                f"{self.algorithm.name} would train on block 0's rows throughout",
            )
        if self.clients.capacity_trace is not None and self.radio.rayleigh_fading:
            raise inconsistent(
                "radio.rayleigh_fading",
                "a capacity trace gives each link's measured rate (clients.capacity_trace); "
                "fading would scale it, so the two do not go together",
            )
        if self.algorithm.name == "cdfl" and self.radio.d2d.loss_probability > 0:
            raise inconsistent(
                "radio.d2d.loss_probability",
                "must be 0 for cdfl: a lost compressed message would leave the public copies "
                "of its sender apart (C-DFL has no way to resend it)",
            )
        if self.algorithm.name == "cdfl" and self.clients.availability.kind != "always":
            raise inconsistent(
                "clients.availability.kind",
                f"must be 'always' for cdfl, got '{self.clients.availability.kind}': an offline "
                "node would miss its neighbours' compressed messages and leave the public "
                "copies apart (C-DFL has no way to resend them)",
            )
        if self.algorithm.name == "cdfl" and self.clients.battery is not None:
            raise inconsistent(
                "clients.battery",
                "must be unset for cdfl: a node opted out by its battery would miss its "
                "neighbours' compressed messages and leave the public copies apart (C-DFL "
                "has no way to resend them)",
            )
        if self.algorithm.name == "cdfl" and getattr(topology, "kind", None) == "random_k":
            raise inconsistent(
                "algorithm.topology.kind",
                "cdfl needs a fixed graph: each node's public copy is held by its neighbours, "
                "which random_k draws afresh every round",
            )
        if getattr(topology, "kind", None) == "random_geometric" and self.clients.positions is None:
            raise inconsistent(
                "algorithm.topology.kind",
                "random_geometric needs clients.positions (uniform or given)",
            )
        if self.radio.d2d.path_loss is not None and self.clients.positions is None:
            raise inconsistent(
                "radio.d2d.path_loss",
                "needs clients.positions (uniform or given) to measure distances",
            )
        for section in ("clients", "radio"):
            for name, value in getattr(self, section):
                if isinstance(value, PerClient) and len(value.values) != n:
                    raise inconsistent(
                        f"{section}.{name}",
                        f"lists {len(value.values)} per_client values for clients.count = {n}",
                    )
        return self

    def output_dir(self) -> Path:
        return Path(self.output.dir or Path("runs") / self.name)


BLOCK_AWARE = ("fedavg", "mm_psgd", "mc_psgd")  # the algorithms that pass the round's block


def inconsistent(field: str, message: str) -> PydanticCustomError:
    """A cross-field error that still names its field."""
    return PydanticCustomError("inconsistent", message, {"field": field})


# ---------------------------------------------------------------- loading


MAX_FILE_BYTES = 16 * 2**20  # a per_client list for a million clients fits
MAX_ALIAS_NODES = 100_000  # nodes that YAML aliases (*name) may add to a document


def _read_yaml(path: Path) -> dict:
    """The mapping a scenario file holds. A file that is not one (a device, a FIFO, a file
    whose top-level keys are not scenario fields, such as a password file named by
    `extends`) is refused without quoting any of its lines."""
    text = userfiles.read_text(path, MAX_FILE_BYTES, "scenario file", ScenarioError)
    data = safe_yaml(text, str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(
            f"{path}: the top level must be a mapping of fields, got {type(data).__name__}"
        )
    fields = {*Scenario.model_fields, "extends", "sweep"}  # a sweep file is a scenario too
    others = [k for k in data if k not in fields]
    if others and (
        len(others) == len(data)
        or not all(
            isinstance(k, str)
            and k.isascii()
            and len(k) <= 64
            and k.replace("-", "_").isidentifier()
            for k in others
        )
    ):
        raise ScenarioError(
            f"{path} is not a scenario file: {len(others)} of its {len(data)} top-level keys "
            f"are not scenario fields ({', '.join(sorted(fields))})"
        )
    return data


def safe_yaml(text: str, source: str) -> Any:
    """`yaml.safe_load`, refusing documents that aliases blow up (a "billion laughs" in 1 kB)
    or make refer to themselves: the node graph is composed first (linear in the text), its
    expanded size counted, and only then turned into Python objects."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        composed, expanded = _node_counts(node, source)
        if expanded - composed > MAX_ALIAS_NODES:
            raise ScenarioError(
                f"{source}: YAML aliases (*name) expand it to more than "
                f"{composed + MAX_ALIAS_NODES:,} nodes; at most "
                f"{MAX_ALIAS_NODES:,} may come from aliases"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ScenarioError(f"{source}: not valid YAML{where}: {short(problem, 200)}") from None
    except RecursionError:
        raise ScenarioError(f"{source}: YAML nested too deeply") from None
    finally:
        loader.dispose()


def _node_counts(root: yaml.Node, source: str) -> tuple[int, int]:
    """(distinct nodes, nodes once every alias is expanded); refuses a node inside itself."""
    expanded: dict[int, int] = {}
    open_: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in open_:
            raise ScenarioError(
                f"{source}: YAML aliases make a value contain itself (line "
                f"{node.start_mark.line + 1})"
            )
        open_.add(key)
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1
        open_.discard(key)
        expanded[key] = min(total, 2**62)
        return expanded[key]

    total = size(root)
    return len(expanded), total


TAG_KEYS = ("name", "kind", "mode")
# Fields of which a section takes one: an override that sets one drops the other from the base.
ALTERNATIVES = (("steps", "epochs"), ("clients_per_round", "client_fraction"))


def _same_variant(base: dict, override: dict) -> bool:
    return all(override.get(t, base.get(t)) == base.get(t) for t in TAG_KEYS)


def merge(base: dict, override: dict, _path: tuple = ()) -> dict:
    """Deep-merge mappings; `override` wins, lists and scalars are replaced whole.

    A section whose variant changes (another `name`, `kind` or `mode`) keeps only the fields the
    new variant has too: switching `algorithm.name` keeps `cohort` and `local`, switching
    `model.kind` from mlp to logistic drops `hidden`. Setting one of two ALTERNATIVES (local
    `epochs` over a base's `steps`) drops the other.
    """
    out = copy.deepcopy(base)
    for pair in ALTERNATIVES:
        for mine, other in (pair, pair[::-1]):
            if override.get(mine) is not None and other not in override:
                out.pop(other, None)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            if not _same_variant(old, value):
                keep = _variant_fields((*_path, key), value)
                old = {k: v for k, v in old.items() if k in keep and k not in TAG_KEYS}
            out[key] = merge(old, value, (*_path, key))
        else:
            out[key] = copy.deepcopy(value)
    return out


def _variant_fields(path: tuple, section: dict) -> set[str]:
    """Field names of the union member that `section`'s tag picks at `path` (empty if none)."""
    node: Any = Scenario
    for seg in path:
        members = node if isinstance(node, tuple) else (node,)
        owner = next((m for m in members if seg in getattr(m, "model_fields", {})), None)
        if owner is None:
            return set()
        node = _unwrap(owner.model_fields[seg].annotation)
    tag = next((section[t] for t in TAG_KEYS if t in section), None)
    members = node if isinstance(node, tuple) else (node,)
    chosen = next((m for m in members if tag in _tags_of(m)), None)
    return set(getattr(chosen, "model_fields", {}))


def resolve(path: str | Path, _seen: tuple = ()) -> dict:
    """Read a scenario file and the files it `extends` (relative to it), merged."""
    path = Path(path)
    if path.resolve() in _seen:
        chain = " -> ".join(str(p) for p in (*_seen, path.resolve()))
        raise ScenarioError(f"extends forms a cycle: {chain}", field="extends")
    data = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or "\0" in parent:
        raise ScenarioError("must be a path to another scenario file", field="extends")
    base = resolve(path.parent / parent, (*_seen, path.resolve()))
    base.pop("name", None)
    return merge(base, data)


def parse_override(text: str) -> dict:
    """``algorithm.local.lr=0.1`` -> ``{"algorithm": {"local": {"lr": 0.1}}}`` (value as YAML)."""
    if "=" not in text:
        raise ScenarioError(f"override {short(text)} must look like field.path=value")
    key, raw = text.split("=", 1)
    try:
        value = safe_yaml(raw, f"--set {short(key.strip(), 60)}")
    except ScenarioError as e:
        if "not valid YAML" not in str(e):
            raise
        value = raw
    return nest(key.strip(), value)


def nest(path: str, value: Any) -> dict:
    """``"algorithm.local.lr", 0.1`` -> ``{"algorithm": {"local": {"lr": 0.1}}}``."""
    for part in reversed(path.split(".")):
        value = {part: value}
    return value


def load_scenario(
    path: str | Path | None = None,
    overrides: list[str] | dict | None = None,
    data: dict | None = None,
) -> Scenario:
    """Read, merge and validate a scenario from a file and/or a dict."""
    merged: dict = {}
    if path is not None:
        merged = resolve(path)
        merged.setdefault("name", Path(path).stem)
    if data is not None:
        merged = merge(merged, data)
    if isinstance(overrides, dict):
        merged = merge(merged, overrides)
    else:
        for text in overrides or []:
            merged = merge(merged, parse_override(text))
    scenario = validate(merged, source=str(path) if path else "scenario")
    for line in units.implausible(scenario):
        warnings.warn(line, UnitWarning, stacklevel=2)
    return scenario


def validate(data: dict, source: str = "scenario") -> Scenario:
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        lines = [describe(err) for err in e.errors()]
        raise ScenarioError(f"{source} is not a valid scenario:\n  " + "\n  ".join(lines)) from None


def json_schema() -> str:
    return json.dumps(Scenario.model_json_schema(), indent=2)


# ---------------------------------------------------------------- error messages


def _walk(loc: tuple) -> tuple[str, Any]:
    """Split pydantic's `loc` into the path the user wrote and the schema node at its end.

    Pydantic puts a union member's tag (``physical``, ``fedavg``) into `loc`; the user never
    wrote it, so it is dropped from the path and used to pick the member instead.
    """
    parts: list[str] = []
    node: Any = Scenario
    for seg in loc:
        if isinstance(node, tuple):
            member = next((m for m in node if seg in _tags_of(m)), None)
            if member is not None:
                node = member
                continue
        if isinstance(seg, str) and seg.startswith("function-"):
            continue
        parts.append(f"[{seg}]" if isinstance(seg, int) else str(seg))
        fields = getattr(node, "model_fields", None)
        node = _unwrap(fields[seg].annotation) if fields and seg in fields else None
    return ".".join(parts).replace(".[", "[") or "(top level)", node


def _fields_of(node: Any) -> list[str]:
    members = node if isinstance(node, tuple) else (node,)
    return sorted({f for m in members for f in getattr(m, "model_fields", {})})


def _unwrap(annotation: Any) -> Any:
    """Model class, or a tuple of classes for unions."""
    import types
    from typing import get_args, get_origin

    origin = get_origin(annotation)
    if origin is Annotated:
        return _unwrap(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if hasattr(a, "model_fields")]
        return tuple(members) if len(members) > 1 else (members[0] if members else None)
    return annotation


def _tags_of(model: Any) -> tuple:
    """The values of a union member's tag field (a Literal may allow several)."""
    from typing import get_args

    for key in ("name", "kind", "mode"):
        f = getattr(model, "model_fields", {}).get(key)
        if f is not None:
            return get_args(f.annotation) or (f.default,)
    return ()


def describe(err: ErrorDetails) -> str:
    """One line for one pydantic error: ``field: what is wrong; what is allowed``."""
    loc, kind, ctx = err["loc"], err["type"], err.get("ctx", {})
    path = ctx.get("field") or _walk(loc)[0]
    got = err.get("input")
    if kind == "extra_forbidden":
        allowed = _fields_of(_walk(loc[:-1])[1])
        return f"{path}: unknown field; allowed fields here: {', '.join(allowed)}"
    if kind == "missing":
        return f"{path}: this field is required"
    if kind == "literal_error":
        return f"{path}: {short(got)} is not allowed; allowed: {ctx.get('expected')}"
    if kind == "union_tag_invalid":
        return (
            f"{path}: unknown {ctx.get('discriminator', 'kind').strip(chr(39))} "
            f"{short(ctx.get('tag'))}; allowed: {ctx.get('expected_tags')}"
        )
    if kind == "union_tag_not_found":
        return f"{path}: missing {ctx.get('discriminator')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {
            "greater_than": ">",
            "greater_than_equal": ">=",
            "less_than": "<",
            "less_than_equal": "<=",
        }[kind]
        bound = next(iter(ctx.values()))
        return f"{path}: must be {op} {bound} (got {short(got)})"
    if kind == "inconsistent":
        return f"{path}: {err['msg']}"
    if kind == "not_a_number":  # raised by the section that holds the field
        return f"{_walk((*loc, ctx['field_name']))[0]}: expected a number, got {ctx['value']}"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{path}: {msg} (got {short(got)})" if not isinstance(got, dict) else f"{path}: {msg}"


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 6
_REPR.maxlevel = 3


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to about `limit` characters, in time bounded by the limit (never the
    whole of a huge or alias-expanded value)."""
    text = value if isinstance(value, str) and limit > 80 else _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
