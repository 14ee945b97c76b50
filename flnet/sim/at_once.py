"""A round trip computed at once, where every member's fate is known when its trip starts.

When no battery can cut work (`World.fates_known`) and every band is dedicated or a shared
band idle at the start, a round trip is a closed system: each member's fate
(`World.trip_fates`, the event path's own draws: a slowdown, a dropout phase and the share of
that phase's work, its session's end, its upload's judge) is known when it starts, its
download ends at ``t0 + bits / rate``, its compute ``duration * slowdown`` after that, and its
upload when the uplink lets it; a member dropped in a phase runs that phase's job on its
share of the bits or FLOPs, which ends ``dropped``, and starts no later phase. Availability
acts through two functions of the client and the instant alone: with check ``during``, a
member whose session ends (`Fate.cut_s`) before its trip is over has the job under way then
charged up to that instant, ended ``interrupted`` (on a shared band its transfer leaves the
band then and the others share it anew: the band's replay cancels it, `schedule_alone`'s
`cancel_s`), and starts nothing after it; with check ``at_completion``, each upload's outcome
is the judge's (`Fate.judge`: the member's online state) at its planned end: ``lost`` where
offline, all its work charged, no delivery. The server stops waiting at the keep-th delivery
(over-selection: the rest are cancelled), once every member has delivered or otherwise
arrived (dropped, cut, lost), or at the deadline (the rest are cut), each job under way
charged up to that instant.
Downloads and computes use the event-by-event path's own arithmetic (IEEE +, -, *, / on
arrays, the scalar functions for the rest); a shared band is solved at once where every
transfer starts before any finishes and nobody is stopped (`SharedBand.solve_alone`: times
within 1e-12 relative of the steps') and replayed step by step otherwise, or where it has few
transfers (`schedule_alone`: the band's own steps, floats or arrays, to the bit; the
uplink's replay stops at the deadline or the keep-th finish of an upload sure to deliver (one
not to drop nor to judge), the downlink's at the deadline, and a replay is run again to the
stop only where the round stopped earlier with a transfer still under way; where a session's
end or a judge may act, a shared band is always replayed: its instants, to the bit, are
compared with those). The ledger rows go in the order SimPy would complete them: by
time, and at one instant in the order the events were scheduled, which within one kind of
event is known (downloads by position, computes and uploads in the order their predecessors
completed); the stopped jobs' rows follow in cohort order, as `round_trip` stops its trips.
Cuts at one instant go in the order their trips registered them (`World.end_at`: cohort
order). Where events of different kinds would fall on one instant (a session's end among them),
SimPy's queue order decides: such a round (equal floats from different sums) goes event by
event (`plan` returns None). Batteries go event by event: a battery's cut is an estimate made
when the work starts, and the drain the others' rows cause is the event path's.
tests/test_at_once.py compares both paths.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from flnet.sim.channel import Channel, Schedule, SharedBand, TraceRateChannel
from flnet.sim.ledger import NOBODY, SERVER, Tag

if TYPE_CHECKING:
    from flnet.sim.world import Fate, World

DEDICATED = (Channel, TraceRateChannel)


class Plan(NamedTuple):
    """A round trip's outcome, as `patterns.Delivery` has it."""

    positions: np.ndarray  # [D] cohort positions delivered, in the order they arrived
    outcomes: list[str]  # [C] ok, or how the member was stopped
    completed: np.ndarray  # [C] bool: the member's local work completed
    end_s: float  # when the server stopped waiting
    rows: list[tuple]  # its ledger rows (`Ledger.extend`'s), to write at end_s


class _Ends(NamedTuple):
    """One phase's completions: end_s [C] per position, and the positions in the order SimPy
    processes them (time, then scheduling order)."""

    end_s: np.ndarray
    order: list[int]
    schedule: Schedule | None  # on a shared band: its replay, to settle it by
    cancelled: dict[int, float] | None  # on a shared band: by position, the bits left of each
    # transfer its sender's session's end cancelled (`Schedule.cancelled`)


def plan(
    world: World,
    cohort: np.ndarray,
    down_bits: list[float],
    flops: list[float],
    up_bits: list[float],
    tag: Tag,
    deadline_s: float | None,
    keep: int,
    fates: list[Fate],
) -> Plan | None:
    """The round trip of `cohort` starting now, its members' `fates` drawn as their trips
    start (`World.trip_fates`), with its ledger rows to write when the clock gets to its end
    (an interrupted run keeps no row from beyond its clock); None where it must be simulated
    event by event. The server stops waiting once `keep` members have
    delivered (the rest: cancelled), everyone has arrived or dropped, or at `deadline_s` (the
    rest: deadline)."""
    net = world.network
    down_band, up_band = net.downlink, net.uplink
    if not (world.fates_known and _closed(down_band) and _closed(up_band)):
        return None
    n = len(cohort)
    clients = cohort.tolist()
    inf = math.inf
    # each member's fate, as its trip draws it; the work it runs of each phase, as
    # `_Trip` starts it (its share of the drop phase's bits or FLOPs, x 1.0 elsewhere)
    sure = world.fates_sure  # every fate SURE: nothing to draw or share
    drop = [3] * n if sure else [f.drop_phase for f in fates]  # 3: it never drops
    # its session's end (check during; inf: none) and its upload's judge (check at_completion)
    session_end = [inf] * n if sure else [f.cut_s for f in fates]
    judges = [None] * n if sure else [f.judge for f in fates]
    judged = any(j is not None for j in judges)
    sessions = judged or min(session_end) < inf
    if not sure:
        down_bits = [b * f.portion(0)[0] for b, f in zip(down_bits, fates)]
        flops = [w * f.portion(1)[0] for w, f in zip(flops, fates)]
        up_bits = [b * f.portion(2)[0] for b, f in zip(up_bits, fates)]
    if min(down_bits) <= 0 or min(up_bits) <= 0 or min(flops) <= 0:
        return None  # zero-length jobs end at their start instant: ties by construction
    t0 = world.env.now
    # a band that may be stopped early, or whose instants a session's end or a judge is
    # compared with, needs its step-by-step state and instants (not the solve's, 1e-12 off)
    may_stop = keep < n or deadline_s is not None or sessions
    deadline_at_s = inf if deadline_s is None else t0 + deadline_s
    down_q, down_w = net.star(cohort, down=True)
    up_q, up_w = net.star(cohort, down=False)
    fading = world.radio.rayleigh_fading  # draws keyed as the transfers' own
    down_snr = (
        [q * world._fading(SERVER, c, tag, None) for q, c in zip(down_q, clients)]
        if fading
        else down_q
    )
    everyone = list(range(n))
    down = _transfers(
        down_band,
        [t0] * n,
        everyone,
        down_bits,
        down_snr,
        may_stop,
        n,
        deadline_at_s,
        cancel_s=session_end,
    )
    if down is None:
        return None
    compute_s = world._compute_times_s(np.asarray(flops), cohort)  # _Compute's durations
    if not sure:  # _Compute's `duration * slowdown`
        compute_s = compute_s * np.array([f.slowdown for f in fates])
    computed_s = down.end_s + compute_s  # SimPy: the download's end plus the duration
    down_end = down.end_s.tolist()
    computed = computed_s.tolist()
    # computes are scheduled as downloads complete: at one instant, in that order; a member
    # dropped in its download, or whose session ended before it did, computes nothing
    compute_order = sorted(down.order, key=computed.__getitem__)
    compute_order += [p for p in everyone if down_end[p] == inf]  # past the deadline
    if not sure:
        compute_order = [
            p for p in compute_order if drop[p] >= 1 and not session_end[p] < down_end[p]
        ]
        computing = set(compute_order)
        computed = [e if p in computing else inf for p, e in enumerate(computed)]
    # uploads start as computes complete, but for those dropped in their compute or whose
    # session ended before it did
    uploaders = (
        compute_order
        if sure
        else [p for p in compute_order if drop[p] >= 2 and not session_end[p] < computed[p]]
    )
    up_snr = up_q
    if fading:
        up_snr = [0.0] * n
        for pos in uploaders:  # in the order the uploads start
            up_snr[pos] = up_q[pos] * world._fading(clients[pos], SERVER, tag, None)
    up_start = [computed[p] for p in uploaders]
    up_order_bits = [up_bits[p] for p in uploaders]
    up_order_snr = [up_snr[p] for p in uploaders]
    up_cancel_s = [session_end[p] for p in uploaders]
    # the keep-th delivery comes by the keep-th finish of an upload sure to deliver (not to
    # drop, nor to judge; one cut by its session's end is cancelled in the replay: no finish)
    counted = None if sure else [drop[p] == 3 and judges[p] is None for p in uploaders]
    up = _transfers(
        up_band,
        up_start,
        uploaders,
        up_order_bits,
        up_order_snr,
        may_stop,
        n,
        deadline_at_s,
        keep,
        up_cancel_s,
        counted,
    )
    if up is None:
        return None
    up_end = up.end_s.tolist()
    # each upload's outcome at its end: dropped, or the judge's (lost: offline then), or ok
    up_outcome = ["ok"] * n
    for p in uploaders:
        judge = judges[p]
        if drop[p] == 2:
            up_outcome[p] = "dropped"
        elif judge is not None and up_end[p] < inf:
            up_outcome[p] = judge(up_end[p])
    ends_at = (down_end, computed, up_end)
    # a member arrives with the job it ends with (its upload, or dropped, at the end of its
    # drop phase's job), unless its session ends first: then at that instant, cut
    last = [2] * n if sure else [min(d, 2) for d in drop]  # the kind of job it arrives with
    arrive_s = [ends_at[k][p] for p, k in enumerate(last)]
    cut_at = [s if s < a else inf for s, a in zip(session_end, arrive_s)]  # [n] inf: no cut
    if _ties(down_end, computed, up_end, cut_at):
        return None
    # every job's end in the order SimPy processes them: by time, then kind, then scheduling
    # order (within a kind of event, the only ties: `_ties`); cuts at one instant in the order
    # their trips registered them (`World.end_at`: cohort order); a job that would end after
    # its member's cut never ends
    cuts = [p for p in everyone if cut_at[p] < inf]
    done = (down.order, [p for p in compute_order if computed[p] < inf], up.order, cuts)
    ends = (down_end, computed, up_end, cut_at)
    events = sorted(
        (ends[kind][p], kind, i, p)
        for kind, order in enumerate(done)
        for i, p in enumerate(order)
        if kind == 3 or ends[kind][p] < cut_at[p]
    )
    arrive_kind = [3 if cut_at[p] < inf else last[p] for p in everyone]
    arrive_s = [min(c, a) for c, a in zip(cut_at, arrive_s)]
    # the server stops waiting at the keep-th delivery or once everyone has arrived or at
    # the deadline, whichever is first; an event on the deadline's instant: SimPy's order decides
    if sure:  # every arrival a delivery
        k = min(keep, n)
        keep_s = up_end[up.order[k - 1]] if len(up.order) >= k else inf
    else:
        keep_s, delivered, arrived = inf, 0, 0
        for end, kind, _, p in events:
            if kind == arrive_kind[p]:
                arrived += 1
                delivered += kind == 2 and up_outcome[p] == "ok"
                if delivered >= keep or arrived == n:
                    keep_s = end
                    break
    stop_s = min(keep_s, deadline_at_s)
    cause = "cancelled" if keep_s < deadline_at_s else "deadline"
    if deadline_at_s <= keep_s and deadline_at_s in {*down_end, *computed, *up_end, *cut_at}:
        return None
    # the bands as the stop leaves them: replayed up to it where a transfer was still on
    down_left = _settle(down_band, down, stop_s, [t0] * n, down_bits, down_snr, session_end)
    up_left = _settle(up_band, up, stop_s, up_start, up_order_bits, up_order_snr, up_cancel_s)
    up_left = None if up_left is None else {uploaders[i]: b for i, b in up_left.items()}
    energy_j = world._compute_energies_j(cohort, np.asarray(flops)).tolist()

    def stopped(p: int, at_s: float, outcome: str, cut: bool = False) -> tuple:
        """Member p's job under way at `at_s` stopped then, charged up to it (`Job.stop`): by
        its session's end (`cut`: a shared band's transfer, cancelled in its replay) or by
        the server (the bands as the stop leaves them)."""
        c = clients[p]
        kind = _under_way(p, at_s, ends_at)
        if kind == 0:
            left = down.cancelled if cut else down_left
            sent = _sent_bits(down_band, down_bits[p], down_snr[p], at_s - t0, left, p)
            return (
                tag,
                c,
                SERVER,
                "download",
                t0,
                at_s,
                down_w[p] * (at_s - t0),
                sent,
                0.0,
                outcome,
            )
        if kind == 1:
            start, duration = down_end[p], float(compute_s[p])
            work = flops[p] * (min(1.0, (at_s - start) / duration) if duration > 0 else 0.0)
            energy = world._compute_energy_j(c, work)
            return (tag, c, NOBODY, "compute", start, at_s, energy, 0.0, work, outcome)
        start = computed[p]
        left = up.cancelled if cut else up_left
        sent = _sent_bits(up_band, up_bits[p], up_snr[p], at_s - start, left, p)
        return (tag, c, SERVER, "upload", start, at_s, up_w[p] * (at_s - start), sent, 0.0, outcome)

    # what completes before the stop (at the keep-th arrival: its instant's arrivals too)
    rows = []
    for end, kind, _, p in events:
        if end > stop_s:
            break
        c = clients[p]
        if kind == 3:  # its session ended: the job under way charged up to then
            rows.append(stopped(p, end, fates[p].cut_outcome, cut=True))
        elif kind == 0:
            outcome = "dropped" if drop[p] == 0 else "ok"
            row = (tag, c, SERVER, "download", t0, end, down_w[p] * (end - t0), down_bits[p])
            rows.append((*row, 0.0, outcome))
        elif kind == 1:
            start, outcome = down_end[p], "dropped" if drop[p] == 1 else "ok"
            rows.append(
                (tag, c, NOBODY, "compute", start, end, energy_j[p], 0.0, flops[p], outcome)
            )
        else:
            start = computed[p]
            row = (tag, c, SERVER, "upload", start, end, up_w[p] * (end - start), up_bits[p])
            rows.append((*row, 0.0, up_outcome[p]))
    # the stop: each member still at work, in cohort order, its job charged up to now
    outcomes = ["ok"] * n
    for p in range(n):
        if arrive_s[p] <= stop_s:  # arrived: delivered, dropped, lost or cut
            if arrive_kind[p] == 3:
                outcomes[p] = fates[p].cut_outcome
            elif drop[p] < 3:
                outcomes[p] = "dropped"
            else:
                outcomes[p] = up_outcome[p]
            continue
        outcomes[p] = cause
        rows.append(stopped(p, stop_s, cause))
    arrivals = [
        p
        for p in up.order
        if up_end[p] <= stop_s and up_end[p] < cut_at[p] and up_outcome[p] == "ok"
    ]
    completed = np.asarray(computed) <= stop_s
    if not sure:  # a member dropped in its compute, or cut before its end, did not complete it
        completed &= (np.asarray(drop) >= 2) & (np.asarray(computed) < np.asarray(cut_at))
    return Plan(
        np.asarray(arrivals[:keep], dtype=np.int64),
        outcomes,
        completed,
        stop_s,
        rows,
    )


def _under_way(p: int, at_s: float, ends_at: tuple[list[float], ...]) -> int:
    """The kind of member p's job under way at `at_s` (0 download, 1 compute, 2 upload),
    given each of its jobs' end (`ends_at`: downloads, computes, uploads by position)."""
    down_end, computed, _ = ends_at
    return 0 if down_end[p] > at_s else 1 if computed[p] > at_s else 2


def _settle(
    band: Channel,
    ends: _Ends,
    cut_s: float,
    start_s: list[float],
    bits: list[float],
    snr_hz: list[float],
    cancel_s: list[float],
) -> dict[int, float] | None:
    """Leave a shared band as the round leaves it; the bits left of its transfers still under
    way at `cut_s`, by their index in its order (None on a dedicated band). Its replay stopped
    at the cut already (the deadline, the keep-th upload) or ran past it: then again, to it."""
    schedule = ends.schedule
    if schedule is None:
        return None
    shared = cast(SharedBand, band)
    if schedule.settled_s > cut_s:
        schedule = shared.schedule_alone(start_s, bits, snr_hz, cut_s, cancel_s=cancel_s)
        assert schedule is not None  # the same steps as the first replay's, stopped earlier
    shared.settle_alone(schedule)
    return schedule.left


def _sent_bits(
    band: Channel,
    bits: float,
    snr_hz: float,
    elapsed_s: float,
    left: dict[int, float] | None,
    pos: int,
) -> float:
    """The bits a transfer stopped after `elapsed_s` had sent (`Transmission.cancel`): on a
    shared band, its replay's bits `left`; on a dedicated one, rate x time."""
    if left is not None:
        return bits - max(left[pos], 0.0)
    return bits - max(bits - band.rate_bps(snr_hz) * elapsed_s, 0.0)


def _closed(band: Channel) -> bool:
    """A band this module computes: dedicated, or a shared band idle at the start."""
    return type(band) in DEDICATED or (isinstance(band, SharedBand) and not band._active)


def _transfers(
    band: Channel,
    start_s: list[float],
    order: list[int],
    bits: list[float],
    snr_hz: list[float],
    step_by_step: bool,
    n: int,
    until_s: float = math.inf,
    until_done: int = 0,
    cancel_s: list[float] | None = None,
    counted: list[bool] | None = None,
) -> _Ends | None:
    """Transfers started at `start_s` (non-decreasing) by the positions `order` (of `n`), in that
    order (their bits and SNRs listed alike): when each ends, and the order they complete in.
    A shared band is solved at once unless `step_by_step` (a band that may be stopped early is
    replayed, so its state at the stop is the steps') or its few transfers replay quicker;
    a replay stops at `until_s` or once `until_done` have finished (of those `counted`, listed
    alike: all by default), and who has not finished
    by then ends at inf; `cancel_s` (listed alike): when a shared band's transfer is cancelled
    if it is still under way (its sender's session ends; a dedicated band's transfer leaves
    the others alone, its member's cut is the caller's). None where SimPy's event order would
    decide (`SharedBand.schedule_alone`)."""
    ends = np.full(n, math.inf)  # [n] by position: `order` may list some of them
    if isinstance(band, SharedBand):
        solve = not step_by_step and len(order) > band.replays_up_to
        schedule = band.solve_alone(start_s, bits, snr_hz) if solve else None
        if schedule is None:
            schedule = band.schedule_alone(
                start_s, bits, snr_hz, until_s, until_done, cancel_s, counted
            )
        if schedule is None:
            return None
        done = []
        for end, group in schedule.groups:
            for i in group:
                ends[order[i]] = end
                done.append(order[i])
        cancelled = {order[i]: b for i, b in schedule.cancelled.items()}
        return _Ends(ends, done, schedule, cancelled)
    # dedicated: each a timeout of bits / rate from its start, scheduled in `order`; the rate
    # through the band's scalar function (math.log1p), as `transmit` takes it: numpy's log1p
    # is another implementation on some CPUs
    for s, p, b, rate in zip(start_s, order, bits, band.rates_bps(snr_hz)):
        ends[p] = s + b / rate
    return _Ends(ends, sorted(order, key=ends.tolist().__getitem__), None, None)


def _ties(*times: list[float]) -> bool:
    """Whether two kinds of event share an instant (inf: never, after a replay's stop)."""
    seen = [set(t) - {math.inf} for t in times]
    return any(a & b for i, a in enumerate(seen) for b in seen[i + 1 :])
