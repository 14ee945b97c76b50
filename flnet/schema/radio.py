"""The scenario's `radio` section: the access point's bands and path loss, the cells (several
base stations with frequency reuse and co-channel interference), and the client-to-client (D2D)
links."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from flnet import units
from flnet.config import Strict
from flnet.dists import AnyDist, Dist, NonNegativeDist, PositiveDist, Uniform
from flnet.schema.checks import inconsistent


class Band(Strict):
    bandwidth_hz: float = Field(gt=0, description="the band's width b in the rate b log2(1 + SNR)")
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

    bandwidth_hz: float = Field(1.0e6, gt=0, description="the D2D band's width")
    sharing: Literal["shared", "dedicated", "tdma", "spatial_reuse"] = Field(
        "dedicated",
        description="dedicated: orthogonal links, each transmission has the whole band (an "
        "exchange takes its slowest link); shared: concurrent transmissions split one band "
        "equally; tdma: one band, one transmission at a time (an exchange takes the sum of "
        "its airtimes); spatial_reuse: one band, every transmission has all of it at once "
        "and the others under way interfere at its receiver (SINR; needs path_loss)",
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

    @model_validator(mode="after")
    def _interference_needs_geometry(self) -> D2D:
        if self.sharing == "spatial_reuse" and self.path_loss is None:
            raise inconsistent(
                "radio.d2d.sharing",
                "spatial_reuse needs radio.d2d.path_loss: interference comes from the "
                "distances between the transmitters and the receivers",
            )
        return self


class RandomWaypoint(Strict):
    """Clients walk to waypoints drawn uniformly in the square of clients.positions, at a
    speed drawn per leg, pausing at each (flnet.sim.mobility). Positions, gains and
    attachment are taken at epochs of `epoch_s`: a transfer keeps those of the epoch it
    starts in."""

    kind: Literal["random_waypoint"] = "random_waypoint"
    min_speed_m_s: float = Field(0.5, gt=0, description="slowest speed a leg is drawn with")
    max_speed_m_s: float = Field(1.5, gt=0, description="fastest speed a leg is drawn with")
    pause_s: float = Field(0.0, ge=0, description="pause at each waypoint")
    epoch_s: float = Field(
        60.0, gt=0, description="positions, gains and attachment are updated every epoch_s"
    )
    side_m: float | None = Field(
        None,
        gt=0,
        description="the square the clients walk in; none: clients.positions.side_m "
        "(uniform positions)",
    )

    @model_validator(mode="after")
    def _speeds_ordered(self) -> RandomWaypoint:
        if self.max_speed_m_s < self.min_speed_m_s:
            raise inconsistent(
                "radio.cells.mobility.max_speed_m_s",
                f"{self.max_speed_m_s:g} is below min_speed_m_s = {self.min_speed_m_s:g}",
            )
        return self


class Cells(Strict):
    """Several base stations (cells) instead of one access point: each client uploads to and
    downloads from the station it is attached to (the FL server sits behind them all). The
    band (`uplink.bandwidth_hz`, `downlink.bandwidth_hz`) is cut into `reuse_factor` channel
    groups of bandwidth / reuse_factor; station b uses group `channel_groups[b]` (default
    b mod reuse_factor). Uplinks in other cells of the same group interfere: a transfer's SINR
    on its share s of its group's band W is P g / ((N0 + I / W) s), I the power the other
    co-channel cells' concurrent uplinks put on its station (docs: energy and radio, cells and
    interference). Gains follow the radio's path loss from the clients' positions, with
    `radio.shadowing_std_db` drawn per client and station."""

    stations_xy_m: list[tuple[float, float]] = Field(
        min_length=1, description="each base station's position (x, y) in metres"
    )
    station_tx_power_dbm: list[float] | None = Field(
        None,
        description="each station's transmit power (sets downlink SNR and `strongest` "
        "attachment); none: radio.ap_tx_power_dbm for all",
    )
    attach: Literal["nearest", "strongest"] = Field(
        "nearest",
        description="nearest: to the closest station; strongest: to the station whose signal "
        "arrives strongest (its power x path gain, shadowing included)",
    )
    reuse_factor: int = Field(
        1,
        ge=1,
        le=64,
        description="channel groups the band is cut into (1: every cell uses it all)",
    )
    channel_groups: list[int] | None = Field(
        None, description="each station's channel group in [0, reuse_factor); none: b mod K"
    )
    interference: bool = Field(
        True,
        description="co-channel uplinks in other cells interfere (false: each cell alone, "
        "the same layout and bands; to see what interference costs)",
    )
    mobility: RandomWaypoint | None = Field(
        None,
        description="clients move (random waypoint), changing path loss and attachment "
        "between epochs; none: they stand still",
    )

    @model_validator(mode="after")
    def _per_station(self) -> Cells:
        b = len(self.stations_xy_m)
        for name in ("station_tx_power_dbm", "channel_groups"):
            values = getattr(self, name)
            if values is not None and len(values) != b:
                raise inconsistent(
                    f"radio.cells.{name}", f"lists {len(values)} values for {b} stations_xy_m"
                )
        for k, group in enumerate(self.channel_groups or []):
            if not 0 <= group < self.reuse_factor:
                raise inconsistent(
                    "radio.cells.channel_groups",
                    f"station {k}'s group {group} is outside [0, reuse_factor = "
                    f"{self.reuse_factor})",
                )
        if not all(math.isfinite(c) for xy in self.stations_xy_m for c in xy):
            raise inconsistent("radio.cells.stations_xy_m", "positions must be finite")
        return self

    def groups(self) -> list[int]:
        """Each station's channel group."""
        if self.channel_groups is not None:
            return list(self.channel_groups)
        return [b % self.reuse_factor for b in range(len(self.stations_xy_m))]


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
    uplink: Band = Field(
        Band(bandwidth_hz=20e6, sharing="shared"), description="client to access point"
    )
    downlink: Band = Field(
        Band(bandwidth_hz=20e6, sharing="dedicated"), description="access point to client"
    )
    d2d: D2D = D2D()


class PhysicalRadio(_RadioCommon):
    """SNR from geometry: path loss 128.1 + 37.6 log10(d_km) dB plus lognormal shadowing."""

    mode: Literal["physical"] = "physical"
    distance_m: PositiveDist = Field(
        Uniform(kind="uniform", low=50.0, high=500.0), description="client to access point"
    )
    path_loss_at_1km_db: float = Field(128.1, description="path loss at 1 km (3GPP macro cell)")
    path_loss_slope_db: float = Field(37.6, description="dB per decade of distance")
    shadowing_std_db: float = Field(8.0, ge=0, description="per client, drawn once")
    noise_psd_dbm_hz: float = Field(-174.0, description="noise density at the receivers")
    ap_tx_power_dbm: float = Field(30.0, description="access point power; sets downlink SNR")
    cells: Cells | None = Field(
        None,
        description="several base stations with frequency reuse and co-channel interference "
        "(distances from clients.positions; distance_m unused); none: one access point",
    )

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
    uplink_snr_db: Dist = Field(  # type: ignore[assignment]  # number -> Constant
        20.0, description="SNR at the access point over the uplink band"
    )
    downlink_snr_db: Dist = Field(  # type: ignore[assignment]  # number -> Constant
        20.0, description="SNR at the client over the downlink band"
    )


Radio = Annotated[PhysicalRadio | DirectRadio, Field(discriminator="mode")]
