"""Several cells: base stations at positions, clients attached to one, frequency reuse, and the
SINR co-channel uplinks in other cells leave a transfer (`radio.cells`).

Each client k has a linear path gain ``g[k, b]`` to every station b: the radio's path loss
``PL_1km + slope log10(d_km)`` dB at its distance (at least 1 m, the model's far-field limit),
with shadowing drawn once per client and station (stream CELLS). It attaches to the nearest
station, or the strongest (the largest ``P_b g[k, b]``, P_b the station's power). The band is cut
into K channel groups of ``W = bandwidth / K``; cells of one group reuse the same spectrum.

Interference is the power of the concurrent uplinks of the other cells of the same group at a
station, ``I_a = sum_j P_j g[j, a]`` (P_j the sender's radiated power, without its circuit
power; mean gains, fading only on the wanted link). Where in the band an interferer's share lies
is not modelled: its power counts spread over the group's band, so on a share s the
interference is ``I_a s / W`` and a transfer's SINR is

    SINR_k = P_k g[k, a] / ((N0 + I_a / W) s)   with a the station k is attached to,

that is its SNR density ``snr_hz = P g / N0`` divided by the noise rise ``1 + I_a / (N0 W)``.
Rates are Shannon's on the share, ``s log2(1 + SINR)``; as transfers start and end the noise
rises change and the band re-times every transfer under way (`flnet.sim.interference`).

Client k's draws come from its own generator ``default_rng([seed, CELLS, k])``: its shadowing to
the B stations ``shadowing_std_db * standard_normal(B)``, then, with uniform
`clients.positions` (side L), its position ``L * random(2)`` (x, y). Keyed by the client, they
are drawn for the clients asked about only (`flnet.sim.cell_clients`), whatever the order.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from flnet import draws
from flnet.errors import ScenarioError
from flnet.rng import Stream, key_rows, stream_key
from flnet.schema import PhysicalRadio
from flnet.sim.radio import dbm_to_w, path_loss_db

MIN_DISTANCE_M = 1.0  # the path-loss model's far-field limit: nearer counts as this


class CellLayout(NamedTuple):
    """The stations and their spectrum."""

    station_xy_m: np.ndarray  # [B, 2]
    station_power_w: np.ndarray  # [B] transmit power (downlink SNR, strongest attachment)
    group: np.ndarray  # [B] each station's channel group
    up_hz: float  # each channel group's uplink bandwidth W
    down_hz: float  # and downlink's
    noise_w_hz: float  # N0
    # [B, B]: coupled[c, a] where an uplink in cell c interferes at station a (same group,
    # another station; all False without interference)
    coupled: np.ndarray

    @property
    def stations(self) -> int:
        return len(self.station_power_w)


def layout(radio: PhysicalRadio) -> CellLayout:
    """`radio.cells` as arrays."""
    cells = radio.cells
    assert cells is not None
    xy = np.asarray(cells.stations_xy_m, dtype=float).reshape(-1, 2)
    b = len(xy)
    power_dbm = cells.station_tx_power_dbm or [radio.ap_tx_power_dbm] * b
    group = np.asarray(cells.groups(), dtype=np.int64)
    coupled = (group[:, None] == group[None, :]) & ~np.eye(b, dtype=bool)
    if not cells.interference:
        coupled[:] = False
    coupled.setflags(write=False)
    return CellLayout(
        xy,
        dbm_to_w(power_dbm),
        group,
        radio.uplink.bandwidth_hz / cells.reuse_factor,
        radio.downlink.bandwidth_hz / cells.reuse_factor,
        float(dbm_to_w(radio.noise_psd_dbm_hz)),
        coupled,
    )


def distances_m(x_m: np.ndarray, y_m: np.ndarray, station_xy_m: np.ndarray) -> np.ndarray:
    """[C, B] each client's distance to each station, at least `MIN_DISTANCE_M`."""
    dx = x_m[:, None] - station_xy_m[None, :, 0]
    dy = y_m[:, None] - station_xy_m[None, :, 1]
    return np.maximum(np.hypot(dx, dy), MIN_DISTANCE_M)


def client_draws(seed: int, clients: np.ndarray, stations: int) -> tuple[np.ndarray, np.ndarray]:
    """[C, B] standard normals (the clients' shadowing over its std) and [C, 2] uniforms in
    [0, 1) (their positions over the side, where positions are uniform): each client's
    generator, keyed (seed, CELLS, client) (the module docstring)."""
    keys = key_rows(stream_key(seed, Stream.CELLS), clients)
    normal, unit_xy = np.empty((len(keys), stations)), np.empty((len(keys), 2))
    few = len(keys) < draws.BLOCK_MIN_ROWS  # numpy's own: the block's fixed cost is more
    rngs = (np.random.default_rng(k) for k in keys.tolist()) if few else draws.generators(keys)
    for i, rng in enumerate(rngs):
        normal[i] = rng.standard_normal(stations)
        unit_xy[i] = rng.random(2)
    return normal, unit_xy


def gains(
    radio: PhysicalRadio,
    cells: CellLayout,
    x_m: np.ndarray,
    y_m: np.ndarray,
    normal: np.ndarray,
    clients: np.ndarray,
) -> np.ndarray:
    """[C, B] linear path gain from each of `clients` (at `x_m`, `y_m`) to each station: path
    loss at its distance plus its shadowing, ``shadowing_std_db * normal`` ([C, B])."""
    distance_m = distances_m(x_m, y_m, cells.station_xy_m)
    loss_db = path_loss_db(distance_m, radio.path_loss_at_1km_db, radio.path_loss_slope_db)
    if radio.shadowing_std_db > 0:
        loss_db += radio.shadowing_std_db * normal
    if not (loss_db >= 0).all():
        k, b = np.unravel_index(int(np.argmin(loss_db)), loss_db.shape)
        raise ScenarioError(
            f"client {int(clients[k])}'s path loss to station {b} is "
            f"{float(loss_db[k, b]):.4g} dB, below 0 dB: a receiver would get more power than "
            "was sent (check the stations' and clients' positions and the path loss)",
            field="radio.cells.stations_xy_m",
        )
    return 10.0 ** (-loss_db / 10.0)


class CellRows(Protocol):
    """Where a client's transfer is served: its station and [B] gains, at an instant."""

    def serving(self, client: int, t_s: float) -> tuple[int, np.ndarray]: ...


class FixedCells(NamedTuple):
    """`CellRows` from arrays that never change: [N] stations, [N, B] gains (tests and
    benchmarks; a run's are `flnet.sim.cell_clients.CellClients`)."""

    attached: np.ndarray
    gain: np.ndarray

    def serving(self, client: int, t_s: float) -> tuple[int, np.ndarray]:
        return int(self.attached[client]), self.gain[client]


def attach(
    rule: str, gain: np.ndarray, cells: CellLayout, x_m: np.ndarray, y_m: np.ndarray
) -> np.ndarray:
    """[C] the station each client is attached to: the `nearest`, or the `strongest` (largest
    received station power ``P_b g[k, b]``); ties to the lowest station index."""
    if rule == "nearest":
        return np.argmin(distances_m(x_m, y_m, cells.station_xy_m), axis=1)
    return np.argmax(gain * cells.station_power_w[None, :], axis=1)


def noise_rise(
    cells: CellLayout, attached: np.ndarray, interference_w: np.ndarray, band_hz: float
) -> np.ndarray:
    """[n] ``1 + I_a / (N0 W)`` for transfers at stations `attached` ([n]) on a group band of
    `band_hz` (W), given the power `interference_w` ([n, B]) each puts on every station (0
    where not coupled)."""
    at_station_w = interference_w.sum(axis=0)  # [B] I_a
    return 1.0 + at_station_w[attached] / (cells.noise_w_hz * band_hz)


def interference_rows_w(
    cells: CellLayout, attached: np.ndarray, radiated_w: np.ndarray, gain: np.ndarray
) -> np.ndarray:
    """[n, B] the power each of n uplinks (attached at `attached`, radiating `radiated_w`, with
    gains `gain` [n, B]) puts on each station it interferes at (0 elsewhere)."""
    return radiated_w[:, None] * gain * cells.coupled[attached]


def sinr(
    cells: CellLayout,
    attached: np.ndarray,
    radiated_w: np.ndarray,
    gain: np.ndarray,
    share_hz: np.ndarray,
) -> np.ndarray:
    """[n] SINR of n concurrent uplinks, each on its share `share_hz` of its group's band:
    ``P g[k, a] / ((N0 + I_a / W) s)`` (the module docstring). `gain` [n, B] their rows."""
    own_w = radiated_w * gain[np.arange(len(attached)), attached]
    rows = interference_rows_w(cells, attached, radiated_w, gain)
    rise = noise_rise(cells, attached, rows, cells.up_hz)
    return own_w / cells.noise_w_hz / rise / share_hz
