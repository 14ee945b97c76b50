"""The client population as columns: every per-client attribute is one [N] array.

An idle registered client costs its entries in these arrays (7 float64, 56 bytes; 2 more with
positions, 1 more with D2D path loss, 1 byte more with device classes), never a Python object,
graph node, SimPy process or tensor; a link's rate, time and energy are computed from its
endpoints' rows when a transfer happens (`flnet.sim.network`). Each column is drawn once, for
all clients at once, from its stream: compute from DEVICES (cpu_hz, flops_per_cycle, kappa, in
that order), radio from RADIO (tx power, circuit power, rx power, then distance and shadowing,
or the direct SNRs), so the numbers are those of one draw per client in order; positions from
POSITIONS (every x, then every y). With `radio.cells`, the SNR columns (and uniform positions)
are left empty: a client's SNRs come from its gains to the stations, computed when it is asked
about (`flnet.sim.cell_clients`, its draws keyed by client); the population keeps its radiated
power (one float more). With `clients.device_classes`, each client's class is
drawn from DEVICE_CLASSES (one draw of the column, after the others, so they are unchanged), and a
class that gives its own cpu_hz, flops_per_cycle or kappa redraws its members' entries from
CLASS_DEVICES keyed by the class's index (in that order)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flnet.dists import sample
from flnet.errors import ScenarioError
from flnet.rng import Stream, generator
from flnet.schema import ClientsConfig, Radio
from flnet.sim.radio import dbm_to_w, path_loss_db, shannon_rate_bps, snr_hz_direct, snr_hz_physical


class Population(NamedTuple):
    """[N] columns, one entry per registered client (float64; `device_class` int8)."""

    cpu_hz: np.ndarray  # CPU frequency f
    flops_per_cycle: np.ndarray
    kappa: np.ndarray  # effective switched capacitance
    up_snr_hz: np.ndarray  # P g / N0 of its uplink to the access point, without fading
    down_snr_hz: np.ndarray  # of its downlink from the access point (both empty with cells)
    tx_power_w: np.ndarray  # battery power while transmitting: tx + circuit
    rx_power_w: np.ndarray  # battery power while receiving
    x_m: np.ndarray = np.empty(0)  # position (clients.positions); empty without positions
    y_m: np.ndarray = np.empty(0)
    radiated_w: np.ndarray = np.empty(0)  # tx power alone (no circuit): D2D path loss, cells
    # index into clients.device_classes; empty without classes
    device_class: np.ndarray = np.empty(0, dtype=np.int8)

    @property
    def size(self) -> int:
        return len(self.cpu_hz)

    @property
    def nbytes(self) -> int:
        return sum(column.nbytes for column in self)


def build(clients: ClientsConfig, radio: Radio, seed: int) -> Population:
    """Draw every client's attributes from the scenario's `clients` and `radio` sections."""
    n = clients.count
    rng = generator(seed, Stream.DEVICES)
    cpu_hz = sample(clients.cpu_hz, rng, n)
    flops_per_cycle = sample(clients.flops_per_cycle, rng, n)
    kappa = sample(clients.kappa, rng, n)
    device_class = device_classes(clients, seed)
    for k, cls in enumerate(clients.device_classes or []):
        rows = np.flatnonzero(device_class == k)
        rng = generator(seed, Stream.CLASS_DEVICES, k)
        for column, d in ((cpu_hz, cls.cpu_hz), (flops_per_cycle, cls.flops_per_cycle)):
            if d is not None:
                column[rows] = sample(d, rng, len(rows))
        if cls.kappa is not None:
            kappa[rows] = sample(cls.kappa, rng, len(rows))
    rng = generator(seed, Stream.RADIO)
    tx_power_w = dbm_to_w(sample(radio.tx_power_dbm, rng, n))
    circuit_w = sample(radio.tx_circuit_power_w, rng, n)
    rx_power_w = sample(radio.rx_power_w, rng, n)
    cells = radio.cells if radio.mode == "physical" else None
    if cells is None:
        x_m, y_m = positions_m(clients, seed)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # checked below
            up_snr, down_snr = _snr_hz(radio, tx_power_w, n, rng)
            for name, snr, band_hz in (
                ("uplink", up_snr, radio.uplink.bandwidth_hz),
                ("downlink", down_snr, radio.downlink.bandwidth_hz),
            ):
                check_rates(name, snr, band_hz)
    else:  # by client, when asked (flnet.sim.cell_clients); given positions are the list's
        x_m, y_m = positions_m(clients, seed) if _given(clients) else (np.empty(0), np.empty(0))
        up_snr, down_snr = np.empty(0), np.empty(0)
    keep_radiated = radio.d2d.path_loss is not None or cells is not None
    radiated_w = tx_power_w.copy() if keep_radiated else np.empty(0)
    tx_power_w += circuit_w
    return Population(
        cpu_hz,
        flops_per_cycle,
        kappa,
        up_snr,
        down_snr,
        tx_power_w,
        rx_power_w,
        x_m,
        y_m,
        radiated_w,
        device_class,
    )


def device_classes(clients: ClientsConfig, seed: int) -> np.ndarray:
    """[N] int8: each client's index into `clients.device_classes`, drawn with the classes'
    shares (empty without classes)."""
    classes = clients.device_classes
    if not classes:
        return np.empty(0, dtype=np.int8)
    shares = np.asarray([c.share for c in classes], dtype=float)
    rng = generator(seed, Stream.DEVICE_CLASSES)
    return rng.choice(len(classes), size=clients.count, p=shares / shares.sum()).astype(np.int8)


def positions_m(clients: ClientsConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """[N] x and [N] y of every client in metres (empty without `clients.positions`)."""
    pos = clients.positions
    if pos is None:
        return np.empty(0), np.empty(0)
    if pos.kind == "given":
        xy = np.asarray(pos.xy_m, dtype=np.float64).reshape(-1, 2)
        return xy[:, 0].copy(), xy[:, 1].copy()
    rng = generator(seed, Stream.POSITIONS)
    return rng.uniform(0.0, pos.side_m, clients.count), rng.uniform(0.0, pos.side_m, clients.count)


def check_rates(
    name: str, snr_hz: np.ndarray, bandwidth_hz: float, clients: np.ndarray | None = None
) -> None:
    """A ScenarioError naming the first client whose `name` link has no finite positive rate
    (`clients`: the rows' client ids; default: row k is client k)."""
    rate = shannon_rate_bps(bandwidth_hz, snr_hz)
    bad = np.flatnonzero(~(np.isfinite(rate) & (rate > 0)))
    if len(bad):
        k = int(bad[0])
        client = k if clients is None else int(clients[k])
        raise ScenarioError(
            f"client {client}'s {name} has a rate of {float(rate[k]):.3g} bit/s (SNR "
            f"{float(snr_hz[k] / bandwidth_hz):.3g} over the band): check the "
            "radio's powers, distances, path loss and noise",
            field="radio",
        )


def _given(clients: ClientsConfig) -> bool:
    return clients.positions is not None and clients.positions.kind == "given"


def _snr_hz(
    radio: Radio, tx_power_w: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """[N] uplink and downlink ``P g / N0`` of every client."""
    up_band, down_band = radio.uplink, radio.downlink
    if radio.mode == "physical":
        distance_m = sample(radio.distance_m, rng, n)
        loss_db = path_loss_db(distance_m, radio.path_loss_at_1km_db, radio.path_loss_slope_db)
        del distance_m
        loss_db += radio.shadowing_std_db * rng.standard_normal(n)
        noise_w_hz = float(dbm_to_w(radio.noise_psd_dbm_hz))
        up_snr = snr_hz_physical(tx_power_w, loss_db, noise_w_hz)
        down_snr = snr_hz_physical(dbm_to_w(radio.ap_tx_power_dbm), loss_db, noise_w_hz)
    else:
        up_snr = snr_hz_direct(sample(radio.uplink_snr_db, rng, n), up_band.bandwidth_hz)
        down_snr = snr_hz_direct(sample(radio.downlink_snr_db, rng, n), down_band.bandwidth_hz)
    return np.broadcast_to(up_snr, n), np.broadcast_to(down_snr, n)
