"""A radio band on the simulated clock: dedicated, or shared equally by concurrent transfers.

A shared band is a fluid processor-sharing queue: while n transfers are active each gets
``bandwidth_hz / n`` and its own Shannon rate on that share; whenever one starts, ends or is
cancelled, the others' progress is settled and their finish times are recomputed.
"""

from __future__ import annotations

import numpy as np
import simpy

from flnet.radio import shannon_rate_bps


class Transmission:
    """One transfer on a channel. Wait on `done`; call `cancel()` if the sender gives up."""

    __slots__ = ("bits", "snr_hz", "remaining_bits", "done", "channel", "start_s")

    def __init__(self, channel: "Channel", bits: float, snr_hz: float, done: simpy.Event):
        self.channel = channel
        self.bits = bits
        self.snr_hz = snr_hz
        self.remaining_bits = bits  # settled when the transfer is cancelled
        self.start_s = channel.env.now
        self.done = done

    def cancel(self) -> None:
        self.channel._cancel(self)

    @property
    def sent_bits(self) -> float:
        return self.bits if self.done.processed else self.bits - self.remaining_bits


class Channel:
    """A band of `bandwidth_hz`; `shared=True` splits it equally among active transfers.

    A shared band keeps its active transfers' remaining bits, SNRs and sizes in the first n
    entries of arrays, and their rates until the set changes, so settling and rescheduling are
    a few vectorised operations however many transfers share the band. A transfer's
    `remaining_bits` is settled when it ends or is cancelled.
    """

    def __init__(self, env: simpy.Environment, bandwidth_hz: float, shared: bool):
        self.env = env
        self.bandwidth_hz = bandwidth_hz
        self.shared = shared
        self._active: list[Transmission] = []
        self._columns = np.empty((3, 16))  # shared band: remaining bits, snr_hz, bits; [3, cap]
        self._rates: np.ndarray | None = None  # [n] rates of the current set, once computed
        self._settled_at = env.now
        self._version = 0

    def transmit(self, bits: float, snr_hz: float) -> Transmission:
        if bits <= 0 or not self.shared:  # the transfer is one timeout: nothing to track
            delay = float(bits / shannon_rate_bps(self.bandwidth_hz, snr_hz)) if bits > 0 else 0.0
            return Transmission(self, float(bits), float(snr_hz), self.env.timeout(delay))
        tx = Transmission(self, float(bits), float(snr_hz), self.env.event())
        self._settle()
        n = len(self._active)
        if n == self._columns.shape[1]:
            self._columns = np.concatenate([self._columns, np.empty_like(self._columns)], 1)
        self._columns[:, n] = (tx.bits, tx.snr_hz, tx.bits)
        self._active.append(tx)
        self._rates = None
        self._schedule()
        return tx

    # ------------------------------------------------------------ shared

    def _rates_bps(self) -> np.ndarray:
        """[n] each active transfer's Shannon rate on its 1/n share of the band."""
        if self._rates is None:
            n = len(self._active)
            self._rates = shannon_rate_bps(self.bandwidth_hz / n, self._columns[1, :n])
        return self._rates

    def _settle(self) -> None:
        """Charge every active transfer the bits it sent since the last change."""
        elapsed = self.env.now - self._settled_at
        self._settled_at = self.env.now
        if elapsed > 0 and self._active:
            self._columns[0, :len(self._active)] -= self._rates_bps() * elapsed

    def _schedule(self) -> None:
        self._version += 1
        if not self._active:
            return
        delays = self._columns[0, :len(self._active)] / self._rates_bps()
        first = int(np.argmin(delays))
        version, due = self._version, self._active[first]
        self.env.timeout(max(float(delays[first]), 0.0)).callbacks.append(
            lambda _e: self._on_timer(version, due))

    def _remove(self, positions: list[int]) -> list[Transmission]:
        """Drop the active transfers at `positions` (ascending), settling their remaining bits;
        returns them in that order."""
        out = []
        for i in reversed(positions):
            n = len(self._active)
            tx = self._active.pop(i)
            tx.remaining_bits = max(float(self._columns[0, i]), 0.0)
            self._columns[:, i:n - 1] = self._columns[:, i + 1:n]
            out.append(tx)
        self._rates = None
        return out[::-1]

    def _on_timer(self, version: int, due: Transmission) -> None:
        if version != self._version:
            return  # the set of transfers changed since this timer was set
        self._settle()
        n = len(self._active)
        left, bits = self._columns[0, :n], self._columns[2, :n]
        # `due` is finished by construction (rounding may leave it a hair short); others that
        # end at the same instant go with it
        finished = set(np.flatnonzero(left <= 1e-9 * bits + 1e-6).tolist())
        finished.add(self._active.index(due))
        for tx in self._remove(sorted(finished)):
            tx.remaining_bits = 0.0
            tx.done.succeed()
        self._schedule()

    def _cancel(self, tx: Transmission) -> None:
        if self.shared:
            if tx not in self._active:
                return
            self._settle()
            self._remove([self._active.index(tx)])
            self._schedule()
        elif not tx.done.processed:
            rate = shannon_rate_bps(self.bandwidth_hz, tx.snr_hz)
            tx.remaining_bits = max(tx.bits - float(rate) * (self.env.now - tx.start_s), 0.0)
