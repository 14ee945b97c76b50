"""A radio band on the simulated clock: dedicated, or shared equally by concurrent transfers.

A shared band is a fluid processor-sharing queue: while n transfers are active each gets
``bandwidth_hz / n`` and its own Shannon rate on that share; whenever one starts, ends or is
cancelled, the others' progress is settled and their finish times are recomputed. That is
O(n) work per event however it is done; `band()` picks plain Python floats when few transfers
can share a band (cheaper below about a hundred) and numpy arrays when many can.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

import numpy as np
import simpy
from scipy.linalg.lapack import dtrtrs

from flnet.sim.radio import LN2, shannon_rate_bps

ARRAYS_ABOVE_USERS = 128  # about where arrays overtake floats (benchmarks/bench.py)
SOLVE_AT_MOST = 1024  # transfers `solve_alone` takes on: it holds a few [n, n] float arrays
SOLVE_GUESSES = 8  # finishing orders `solve_alone` tries before it leaves the band to the steps


def band(env: simpy.Environment, bandwidth_hz: float, shared: bool, users: int = 1) -> Channel:
    """A channel for `users` senders: dedicated, or shared by however many are active."""
    if not shared:
        return Channel(env, bandwidth_hz)
    return (SharedBandArrays if users > ARRAYS_ABOVE_USERS else SharedBand)(env, bandwidth_hz)


class Schedule(NamedTuple):
    """Transfers on a shared band computed at once (`SharedBand.schedule_alone`)."""

    done: np.ndarray  # [d] the transfers that finished, in the order they did (at one
    # instant: in band order)
    end_s: np.ndarray  # [d] when each of them finished
    settled_s: float  # the band's last event
    left: dict[int, float] = {}  # stopped early: each transfer still under way, its bits left
    cancelled: dict[int, float] = {}  # each transfer cancelled on its way, its bits left then


class Transmission:
    """One transfer on a channel. Wait on `done`; call `cancel()` if the sender gives up."""

    __slots__ = (
        "bits",
        "snr_hz",
        "remaining_bits",
        "rate_bps",
        "done",
        "channel",
        "start_s",
        "cancelled",
        "end_s",
        "client",
        "receiver",
    )

    def __init__(
        self,
        channel: Channel,
        bits: float,
        snr_hz: float,
        done: simpy.Event,
        client: int = -1,
        receiver: int = -1,
    ) -> None:
        """`client`: the client whose row the transfer's cell and interference come from (a
        star uplink's sender, a downlink's receiver, a D2D sender; -1: none, where the band
        needs none); `receiver`: a D2D transmission's receiver whose SINR sets its rate."""
        self.channel = channel
        self.client = client
        self.receiver = receiver
        self.bits = bits
        self.snr_hz = snr_hz
        self.remaining_bits = bits  # settled when the transfer is cancelled
        self.rate_bps = 0.0  # on a shared band: its rate while the active set is unchanged
        self.start_s = channel.env.now
        self.done = done
        self.cancelled = False
        self.end_s = math.nan  # on a dedicated band: when it will be done

    def cancel(self) -> None:
        """Stop sending; `sent_bits` keeps what went out until now."""
        if not self.cancelled and not self.done.processed:
            self.channel._cancel(self)
            self.cancelled = True

    @property
    def sent_bits(self) -> float:
        done = self.done.processed and not self.cancelled
        return self.bits if done else self.bits - self.remaining_bits


class Channel:
    """A band of `bandwidth_hz` that every transfer has to itself: one timeout each."""

    shared = False

    def __init__(self, env: simpy.Environment, bandwidth_hz: float) -> None:
        self.env = env
        self.bandwidth_hz = bandwidth_hz
        self._last_rates: tuple[tuple, list[float]] = ((), [])  # rates_bps' last call

    def rate_bps(self, snr_hz: float) -> float:
        """A transfer's rate alone on the band: Shannon's."""
        return float(shannon_rate_bps(self.bandwidth_hz, snr_hz))

    def rates_bps(self, snr_hz: list[float]) -> list[float]:
        """`rate_bps` of each of `snr_hz`, kept for the next call with the same SNRs (a round
        of the same cohort, no fading)."""
        key = tuple(snr_hz)
        if self._last_rates[0] != key:
            self._last_rates = (key, [self.rate_bps(q) for q in key])
        return self._last_rates[1]

    def transmit(
        self, bits: float, snr_hz: float, client: int = -1, receiver: int = -1
    ) -> Transmission:
        bits, snr_hz = float(bits), float(snr_hz)
        delay = bits / self.rate_bps(snr_hz) if bits > 0 else 0.0
        tx = Transmission(self, bits, snr_hz, self.env.timeout(delay), client, receiver)
        tx.end_s = self.env.now + delay  # the time SimPy scheduled it for, to the bit
        return tx

    # a transfer under way, frozen to numbers and thawed again (resuming a stream exactly)

    def freeze(self, tx: Transmission) -> tuple:
        return (tx.bits, tx.snr_hz, tx.start_s, tx.end_s)

    def thaw(self, frozen: tuple) -> Transmission:
        bits, snr_hz, start_s, end_s = frozen
        tx = Transmission(self, bits, snr_hz, timeout_at(self.env, end_s))
        tx.start_s, tx.end_s = start_s, end_s
        return tx

    def _cancel(self, tx: Transmission) -> None:
        sent = self.rate_bps(tx.snr_hz) * (self.env.now - tx.start_s)
        tx.remaining_bits = max(tx.bits - sent, 0.0)


class TraceRateChannel(Channel):
    """Links whose rate a capacity trace gives (`flnet.sim.traces`): each transfer has its
    own, measured rate, carried where a radio link carries its SNR (`Link.snr_hz` holds the
    rate in bit/s), so a transfer takes bits / rate whatever else is on the air. A measured
    throughput already includes the device's share of its network, so the band is not split."""

    def __init__(self, env: simpy.Environment) -> None:
        super().__init__(env, math.inf)

    def rate_bps(self, snr_hz: float) -> float:
        return snr_hz


class SharedBand(Channel):
    """A band split equally among its active transfers, kept as Python floats on them."""

    shared = True
    # up to this many transfers `schedule_alone` is quicker than `solve_alone` (and exact): a
    # value chosen between n = 5 and n = 10 of benchmarks/bench.py's shared-band lines, which
    # print both per transfer (the arrays band's replay too: its own `replays_up_to`)
    replays_up_to = 8

    def __init__(self, env: simpy.Environment, bandwidth_hz: float) -> None:
        super().__init__(env, bandwidth_hz)
        self._active: list[Transmission] = []
        self._settled_at = env.now
        self._version = 0  # bumped whenever the active set changes
        self._timer: tuple[float, Transmission | None] = (math.inf, None)  # when, who is due
        # solve_alone's rates [n, n] and their lower triangle but the last row, by SNRs
        self._alone_rates: tuple[tuple, np.ndarray, np.ndarray] = (
            (),
            np.empty((0, 0)),
            np.empty(0),
        )

    def transmit(
        self, bits: float, snr_hz: float, client: int = -1, receiver: int = -1
    ) -> Transmission:
        if bits <= 0:
            return super().transmit(bits, snr_hz, client, receiver)
        tx = Transmission(self, float(bits), float(snr_hz), self.env.event(), client, receiver)
        self._settle()
        self._join(tx)
        self._schedule()
        return tx

    def _on_timer(self, version: int, due: Transmission | None) -> None:
        if version != self._version:
            return  # the set of transfers changed since this timer was set
        self._settle()
        for tx in self._finish(due):
            tx.remaining_bits = 0.0
            tx.done.succeed()
        self._schedule()

    def _cancel(self, tx: Transmission) -> None:
        if tx not in self._active:  # nothing to send (bits <= 0)
            return
        self._settle()
        self._leave([tx])
        self._schedule()

    def _settle(self) -> None:
        """`_settle_at` the clock's instant."""
        self._settle_at(self.env.now)

    def _settle_at(self, now_s: float) -> None:
        """Charge every active transfer the bits it sent since the last change."""
        elapsed = now_s - self._settled_at
        self._settled_at = now_s
        if elapsed > 0 and self._active:
            self._send_for(elapsed)

    def _schedule(self) -> None:
        """New rates for the current set; a timer for the first to finish."""
        self._version += 1  # timers set for the old set are ignored
        if self._active:
            delay, due = self._next_due()
            self._set_timer(self.env.timeout(max(delay, 0.0)), due)
            self._timer = (self.env.now + max(delay, 0.0), due)

    def _next_due(self) -> tuple[float, Transmission | None]:
        """The current set's rates; the delay to the first finish and who."""
        return self._rerate(self.bandwidth_hz / len(self._active))

    def _finish(self, due: Transmission | None) -> list[Transmission]:
        """`due` leaves, finished by construction (rounding may leave it a hair short), and any
        others that end at the same instant with it, in band order."""
        return self._leave(self._finished(due))

    def _set_timer(self, timeout: simpy.Event, due: Transmission | None) -> None:
        version = self._version
        timeout.callbacks.append(lambda _e: self._on_timer(version, due))

    def freeze_band(self) -> dict:
        """The band's transfers under way (in order) and its timer, as numbers."""
        self._sync()
        at, due = self._timer
        return {
            "settled_at": self._settled_at,
            "timer_at": at,
            "due": self._active.index(due) if due in self._active else -1,
            "active": [
                (tx.bits, tx.snr_hz, tx.remaining_bits, tx.rate_bps, tx.start_s)
                for tx in self._active
            ],
        }

    def thaw_band(self, frozen: dict) -> list[Transmission]:
        """Put a frozen band's transfers back under way, its timer at the same instant; the
        transfers in their order."""
        txs = []
        n = len(frozen["active"])
        clients = frozen.get("clients") or [-1] * n
        receivers = frozen.get("receivers") or [-1] * n
        for (bits, snr_hz, remaining, rate, start_s), client, receiver in zip(
            frozen["active"], clients, receivers
        ):
            tx = Transmission(self, bits, snr_hz, self.env.event(), int(client), int(receiver))
            tx.remaining_bits, tx.rate_bps, tx.start_s = remaining, rate, start_s
            self._join(tx)
            txs.append(tx)
        self._settled_at = frozen["settled_at"]
        self._resync()
        self._version += 1
        if txs:
            due = txs[frozen["due"]]
            self._set_timer(timeout_at(self.env, frozen["timer_at"]), due)
            self._timer = (frozen["timer_at"], due)
        return txs

    def schedule_alone(
        self,
        arrival_s: list[float],
        bits: list[float],
        snr_hz: list[float],
        until_s: float = math.inf,
        until_done: int = 0,
        cancel_s: list[float] | None = None,
        counted: list[bool] | None = None,
        clients: list[int] | None = None,
    ) -> Schedule | None:
        """When transfers arriving at `arrival_s` (non-decreasing, processed in this order;
        bits > 0) would finish on this idle band if nothing else used it. It takes this band's
        own steps (`_settle_at`, `_join`, `_finish`, `_leave`, `_next_due`: what `transmit`,
        the timers, `cancel` and `_schedule` do) on a scratch band of its kind, without SimPy
        events, so it agrees with them bit for bit whichever layout holds the state (floats or
        arrays; tests/test_at_once.py). With `until_s`, what happens up to that instant (its
        finishes included), and the bits each transfer still under way has left then, settled
        as the first `cancel` would; with `until_done`, up to the instant the `until_done`-th
        transfer finishes (of those `counted`, per transfer: all by default); with `cancel_s`
        (per transfer, after its arrival; inf: never), each transfer still under way then is
        cancelled at that instant (its sender's session ended), its bits left kept in
        `cancelled`; `clients` (listed alike) as `transmit` has them. None where an arrival, a
        finish or a cancel fall on one instant before the stop: there SimPy's event order
        would decide, so the caller simulates event by event."""
        scratch = self._scratch()  # its events are never scheduled
        scratch._settled_at = self._settled_at
        never = self.env.event()  # what the transfers' `done` would wait on: nothing here
        who = clients if clients is not None else [-1] * len(bits)
        txs = [Transmission(scratch, b, q, never, c) for b, q, c in zip(bits, snr_hz, who)]
        index = {tx: k for k, tx in enumerate(txs)}
        done_order: list[int] = []
        done_s: list[float] = []
        n, i, finished, inf = len(txs), 0, 0, math.inf
        timer_s, due = inf, None
        # cancels by instant; `over`: the transfers that finished or were cancelled
        cancels = sorted((c, k) for k, c in enumerate(cancel_s or ()) if c < inf)
        j, over, cancelled = 0, [False] * n, {}
        while i < n or scratch._active:
            while j < len(cancels) and over[cancels[j][1]]:
                j += 1  # finished before its sender's session ended: nothing to cancel
            arrives_s = arrival_s[i] if i < n else inf
            cancel_at = cancels[j][0] if j < len(cancels) else inf
            now = min(arrives_s, timer_s, cancel_at)
            if now > until_s:
                break
            if arrives_s == timer_s:
                return None
            if cancel_at == now:
                following = cancels[j + 1][0] if j + 1 < len(cancels) else inf
                if now in (arrives_s, timer_s, following):
                    return None  # another event at the cancel's instant
                k = cancels[j][1]
                if k >= i:  # cancelled before it arrived: not this band's to decide
                    return None
                scratch._settle_at(now)  # `cancel`: settle, leave, a new timer
                scratch._leave([txs[k]])
                cancelled[k] = txs[k].remaining_bits
                over[k] = True
                j += 1
            elif arrives_s < timer_s:  # transmit
                scratch._settle_at(now)
                scratch._join(txs[i])
                i += 1
            else:  # the timer: `due` and any others done at this instant leave
                scratch._settle_at(now)
                done = scratch._finish(due)
                done_order += [index[tx] for tx in done]
                done_s += [now] * len(done)
                for tx in done:
                    over[index[tx]] = True
                    finished += counted is None or counted[index[tx]]
                if 0 < until_done <= finished:
                    until_s = now  # this instant's other events, if any, then stop
            timer_s = inf  # _schedule
            if scratch._active:  # in band order
                delay, due = scratch._next_due()
                timer_s = now + max(delay, 0.0)
        left: dict[int, float] = {}
        if scratch._active:  # stopped at until_s: the first cancel settles them all
            scratch._settle_at(until_s)
            scratch._sync()
            left = {index[tx]: tx.remaining_bits for tx in scratch._active}
        done_at = np.array(done_order, dtype=np.int64), np.array(done_s, dtype=float)
        return Schedule(*done_at, scratch._settled_at, left, cancelled)

    def _scratch(self) -> SharedBand:
        """An idle band of this kind, for `schedule_alone`'s steps."""
        return type(self)(self.env, self.bandwidth_hz)

    def solve_alone(
        self,
        arrival_s: list[float] | np.ndarray,
        bits: list[float] | np.ndarray,
        snr_hz: list[float],
    ) -> Schedule | None:
        """`schedule_alone`'s transfers where every one arrives before any finishes (the usual
        round: uploads that last longer than the spread of their starts). The band then holds
        1, 2, ..., n transfers between the arrivals and n, n - 1, ..., 1 as they finish, so the
        bits sent are sums of rate x time over a known sequence of populations and the gaps
        between finishes solve a triangular system: a few array operations on [n, n] instead of
        n^2 steps in Python (benchmarks/bench.py's shared-band lines print both, per transfer).
        It rounds differently from the
        step-by-step path (times agree within 1e-12 relative; tests/test_at_once.py). None
        where a finish would come before the last arrival or within `_finished`'s tolerance of
        another one (the steps would group them), where SOLVE_GUESSES orders all fail, or for
        more than SOLVE_AT_MOST transfers."""
        n = len(arrival_s)
        if n > SOLVE_AT_MOST:
            return None
        a, b = np.asarray(arrival_s), np.asarray(bits)
        floor = 1e-9 * b + 1e-6  # _finished's tolerance
        rate, arriving = self._rates_alone(snr_hz)  # [population - 1, transfer]
        # while arriving: j + 1 transfers (0..j) share the band from a[j] to a[j + 1] (the
        # rates' lower triangle times the gaps; 0.0 for those not arrived yet)
        sent = np.diff(a) @ arriving
        remaining = b - sent
        if not (remaining > floor).all():
            return None
        # then n, n - 1, ...: gap l has population n - l. Guess the finishing order by the time
        # each has left at the current population, solve for the gaps, and where someone
        # would have finished before its turn, guess again from there
        by_gap = rate[::-1]  # [gap, transfer]
        order = np.argsort(remaining / by_gap[0], kind="stable")
        for _ in range(SOLVE_GUESSES):
            # (the solver reads only the lower triangle)
            in_order = by_gap[:, order]  # [gap, i]: the rate of the i-th to finish
            gaps, info = _solve_lower(in_order.T, remaining[order])
            if info:
                return None  # a rate of 0 on the diagonal
            # what each has sent only grows, so it finished before its turn only if it had by
            # the gap just before its own: if what it sends in its own gap (its bits less
            # those it had sent before) is within _finished's tolerance of nothing
            last = np.diagonal(in_order) * gaps
            if (
                (gaps >= 0).all()
                and np.isfinite(last).all()
                and (last[1:] > floor[order[1:]]).all()
            ):
                break
            # [gap, transfer]: what each has sent by the end of each gap
            left = remaining - np.cumsum(by_gap * gaps[:, None], axis=0)
            rank = np.empty(n, dtype=np.int64)
            rank[order] = np.arange(n)
            early = (left <= floor) & (np.arange(n)[:, None] < rank[None, :])  # before its turn
            if not early.any():
                break
            i = int(early.any(1).argmax())  # the first gap someone outran
            if (left[i, early[i]] >= -floor[early[i]]).all():
                return (
                    None  # finishes together (within _finished's tolerance): the steps group them
                )
            before = left[i - 1] if i else remaining
            rest = order[i:]
            order = np.concatenate(
                [order[:i], rest[np.argsort(before[rest] / by_gap[i, rest], kind="stable")]]
            )
        else:
            return None
        if not (np.isfinite(gaps) & (gaps >= 0)).all():
            return None
        ends = np.cumsum(np.concatenate([a[-1:], gaps]))[1:]
        return Schedule(order, ends, float(ends[-1]))

    def _rates_alone(self, snr_hz: list[float]) -> tuple[np.ndarray, np.ndarray]:
        """[n, n]: transfer k's rate (column) while j + 1 transfers share the band (row j);
        and [n - 1, n] its rows but the last with 0 above the diagonal (those who have not
        arrived yet). Kept for the next call with the same SNRs (a round of the same cohort,
        no fading)."""
        key = tuple(snr_hz)
        if self._alone_rates[0] != key:
            share_hz = self.bandwidth_hz / np.arange(1, len(key) + 1)
            rate = shannon_rate_bps(share_hz[:, None], np.asarray(key)[None, :])
            arriving = np.tril(rate[:-1])
            rate.setflags(write=False)
            arriving.setflags(write=False)
            self._alone_rates = (key, rate, arriving)
        return self._alone_rates[1], self._alone_rates[2]

    def settle_alone(self, schedule: Schedule) -> None:
        """Leave the band as its transfers in `schedule` would have: idle, settled at the last
        of them, with no timer (it was idle when they started, so none of its version is
        pending)."""
        self._settled_at = schedule.settled_s
        self._timer = (math.inf, None)

    def position(self, tx: Transmission) -> int:
        """`tx`'s place among the transfers under way (as `freeze_band` lists them)."""
        return self._active.index(tx)

    def _sync(self) -> None:
        """Copy the state layout's remaining bits and rates onto the transfers."""

    def _resync(self) -> None:
        """And back."""

    # the state, as floats on the transfers

    def _join(self, tx: Transmission) -> None:
        self._active.append(tx)

    def _leave(self, txs: list[Transmission]) -> list[Transmission]:
        """Drop `txs` (in arrival order) from the active set, their remaining bits settled."""
        self._active = [tx for tx in self._active if tx not in txs]
        for tx in txs:
            tx.remaining_bits = max(tx.remaining_bits, 0.0)
        return txs

    def _finished(self, due: Transmission | None) -> list[Transmission]:
        return [
            tx for tx in self._active if tx is due or tx.remaining_bits <= 1e-9 * tx.bits + 1e-6
        ]

    def _send_for(self, elapsed_s: float) -> None:
        for tx in self._active:
            tx.remaining_bits -= tx.rate_bps * elapsed_s

    def _rerate(self, share_hz: float) -> tuple[float, Transmission | None]:
        """Every active transfer's rate on `share_hz`; the delay to the first finish and who."""
        scale, log1p = share_hz / LN2, math.log1p  # shannon_rate_bps, inlined: the hot loop
        due, delay = None, math.inf
        for tx in self._active:
            rate = tx.rate_bps = scale * log1p(tx.snr_hz / share_hz)
            if tx.remaining_bits / rate < delay:
                due, delay = tx, tx.remaining_bits / rate
        return delay, due


class SharedBandArrays(SharedBand):
    """The same band with its active transfers' remaining bits, SNRs and sizes in the first n
    entries of arrays, so an event is a few vectorised operations however many share it."""

    replays_up_to = 2

    def __init__(self, env: simpy.Environment, bandwidth_hz: float) -> None:
        super().__init__(env, bandwidth_hz)
        self._columns = np.empty((3, 16))  # remaining bits, snr_hz, bits; [3, capacity]
        self._rates = np.empty(0)  # [n] rates of the current set

    def _join(self, tx: Transmission) -> None:
        n = len(self._active)
        if n == self._columns.shape[1]:
            self._columns = np.concatenate([self._columns, np.empty_like(self._columns)], 1)
        self._columns[:, n] = (tx.bits, tx.snr_hz, tx.bits)
        self._active.append(tx)

    def _leave(self, txs: list[Transmission]) -> list[Transmission]:
        for tx in reversed(txs):  # arrival order = ascending positions
            i, n = self._active.index(tx), len(self._active)
            tx.remaining_bits = max(float(self._columns[0, i]), 0.0)
            self._columns[:, i : n - 1] = self._columns[:, i + 1 : n]
            del self._active[i]
        return txs

    def _sync(self) -> None:
        n = len(self._active)
        for tx, remaining, rate in zip(
            self._active, self._columns[0, :n].tolist(), np.broadcast_to(self._rates, (n,)).tolist()
        ):
            tx.remaining_bits, tx.rate_bps = remaining, rate

    def _resync(self) -> None:
        n = len(self._active)
        self._columns[0, :n] = [tx.remaining_bits for tx in self._active]
        self._rates = np.array([tx.rate_bps for tx in self._active])

    def _finished(self, due: Transmission | None) -> list[Transmission]:
        n = len(self._active)
        done = self._columns[0, :n] <= 1e-9 * self._columns[2, :n] + 1e-6
        # a timer is set only while a transfer is active, so `due` is one of them
        done[self._active.index(cast(Transmission, due))] = True
        return [self._active[i] for i in done.nonzero()[0].tolist()]

    def _send_for(self, elapsed_s: float) -> None:
        self._columns[0, : len(self._active)] -= self._rates * elapsed_s

    def _rerate(self, share_hz: float) -> tuple[float, Transmission | None]:
        n = len(self._active)
        self._rates = shannon_rate_bps(share_hz, self._columns[1, :n])
        delays = self._columns[0, :n] / self._rates
        first = int(delays.argmin())
        return float(delays[first]), self._active[first]


def _solve_lower(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int]:
    """x with a x = b, `a` lower triangular in C order (its upper part unread; `solve_alone`
    gathers its columns into one), and LAPACK's info (> 0: a zero on the diagonal): the
    transposed system on `a`'s Fortran-order view, the LAPACK call scipy's
    `solve_triangular(a, b, lower=True)` makes for a C-order `a`, without its checks."""
    return dtrtrs(a.T, b, lower=0, trans=1)


def timeout_at(env: simpy.Environment, at_s: float) -> simpy.Event:
    """A timeout that fires at exactly `at_s` (SimPy adds a delay to now, which may round to
    a neighbour of `at_s`: the delay is nudged until the sum is `at_s`)."""
    delay = at_s - env.now
    for _ in range(64):  # one or two steps in practice
        got = env.now + delay
        if got == at_s:
            break
        delay = math.nextafter(delay, math.inf if got < at_s else -math.inf)
    return env.timeout(max(delay, 0.0))
