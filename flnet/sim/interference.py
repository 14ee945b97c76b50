"""Bands whose transfers interfere, on the simulated clock: the cells' uplinks, every cell's
transfers on one event solve coupled by co-channel interference (`CellBand`, `radio.cells`;
the model: `flnet.sim.cells`), and device-to-device transmissions with spatial reuse
(`D2DReuseBand`, `radio.d2d.sharing: spatial_reuse`).

`CellBand` is the shared band's fluid solve (`flnet.sim.channel.SharedBandArrays`) with two
changes to how rates are set whenever a transfer starts, ends or is cancelled: a transfer's
share is its own cell's (the group band W split among that cell's transfers under way, or all
of W on a dedicated band), and its SNR density is divided by its station's noise rise
``1 + I_a / (N0 W)``, I_a the power the other co-channel cells' transfers under way put on the
station. So when a transfer in a neighbouring cell ends, the others' rates rise and their finish
times are recomputed, as they are when a transfer in their own cell ends. Each transfer keeps
its cell and the row of power it puts on every station (B floats), so an event costs
O(transfers under way x stations), whatever the number of registered clients.

The round-trip accelerator (`flnet.sim.at_once`) replays this band's own steps (`schedule_alone`
with the transfers' clients): there is no closed form with interference (`solve_alone` gives
None), and the replay agrees with the events bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from flnet.schema import LogDistance
from flnet.sim.cells import CellLayout, CellRows, noise_rise
from flnet.sim.channel import Schedule, SharedBand, SharedBandArrays, Transmission
from flnet.sim.radio import dbm_to_w, shannon_rate_bps

SPEED_OF_LIGHT_M_S = 299_792_458.0


class InterferingBand(SharedBandArrays):
    """A shared band whose transfers' rates depend on who else is on the air (in other cells,
    or at other receivers): the round-trip accelerator has no closed form for it and replays
    its steps instead."""

    def solve_alone(
        self,
        arrival_s: list[float] | np.ndarray,
        bits: list[float] | np.ndarray,
        snr_hz: list[float],
    ) -> Schedule | None:
        """No closed form: the rates depend on the interference of the transfers under way."""
        return None


class CellBand(InterferingBand):
    """Every cell's transfers on one band object of `bandwidth_hz` a channel group. `rows`
    gives a transfer's station and gains [B] as of its start (`serving`), which with
    `radiated_w` [N] and `interfering` make the power it puts on each station; `split`: a
    cell's concurrent transfers split its band (shared) or each has all of it (dedicated)."""

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_hz: float,
        cells: CellLayout,
        rows: CellRows,
        radiated_w: np.ndarray,
        split: bool,
        interfering: bool,
    ) -> None:
        super().__init__(env, bandwidth_hz)
        self.cells, self.rows, self.radiated_w = cells, rows, radiated_w
        self.split = split
        self.interfering = interfering and bool(cells.coupled.any())
        self._cell = np.empty(16, dtype=np.int64)  # [capacity] each transfer's station
        self._rows = np.empty((16, cells.stations))  # [capacity, B] the power it puts on each

    def transmit(
        self, bits: float, snr_hz: float, client: int = -1, receiver: int = -1
    ) -> Transmission:
        if client < 0:
            raise ValueError("a transfer on the cells' band needs its client")
        return super().transmit(bits, snr_hz, client, receiver)

    def _scratch(self) -> SharedBand:
        return CellBand(
            self.env,
            self.bandwidth_hz,
            self.cells,
            self.rows,
            self.radiated_w,
            self.split,
            self.interfering,
        )

    def freeze_band(self) -> dict:
        return {**super().freeze_band(), "clients": [tx.client for tx in self._active]}

    def _join(self, tx: Transmission) -> None:
        n = len(self._active)
        if n == len(self._cell):
            self._cell = np.concatenate([self._cell, np.empty_like(self._cell)])
            self._rows = np.concatenate([self._rows, np.empty_like(self._rows)])
        cell, gain = self.rows.serving(tx.client, tx.start_s)  # as of its start (a thaw too)
        self._cell[n] = cell
        if self.interfering:
            coupled = self.cells.coupled[cell]
            self._rows[n] = self.radiated_w[tx.client] * gain * coupled
        super()._join(tx)

    def _leave(self, txs: list[Transmission]) -> list[Transmission]:
        for tx in reversed(txs):  # arrival order = ascending positions
            i, n = self._active.index(tx), len(self._active)
            self._cell[i : n - 1] = self._cell[i + 1 : n]
            self._rows[i : n - 1] = self._rows[i + 1 : n]
            super()._leave([tx])
        return txs

    def _next_due(self) -> tuple[float, Transmission | None]:
        """Each transfer's rate on its cell's share at its SINR; the first to finish."""
        n = len(self._active)
        cells = self._cell[:n]
        share_hz: float | np.ndarray = self.bandwidth_hz
        if self.split:
            share_hz = self.bandwidth_hz / np.bincount(cells)[cells]
        snr_hz = self._columns[1, :n]
        if self.interfering:
            snr_hz = snr_hz / noise_rise(self.cells, cells, self._rows[:n], self.bandwidth_hz)
        self._rates = shannon_rate_bps(share_hz, snr_hz)
        delays = self._columns[0, :n] / self._rates
        first = int(delays.argmin())
        return float(delays[first]), self._active[first]


class D2DReuseBand(InterferingBand):
    """Device-to-device transmissions with spatial reuse (`radio.d2d.sharing: spatial_reuse`):
    each has the whole band at once, and every other transmission under way interferes at its
    receiver. Transmission k (sender s_k, radiating P_k) puts ``P_k g(s_k, r)`` on receiver r,
    g the log-distance path loss at their distance without shadowing (`median_gain_d2d`); a
    receiver does not hear its own transmissions (full duplex cancels them). Its rate is
    ``B log2(1 + SINR)`` with

        SINR = (snr_hz / B) / (1 + I_r / (N0' B)),    I_r = sum_{k != self} P_k g(s_k, r)

    (N0' the noise density with the receiver's noise figure; for a broadcast r is its weakest
    receiver, by SNR after fading, as without interference). Each transmission keeps a row
    and a column of the [n, n] matrix of the powers the ones under way put on each other's
    receivers, so an event costs O(n^2) in the transmissions under way, none per client."""

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_hz: float,
        x_m: np.ndarray,
        y_m: np.ndarray,
        radiated_w: np.ndarray,
        model: LogDistance,
    ) -> None:
        super().__init__(env, bandwidth_hz)
        self.x_m, self.y_m, self.radiated_w, self.model = x_m, y_m, radiated_w, model
        self.noise_w = float(dbm_to_w(model.noise_psd_dbm_hz + model.noise_figure_db))
        self.noise_w *= bandwidth_hz
        self._ends = np.empty((2, 16), dtype=np.int64)  # [2, capacity] sender, receiver
        self._power = np.zeros((16, 16))  # [k, j]: what transmission k puts on j's receiver

    def transmit(
        self, bits: float, snr_hz: float, client: int = -1, receiver: int = -1
    ) -> Transmission:
        if client < 0 or receiver < 0:
            raise ValueError("a D2D transmission with spatial reuse needs its two ends")
        return super().transmit(bits, snr_hz, client, receiver)

    def _scratch(self) -> SharedBand:
        return D2DReuseBand(
            self.env, self.bandwidth_hz, self.x_m, self.y_m, self.radiated_w, self.model
        )

    def freeze_band(self) -> dict:
        return {
            **super().freeze_band(),
            "clients": [tx.client for tx in self._active],
            "receivers": [tx.receiver for tx in self._active],
        }

    def _join(self, tx: Transmission) -> None:
        n = len(self._active)
        if n == self._ends.shape[1]:
            self._ends = np.concatenate([self._ends, np.empty_like(self._ends)], axis=1)
            grown = np.zeros((2 * n, 2 * n))
            grown[:n, :n] = self._power[:n, :n]
            self._power = grown
        self._ends[:, n] = (tx.client, tx.receiver)
        senders, receivers = self._ends[0, : n + 1], self._ends[1, : n + 1]
        # the new one's power on the others' receivers (row), theirs on its receiver (column)
        self._power[n, : n + 1] = self._on(senders[n : n + 1], receivers)
        self._power[: n + 1, n] = self._on(senders, receivers[n : n + 1])
        self._power[n, n] = 0.0
        super()._join(tx)

    def _on(self, senders: np.ndarray, receivers: np.ndarray) -> np.ndarray:
        """What each of `senders` puts on each of `receivers` (broadcast against each other),
        0 where a sender is the receiver."""
        dx = self.x_m[senders] - self.x_m[receivers]
        dy = self.y_m[senders] - self.y_m[receivers]
        power = self.radiated_w[senders] * median_gain_d2d(self.model, np.hypot(dx, dy))
        return np.where(senders == receivers, 0.0, power)

    def _leave(self, txs: list[Transmission]) -> list[Transmission]:
        for tx in reversed(txs):  # arrival order = ascending positions
            i, n = self._active.index(tx), len(self._active)
            self._ends[:, i : n - 1] = self._ends[:, i + 1 : n]
            self._power[i : n - 1, :n] = self._power[i + 1 : n, :n]
            self._power[:n, i : n - 1] = self._power[:n, i + 1 : n]
            super()._leave([tx])
        return txs

    def _next_due(self) -> tuple[float, Transmission | None]:
        n = len(self._active)
        interference_w = self._power[:n, :n].sum(axis=0)  # at each one's receiver
        sinr_hz = self._columns[1, :n] / (1.0 + interference_w / self.noise_w)
        self._rates = shannon_rate_bps(self.bandwidth_hz, sinr_hz)
        delays = self._columns[0, :n] / self._rates
        first = int(delays.argmin())
        return float(delays[first]), self._active[first]


def median_gain_d2d(model: LogDistance, distance_m: np.ndarray) -> np.ndarray:
    """``10^(-PL/10)`` of `flnet.sim.network.d2d_path_loss_db` without shadowing, for arrays."""
    d0 = model.reference_m
    free_space_db = 20.0 * math.log10(4.0 * math.pi * d0 * model.carrier_hz / SPEED_OF_LIGHT_M_S)
    loss_db = free_space_db + 10.0 * model.exponent * np.log10(np.maximum(distance_m, d0) / d0)
    return 10.0 ** (-loss_db / 10.0)
