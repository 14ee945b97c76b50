"""A radio band on the simulated clock: dedicated, or shared equally by concurrent transfers.

A shared band is a fluid processor-sharing queue: while n transfers are active each gets
``bandwidth_hz / n`` and its own Shannon rate on that share; whenever one starts, ends or is
cancelled, the others' progress is settled and their finish times are recomputed.
"""

from __future__ import annotations

import simpy

from flnet.radio import shannon_rate_bps


class Transmission:
    """One transfer on a channel. Wait on `done`; call `cancel()` if the sender gives up."""

    __slots__ = ("bits", "snr_hz", "remaining_bits", "done", "channel", "start_s")

    def __init__(self, channel: "Channel", bits: float, snr_hz: float):
        self.channel = channel
        self.bits = bits
        self.snr_hz = snr_hz
        self.remaining_bits = bits
        self.start_s = channel.env.now
        self.done = channel.env.event()

    def cancel(self) -> None:
        self.channel._cancel(self)

    @property
    def sent_bits(self) -> float:
        return self.bits - self.remaining_bits


class Channel:
    """A band of `bandwidth_hz`; `shared=True` splits it equally among active transfers."""

    def __init__(self, env: simpy.Environment, bandwidth_hz: float, shared: bool):
        self.env = env
        self.bandwidth_hz = bandwidth_hz
        self.shared = shared
        self._active: list[Transmission] = []
        self._settled_at = env.now
        self._version = 0

    def transmit(self, bits: float, snr_hz: float) -> Transmission:
        tx = Transmission(self, float(bits), float(snr_hz))
        if bits <= 0:
            tx.remaining_bits = 0.0
            tx.done.succeed()
        elif not self.shared:
            delay = float(bits / shannon_rate_bps(self.bandwidth_hz, snr_hz))
            self.env.timeout(delay).callbacks.append(lambda _e, tx=tx: self._finish_one(tx))
            self._active.append(tx)
        else:
            self._settle()
            self._active.append(tx)
            self._schedule()
        return tx

    # ------------------------------------------------------------ dedicated

    def _finish_one(self, tx: Transmission) -> None:
        if tx in self._active:
            self._active.remove(tx)
            tx.remaining_bits = 0.0
            tx.done.succeed()

    # ------------------------------------------------------------ shared

    def _rate_bps(self, tx: Transmission, n: int) -> float:
        return shannon_rate_bps(self.bandwidth_hz / n, tx.snr_hz)

    def _settle(self) -> None:
        """Charge every active transfer the bits it sent since the last change."""
        elapsed = self.env.now - self._settled_at
        self._settled_at = self.env.now
        if elapsed > 0 and self._active and self.shared:
            n = len(self._active)
            for tx in self._active:
                tx.remaining_bits -= float(self._rate_bps(tx, n)) * elapsed

    def _schedule(self) -> None:
        self._version += 1
        if not self._active:
            return
        n = len(self._active)
        delays = [max(tx.remaining_bits, 0.0) / self._rate_bps(tx, n) for tx in self._active]
        first = min(range(n), key=delays.__getitem__)
        version, due = self._version, self._active[first]
        self.env.timeout(float(delays[first])).callbacks.append(
            lambda _e: self._on_timer(version, due))

    def _on_timer(self, version: int, due: Transmission) -> None:
        if version != self._version:
            return  # the set of transfers changed since this timer was set
        self._settle()
        # `due` is finished by construction (rounding may leave it a hair short); others that
        # end at the same instant go with it
        finished = [tx for tx in self._active
                    if tx is due or tx.remaining_bits <= 1e-9 * tx.bits + 1e-6]
        for tx in finished:
            self._active.remove(tx)
            tx.remaining_bits = 0.0
            tx.done.succeed()
        self._schedule()

    def _cancel(self, tx: Transmission) -> None:
        if tx not in self._active:
            return
        if self.shared:
            self._settle()
            self._active.remove(tx)
            self._schedule()
        else:
            self._active.remove(tx)
            rate = shannon_rate_bps(self.bandwidth_hz, tx.snr_hz)
            tx.remaining_bits = max(tx.bits - float(rate) * (self.env.now - tx.start_s), 0.0)
