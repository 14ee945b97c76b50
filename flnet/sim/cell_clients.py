"""The cells as the clients asked about see them: each one's station, gains and star SNRs at an
instant (`radio.cells`), computed when a transfer or a policy asks, never for every registered
client.

A client's gains come from its position at the instant's epoch (fixed, or walked to:
`flnet.sim.mobility`) and its shadowing, both drawn from its own keyed generator
(`flnet.sim.cells.client_draws`); so what a client sees depends on the seed, the client and the
epoch, never on who else was asked or when. The current epoch's answers are kept for at most
`ROWS_KEPT` clients (emptied when full or when the epoch moves on): what the cells cost is per
client asked, nothing per registered client.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flnet.schema import ClientsConfig, PhysicalRadio, Radio
from flnet.sim import cells as cells_mod
from flnet.sim.kept import KeptRows
from flnet.sim.mobility import Waypoints
from flnet.sim.population import Population, check_rates

ROWS_KEPT = 16_384  # clients whose station, SNRs and gains in the current epoch are kept


class Served(NamedTuple):
    """[C] each: the clients' stations, uplink and downlink ``P g / N0``; [C, B] their gains."""

    station: np.ndarray
    up_snr_hz: np.ndarray
    down_snr_hz: np.ndarray
    gain: np.ndarray


class CellClients:
    """Each client's cell, gains and SNRs, computed for the clients asked about."""

    def __init__(
        self, radio: PhysicalRadio, clients: ClientsConfig, population: Population, seed: int
    ) -> None:
        cells, positions = radio.cells, clients.positions
        assert cells is not None and positions is not None  # the scenario's checks
        self.radio, self.seed, self.count = radio, seed, clients.count
        self.layout = cells_mod.layout(radio)
        self.radiated_w = population.radiated_w  # [N] tx power without circuit power
        # given positions are the scenario's own list; uniform ones are drawn by client
        self._given = (population.x_m, population.y_m) if positions.kind == "given" else None
        self._side_m = positions.side_m if positions.kind == "uniform" else 0.0
        self.walk: Waypoints | None = None
        if cells.mobility is not None:
            side_m = cells.mobility.side_m
            self.walk = Waypoints(cells.mobility, self._side_m if side_m is None else side_m, seed)
        self._epoch = 0
        # this epoch's of the clients asked: station, uplink and downlink SNR, then B gains
        self._rows = KeptRows(3 + self.layout.stations, ROWS_KEPT)

    @property
    def kept(self) -> int:
        """How many clients' rows are kept (this epoch's)."""
        return len(self._rows)

    def epoch_of(self, t_s: float) -> int:
        return 0 if self.walk is None else self.walk.epoch_of(t_s)

    def start_xy_m(self, clients: np.ndarray) -> np.ndarray:
        """[C, 2] the clients' positions at t = 0."""
        if self._given is not None:
            return np.stack([self._given[0][clients], self._given[1][clients]], axis=1)
        _, unit_xy = cells_mod.client_draws(self.seed, clients, self.layout.stations)
        return self._side_m * unit_xy

    def serving(self, client: int, t_s: float) -> tuple[int, np.ndarray]:
        """The station and [B] gains of `client`'s transfers starting at `t_s`."""
        row = self._row(client, t_s)
        return int(row[0]), row[3:].copy()

    def snr_hz(self, client: int, t_s: float, down: bool) -> float:
        """`client`'s downlink (or uplink) ``P g / N0`` at `t_s`."""
        return float(self._row(client, t_s)[2 if down else 1])

    def at(self, clients: np.ndarray, t_s: float) -> Served:
        """What `clients` see at `t_s` (kept for this epoch, up to ROWS_KEPT)."""
        clients = np.asarray(clients, dtype=np.int64)
        self._move_to(self.epoch_of(t_s))
        found, rows = self._rows.get(clients)
        if not found.all():  # computing them may empty the rows kept: those were read first
            missing = ~found
            rows[missing] = self._as_rows(self._compute(clients[missing], t_s, keep=True))
        return Served(
            rows[:, 0].astype(np.int64), rows[:, 1].copy(), rows[:, 2].copy(), rows[:, 3:]
        )

    def compute(self, clients: np.ndarray, t_s: float) -> Served:
        """What `clients` see at `t_s`, without keeping it (a pass over many clients)."""
        return self._compute(np.asarray(clients, dtype=np.int64), t_s, keep=False)

    def _row(self, client: int, t_s: float) -> np.ndarray:
        self._move_to(self.epoch_of(t_s))
        row = self._rows.row(client)
        if row is None:
            return self._as_rows(self._compute(np.array([client], dtype=np.int64), t_s, True))[0]
        return row

    @staticmethod
    def _as_rows(served: Served) -> np.ndarray:
        """[C, 3 + B]: station, uplink and downlink SNR, gains."""
        return np.column_stack([served.station, served.up_snr_hz, served.down_snr_hz, served.gain])

    def _move_to(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._epoch = epoch
            self._rows.clear()

    def _compute(self, clients: np.ndarray, t_s: float, keep: bool) -> Served:
        layout, radio = self.layout, self.radio
        assert radio.cells is not None
        normal, unit_xy = cells_mod.client_draws(self.seed, clients, layout.stations)
        if self._given is not None:
            xy = np.stack([self._given[0][clients], self._given[1][clients]], axis=1)
        else:
            xy = self._side_m * unit_xy
        epoch = self.epoch_of(t_s)
        if self.walk is not None and epoch > 0:  # in epoch 0 everyone is where it started
            xy = self.walk.at(clients, epoch * self.walk.model.epoch_s, xy)
        x_m, y_m = xy[:, 0], xy[:, 1]
        # loss >= 0 dB and finite powers (checked): no overflow, no division by zero
        gain = cells_mod.gains(radio, layout, x_m, y_m, normal, clients)
        station = cells_mod.attach(radio.cells.attach, gain, layout, x_m, y_m)
        serving = gain[np.arange(len(clients)), station]
        up = self.radiated_w[clients] * serving / layout.noise_w_hz
        down = layout.station_power_w[station] * serving / layout.noise_w_hz
        check_rates("uplink", up, layout.up_hz, clients)
        check_rates("downlink", down, layout.down_hz, clients)
        served = Served(station, up, down, gain)
        if keep:
            self._rows.put(clients, self._as_rows(served))
        return served


def cell_clients(
    radio: Radio, clients: ClientsConfig, seed: int, population: Population
) -> CellClients | None:
    """The cells of `radio.cells` (None without them)."""
    if radio.mode != "physical" or radio.cells is None:
        return None
    return CellClients(radio, clients, population, seed)
