"""The scenario's `clients` section: the device population, its availability, positions,
batteries and device classes, and the capacity trace that may replace their speeds."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from flnet.config import Strict
from flnet.dists import FractionDist, NonNegativeDist, PerClient, PositiveDist, Uniform
from flnet.schema.checks import inconsistent

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
        if self.hourly_online is not None and not any(self.hourly_online):
            raise inconsistent(
                "clients.availability.hourly_online",
                "is 0 at every hour: no client would ever be online (the run would train "
                "nothing and spend 0 J); give some hour a positive fraction",
            )
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


# 10,000 km: farther than any two devices on Earth are apart along the ground; beyond it,
# squared distances and path losses overflow to infinity (a link rate of 0, a transfer that
# never ends) instead of describing a place.
MAX_POSITION_M = 1.0e7
Coordinate_m = Annotated[float, Field(ge=-MAX_POSITION_M, le=MAX_POSITION_M)]


class UniformPositions(Strict):
    """Clients dropped uniformly at random in a side_m x side_m square (stream POSITIONS)."""

    kind: Literal["uniform"]
    side_m: float = Field(
        gt=0, le=MAX_POSITION_M, description="side of the square area (at most 10,000 km)"
    )


class GivenPositions(Strict):
    """Each client's (x, y) in metres, in client order."""

    kind: Literal["given"]
    xy_m: list[Annotated[list[Coordinate_m], Field(min_length=2, max_length=2)]] = Field(
        description="[[x, y], ...], one per client, each coordinate within +-10,000 km"
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
    initial_soc: FractionDist = Field(
        default_factory=lambda: Uniform(kind="uniform", low=0.3, high=1.0),
        description="state of charge at time 0, a fraction of capacity in [0, 1] (a normal's "
        "or lognormal's draws clipped to [0, 1])",
    )
    threshold_soc: FractionDist = Field(  # type: ignore[assignment]
        0.2,
        description="opt-out threshold, a fraction of capacity in [0, 1]: below it the device "
        "stops taking part",
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

    @model_validator(mode="after")
    def _a_window(self) -> BatteryConfig:
        if self.charging_start_hour == self.charging_end_hour:
            raise inconsistent(
                "clients.battery.charging_end_hour",
                f"equals charging_start_hour ({self.charging_start_hour:g}): the window would be "
                "empty or the whole day; give two different hours (end before start: past "
                "midnight), or charging_power_w: 0 for devices that never charge",
            )
        return self


MAX_SLOWDOWN = 1_000.0  # a straggler 1,000x slower is already one that never delivers
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

    count: int = Field(10, ge=1, le=10_000_000, description="number of clients (devices)")
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
        1.0,
        ge=1,
        le=MAX_SLOWDOWN,
        description="a slowed task's compute takes this many times longer (at most 1,000: "
        "beyond, simulated times overflow rather than say anything about stragglers)",
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
