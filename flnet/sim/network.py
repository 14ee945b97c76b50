"""The network: the cell's star, implicit, plus explicit device-to-device links.

Nodes are clients ``0..N-1`` and the server ``SERVER``. A link ``src -> dst`` carries what a
transfer on it needs: its channel, its ``snr_hz`` (received power over noise density), the
battery power drawn while it is busy and the ledger kind. The star is a rule, not a graph:
client k's uplink and downlink are made from row k of the `Population` when a transfer asks for
them, so an idle client costs no link object. Device-to-device links are made by the World from
`radio.d2d` for the pairs that gossip (`flnet.sim.world.World.link`) and kept here in a bounded
cache (`keep`: a made link is a function of its key, so dropping it loses nothing); links added
by hand (`add_link`, tests) are kept for good; `graph` shows both as a networkx graph.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import networkx as nx
import numpy as np
import simpy

from flnet.dists import sample
from flnet.errors import ScenarioError
from flnet.schema import D2D, LogDistance, Radio
from flnet.sim.cell_clients import CellClients
from flnet.sim.channel import Channel, TraceRateChannel, band
from flnet.sim.interference import SPEED_OF_LIGHT_M_S, CellBand
from flnet.sim.ledger import SERVER
from flnet.sim.population import Population
from flnet.sim.radio import dbm_to_w, shannon_rate_bps, snr_hz_direct, snr_hz_physical
from flnet.sim.traces import TraceSpeeds

D2D_LINKS_KEPT = 1_000_000  # device-to-device links made from the radio cached at most (~200 MB)


class Link(NamedTuple):
    """A link's fixed facts (a NamedTuple: one is made per star transfer, and a frozen
    dataclass costs three times as much to make)."""

    channel: Channel
    snr_hz: float  # P g / N0 without fading (on a TraceRateChannel: the rate in bit/s)
    power_w: float  # battery power drawn while busy (sender's tx + circuit, receiver's rx)
    kind: str  # ledger kind: download, upload or d2d
    rx_power_w: float = 0.0  # d2d: the receiver's own power while receiving (its own row)


class Network:
    def __init__(
        self,
        env: simpy.Environment,
        radio: Radio,
        population: Population,
        speeds: TraceSpeeds | None = None,
        cells: CellClients | None = None,
    ) -> None:
        """`cells` (`radio.cells`): each star link's SNR is its client's as of its start
        (`flnet.sim.cell_clients`), not a column of the population."""
        n = population.size
        self.env, self.cells = env, cells
        up_band, down_band = radio.uplink, radio.downlink
        self.speeds = speeds  # a capacity trace: each star link's rate is its trace client's
        if cells is not None:
            self.uplink, self.downlink = cell_bands(env, cells)
        elif speeds is None:
            self.uplink = band(env, up_band.bandwidth_hz, up_band.sharing == "shared", users=n)
            self.downlink = band(
                env, down_band.bandwidth_hz, down_band.sharing == "shared", users=n
            )
        else:
            self.uplink = self.downlink = TraceRateChannel(env)
        self.population = population
        self.tx_power_w = population.tx_power_w  # [N] each client's transmit + circuit power
        self.rx_power_w = population.rx_power_w  # [N] each client's receive power
        self._up_snr_hz, self._down_snr_hz = population.up_snr_hz, population.down_snr_hz
        self._n = n
        self._links: dict[tuple[int, int], Link] = {}  # device-to-device, added by hand
        self._made: dict[tuple[int, int], Link] = {}  # device-to-device, made from the radio

    def add_link(self, src: int, dst: int, link: Link) -> None:
        self._links[(src, dst)] = link

    def keep(self, src: int, dst: int, link: Link) -> None:
        """Cache a link made from the radio: at most D2D_LINKS_KEPT, emptied when full (a
        time-varying graph meets new pairs every iteration)."""
        if len(self._made) >= D2D_LINKS_KEPT:
            self._made.clear()
        self._made[(src, dst)] = link

    def link(self, src: int, dst: int) -> Link:
        """The star's links by rule from the client's row; others as added."""
        if dst == SERVER and 0 <= src < self._n:
            return Link(
                self.uplink, self._quality(src, down=False), float(self.tx_power_w[src]), "upload"
            )
        if src == SERVER and 0 <= dst < self._n:
            return Link(
                self.downlink,
                self._quality(dst, down=True),
                float(self.rx_power_w[dst]),
                "download",
            )
        link = self._links.get((src, dst)) or self._made.get((src, dst))
        if link is None:
            raise KeyError(f"no link from node {src} to node {dst}")
        return link

    def star(self, clients: np.ndarray, down: bool) -> tuple[list[float], list[float]]:
        """What `link` gives for each of `clients`' downlinks (or uplinks), at once: their
        `snr_hz` (or trace rates) and `power_w`."""
        if self.speeds is not None:
            rates = self.speeds.down_rate_bps if down else self.speeds.up_rate_bps
            quality = rates[self.speeds.mapping(clients)]
        else:
            quality = self.snr_hz(clients, down)
        power_w = (self.rx_power_w if down else self.tx_power_w)[clients]
        return quality.tolist(), power_w.tolist()

    def _quality(self, client: int, down: bool) -> float:
        """What the star link's channel needs: its SNR, or with a capacity trace its rate."""
        if self.speeds is not None:
            rates = self.speeds.down_rate_bps if down else self.speeds.up_rate_bps
            return float(rates[self.speeds.mapping.one(client)])
        if self.cells is not None:
            return self.cells.snr_hz(client, self.env.now, down)
        return float((self._down_snr_hz if down else self._up_snr_hz)[client])

    def snr_hz(self, clients: np.ndarray, down: bool = False) -> np.ndarray:
        """[C] the clients' downlink (or uplink) ``P g / N0`` now, without fading."""
        if self.cells is not None:
            served = self.cells.at(clients, self.env.now)
            return served.down_snr_hz if down else served.up_snr_hz
        return (self._down_snr_hz if down else self._up_snr_hz)[clients]

    @property
    def graph(self) -> nx.DiGraph:
        """The device-to-device links as a graph (the gossiping nodes only; the star is
        implicit)."""
        g: nx.DiGraph = nx.DiGraph()
        links = {**self._made, **self._links}
        g.add_edges_from((u, v, {"link": link}) for (u, v), link in links.items())
        return g

    def alone_s(
        self, bits: float, clients: np.ndarray | None = None, down: bool = False
    ) -> np.ndarray:
        """[C] seconds each client's uplink (or downlink) takes for `bits`, alone on its band
        and without fading."""
        if self.speeds is not None:
            rates = self.speeds.down_rate_bps if down else self.speeds.up_rate_bps
            rows = self.speeds.mapping(np.arange(self._n) if clients is None else clients)
            return bits / rates[rows]
        channel = self.downlink if down else self.uplink
        if clients is None and self.cells is not None:
            clients = np.arange(self._n)  # every client's, computed now
        if clients is not None:
            snr = self.snr_hz(clients, down)
        else:
            snr = self._down_snr_hz if down else self._up_snr_hz
        with np.errstate(divide="ignore"):
            return bits / np.asarray(shannon_rate_bps(channel.bandwidth_hz, snr))

    def star_alone_s(
        self, down_bits: float, up_bits: float, clients: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """[C] each of `clients`' download and upload seconds, each alone on its band and
        without fading, as `alone_s` gives them; the cells' in one pass and not kept (for a
        pass over many clients)."""
        if self.cells is None:
            return self.alone_s(down_bits, clients, down=True), self.alone_s(up_bits, clients)
        served = self.cells.compute(clients, self.env.now)
        with np.errstate(divide="ignore"):
            down_s = down_bits / shannon_rate_bps(self.downlink.bandwidth_hz, served.down_snr_hz)
            up_s = up_bits / shannon_rate_bps(self.uplink.bandwidth_hz, served.up_snr_hz)
        return down_s, up_s


def cell_bands(env: simpy.Environment, cells: CellClients) -> tuple:
    """The uplink and downlink of `radio.cells`: each cell's share of its channel group's band,
    the uplinks coupled by interference (`flnet.sim.interference`); the downlink without
    interference (a dedicated one: each transfer has its group's whole band)."""
    radio, stations = cells.radio, cells.layout
    columns = (stations, cells, cells.radiated_w)
    up_split = radio.uplink.sharing == "shared"
    uplink = CellBand(env, stations.up_hz, *columns, split=up_split, interfering=True)
    downlink: Channel
    if radio.downlink.sharing == "shared":
        downlink = CellBand(env, stations.down_hz, *columns, split=True, interfering=False)
    else:
        downlink = Channel(env, stations.down_hz)
    return uplink, downlink


def d2d_link(
    network: Network, d2d: D2D, channel: Channel, src: int, dst: int, rng: np.random.Generator
) -> Link:
    """The device-to-device link src -> dst on `channel`, with the sender's transmit and the
    receiver's receive power. Its channel is reciprocal: `rng` is the pair's own generator
    (keyed by the unordered pair), so dst -> src draws the same SNR (`snr_db`) or the same
    shadowing (`path_loss`); with path loss only the senders' transmit powers differ."""
    if d2d.path_loss is None:
        snr_db = float(sample(d2d.snr_db, rng, 1)[0])
        snr_hz = float(snr_hz_direct(snr_db, d2d.bandwidth_hz))
    else:
        pop = network.population
        distance_m = math.hypot(pop.x_m[src] - pop.x_m[dst], pop.y_m[src] - pop.y_m[dst])
        loss_db = d2d_path_loss_db(d2d.path_loss, distance_m, float(rng.standard_normal()))
        pl = d2d.path_loss
        noise_w_hz = float(dbm_to_w(pl.noise_psd_dbm_hz + pl.noise_figure_db))
        snr_hz = float(snr_hz_physical(pop.radiated_w[src], loss_db, noise_w_hz))
    rate_bps = float(shannon_rate_bps(d2d.bandwidth_hz, snr_hz))
    if not (math.isfinite(rate_bps) and rate_bps > 0):  # a transfer would never end, or take 0 s
        raise ScenarioError(
            f"the D2D link {src} -> {dst} has a rate of {rate_bps:.3g} bit/s (SNR "
            f"{snr_hz / d2d.bandwidth_hz:.3g} over the band): check radio.d2d's SNR, path "
            "loss, noise and the clients' powers and positions",
            field="radio.d2d",
        )
    return Link(
        channel, snr_hz, float(network.tx_power_w[src]), "d2d", float(network.rx_power_w[dst])
    )


def d2d_path_loss_db(model: LogDistance, distance_m: float, normal: float) -> float:
    """PL(d) = 20 log10(4 pi d0 f / c) + 10 n log10(max(d, d0) / d0) + sigma * normal, in dB
    (log-distance with a free-space reference; `normal` a standard normal draw)."""
    d0 = model.reference_m
    free_space_db = 20.0 * math.log10(4.0 * math.pi * d0 * model.carrier_hz / SPEED_OF_LIGHT_M_S)
    return (
        free_space_db
        + 10.0 * model.exponent * math.log10(max(distance_m, d0) / d0)
        + model.shadowing_std_db * normal
    )
