"""A round trip computed at once, where only the server can stop its members' work.

When nothing but the server can stop a member's work once it starts (availability always, no
battery: `World.fates_known`) and every band is dedicated or a shared band idle at the start,
a round trip is a closed system: each member's fate (`World.trip_fate`, the event path's own
draws: a slowdown, a dropout phase and the share of that phase's work) is known when it
starts, its download ends at ``t0 + bits / rate``, its compute ``duration * slowdown`` after
that, and its upload when the uplink lets it; a member dropped in a phase runs that phase's
job on its share of the bits or FLOPs, which ends ``dropped``, and starts no later phase. The
server stops waiting at the keep-th delivery (over-selection: the rest are cancelled), once
every member has delivered or dropped, or at the deadline (the rest are cut), each job under
way charged up to that instant.
Downloads and computes use the event-by-event path's own arithmetic (IEEE +, -, *, / on
arrays, the scalar functions for the rest); a shared band is solved at once where every
transfer starts before any finishes and nobody is stopped (`SharedBand.solve_alone`: times
within 1e-12 relative of the steps') and replayed step by step otherwise, or where it has few
transfers (`schedule_alone`: the band's own steps, floats or arrays, to the bit; the uplink's
replay stops at the deadline or the finish by which the keep-th delivery has come (keep plus
the uploads that drop), the downlink's at the deadline, and is
run again to the stop only where a download is still under way at an earlier keep-th
arrival). The ledger rows go in the order SimPy would complete them: by
time, and at one instant in the order the events were scheduled, which within one kind of
event is known (downloads by position, computes and uploads in the order their predecessors
completed); the stopped jobs' rows follow in cohort order, as `round_trip` stops its trips.
Where events of different kinds would fall on one instant, SimPy's queue order decides: such a
round (equal floats from different sums) goes event by event (`plan` returns None).
tests/test_at_once.py compares both paths.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from flnet.sim.channel import Channel, Schedule, SharedBand, TraceRateChannel
from flnet.sim.ledger import NOBODY, SERVER, Tag

if TYPE_CHECKING:
    from flnet.sim.world import World

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


def plan(
    world: World,
    cohort: np.ndarray,
    down_bits: list[float],
    flops: list[float],
    up_bits: list[float],
    tag: Tag,
    deadline_s: float | None,
    keep: int,
) -> Plan | None:
    """The round trip of `cohort` starting now, with its ledger rows to write when the clock
    gets to its end (an interrupted run keeps no row from beyond its clock); None where it
    must be simulated event by event. The server stops waiting once `keep` members have
    delivered (the rest: cancelled), everyone has arrived or dropped, or at `deadline_s` (the
    rest: deadline)."""
    net = world.network
    down_band, up_band = net.downlink, net.uplink
    if not (world.fates_known and _closed(down_band) and _closed(up_band)):
        return None
    n = len(cohort)
    clients = cohort.tolist()
    # each member's fate, as its trip draws it; the work it runs of each phase, as
    # `_Trip` starts it (its share of the drop phase's bits or FLOPs, x 1.0 elsewhere)
    sure = world.fates_sure  # every fate SURE: nothing to draw or share
    fates = [] if sure else world.trip_fates(clients, tag, list(zip(down_bits, flops, up_bits)))
    drop = [3] * n if sure else [f.drop_phase for f in fates]  # 3: it never drops
    if not sure:
        down_bits = [b * f.portion(0)[0] for b, f in zip(down_bits, fates)]
        flops = [w * f.portion(1)[0] for w, f in zip(flops, fates)]
        up_bits = [b * f.portion(2)[0] for b, f in zip(up_bits, fates)]
    if min(down_bits) <= 0 or min(up_bits) <= 0 or min(flops) <= 0:
        return None  # zero-length jobs end at their start instant: ties by construction
    t0 = world.env.now
    may_stop = keep < n or deadline_s is not None  # a stopped band needs its step-by-step state
    deadline_at_s = math.inf if deadline_s is None else t0 + deadline_s
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
        down_band, [t0] * n, everyone, down_bits, down_snr, may_stop, n, deadline_at_s
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
    # dropped in its download computes nothing
    compute_order = sorted(down.order, key=computed.__getitem__)
    compute_order += [p for p in everyone if down_end[p] == math.inf]  # past the deadline
    if not sure:
        compute_order = [p for p in compute_order if drop[p] >= 1]
        for p in everyone:
            if drop[p] == 0:
                computed[p] = math.inf
    # uploads start as computes complete, but for those dropped in their compute
    uploaders = compute_order if sure else [p for p in compute_order if drop[p] >= 2]
    up_snr = up_q
    if fading:
        up_snr = [0.0] * n
        for pos in uploaders:  # in the order the uploads start
            up_snr[pos] = up_q[pos] * world._fading(clients[pos], SERVER, tag, None)
    up_start = [computed[p] for p in uploaders]
    up_order_bits = [up_bits[p] for p in uploaders]
    up_order_snr = [up_snr[p] for p in uploaders]
    # the keep-th delivery comes by the (keep + uploads to drop)-th finish
    until_done = keep + sum(drop[p] == 2 for p in uploaders)
    up = _transfers(
        up_band,
        up_start,
        uploaders,
        up_order_bits,
        up_order_snr,
        may_stop,
        n,
        deadline_at_s,
        until_done,
    )
    if up is None:
        return None
    up_end = up.end_s.tolist()
    if _ties(down_end, computed, up_end):
        return None
    # every job's end in the order SimPy processes them: by time, then kind, then scheduling
    # order (within a kind of event, the only ties: `_ties`)
    ends = (down_end, computed, up_end)
    done = (down.order, [p for p in compute_order if computed[p] < math.inf], up.order)
    events = sorted(
        (ends[kind][p], kind, i, p) for kind, order in enumerate(done) for i, p in enumerate(order)
    )
    # the server stops waiting at the keep-th delivery or once everyone has arrived (a member
    # arrives with its upload, or dropped, at the end of its drop phase's job) or at the
    # deadline, whichever is first; an event on the deadline's instant: SimPy's order decides
    last = [2] * n if sure else [min(d, 2) for d in drop]  # the kind of job it arrives with
    arrive_s = up_end if sure else [ends[k][p] for p, k in enumerate(last)]
    if sure:  # every arrival a delivery
        k = min(keep, n)
        keep_s = up_end[up.order[k - 1]] if len(up.order) >= k else math.inf
    else:
        keep_s, delivered, arrived = math.inf, 0, 0
        for end, kind, _, p in events:
            if kind == last[p]:
                arrived += 1
                delivered += drop[p] == 3
                if delivered >= keep or arrived == n:
                    keep_s = end
                    break
    cut_s = min(keep_s, deadline_at_s)
    cause = "cancelled" if keep_s < deadline_at_s else "deadline"
    if deadline_at_s <= keep_s and deadline_at_s in {*down_end, *computed, *up_end}:
        return None
    # the bands as the stop leaves them: replayed up to it where a transfer was still on
    down_left = _settle(down_band, down, cut_s, [t0] * n, down_bits, down_snr)
    up_left = _settle(up_band, up, cut_s, up_start, up_order_bits, up_order_snr)
    up_left = None if up_left is None else {uploaders[i]: b for i, b in up_left.items()}
    # what completes before the stop (at the keep-th arrival: its instant's arrivals too)
    energy_j = world._compute_energies_j(cohort, np.asarray(flops)).tolist()
    rows = []
    for end, kind, _, p in events:
        if end > cut_s:
            break
        c, outcome = clients[p], "dropped" if kind == drop[p] else "ok"
        if kind == 0:
            row = (tag, c, SERVER, "download", t0, end, down_w[p] * (end - t0), down_bits[p])
            rows.append((*row, 0.0, outcome))
        elif kind == 1:
            start = down_end[p]
            rows.append(
                (tag, c, NOBODY, "compute", start, end, energy_j[p], 0.0, flops[p], outcome)
            )
        else:
            start = computed[p]
            row = (tag, c, SERVER, "upload", start, end, up_w[p] * (end - start), up_bits[p])
            rows.append((*row, 0.0, outcome))
    # the stop: each member still at work, in cohort order, its job charged up to now
    outcomes = ["ok"] * n
    for p in range(n):
        if arrive_s[p] <= cut_s:  # arrived: delivered, or dropped
            if drop[p] < 3:
                outcomes[p] = "dropped"
            continue
        outcomes[p] = cause
        c = clients[p]
        if down_end[p] > cut_s:
            sent = _sent_bits(down_band, down_bits[p], down_snr[p], cut_s - t0, down_left, p)
            rows.append(
                (tag, c, SERVER, "download", t0, cut_s, down_w[p] * (cut_s - t0), sent, 0.0, cause)
            )
        elif computed[p] > cut_s:
            start, duration = down_end[p], float(compute_s[p])
            work = flops[p] * (min(1.0, (cut_s - start) / duration) if duration > 0 else 0.0)
            energy = world._compute_energy_j(c, work)
            rows.append((tag, c, NOBODY, "compute", start, cut_s, energy, 0.0, work, cause))
        else:
            start = computed[p]
            sent = _sent_bits(up_band, up_bits[p], up_snr[p], cut_s - start, up_left, p)
            rows.append(
                (
                    tag,
                    c,
                    SERVER,
                    "upload",
                    start,
                    cut_s,
                    up_w[p] * (cut_s - start),
                    sent,
                    0.0,
                    cause,
                )
            )
    arrivals = [p for p in up.order if up_end[p] <= cut_s and drop[p] == 3]
    completed = np.asarray(computed) <= cut_s
    if not sure:  # a member dropped in its compute did not complete it
        completed &= np.asarray(drop) >= 2
    return Plan(
        np.asarray(arrivals[:keep], dtype=np.int64),
        outcomes,
        completed,
        cut_s,
        rows,
    )


def _settle(
    band: Channel,
    ends: _Ends,
    cut_s: float,
    start_s: list[float],
    bits: list[float],
    snr_hz: list[float],
) -> dict[int, float] | None:
    """Leave a shared band as the round leaves it; the bits left of its transfers still under
    way at `cut_s`, by their index in its order (None on a dedicated band). Its replay stopped
    at the cut already (the deadline, the keep-th upload) or ran past it: then again, to it."""
    schedule = ends.schedule
    if schedule is None:
        return None
    shared = cast(SharedBand, band)
    if schedule.settled_s > cut_s:
        schedule = shared.schedule_alone(start_s, bits, snr_hz, until_s=cut_s)
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
) -> _Ends | None:
    """Transfers started at `start_s` (non-decreasing) by the positions `order` (of `n`), in that
    order (their bits and SNRs listed alike): when each ends, and the order they complete in.
    A shared band is solved at once unless `step_by_step` (a band that may be stopped early is
    replayed, so its state at the stop is the steps') or its few transfers replay quicker;
    a replay stops at `until_s` or once `until_done` have finished, and who has not finished
    by then ends at inf. None where SimPy's event order would decide
    (`SharedBand.schedule_alone`)."""
    ends = np.full(n, math.inf)  # [n] by position: `order` may list some of them
    if isinstance(band, SharedBand):
        solve = not step_by_step and len(order) > band.replays_up_to
        schedule = band.solve_alone(start_s, bits, snr_hz) if solve else None
        if schedule is None:
            schedule = band.schedule_alone(start_s, bits, snr_hz, until_s, until_done)
        if schedule is None:
            return None
        done = []
        for end, group in schedule.groups:
            for i in group:
                ends[order[i]] = end
                done.append(order[i])
        return _Ends(ends, done, schedule)
    # dedicated: each a timeout of bits / rate from its start, scheduled in `order`; the rate
    # through the band's scalar function (math.log1p), as `transmit` takes it: numpy's log1p
    # is another implementation on some CPUs
    for s, p, b, rate in zip(start_s, order, bits, band.rates_bps(snr_hz)):
        ends[p] = s + b / rate
    return _Ends(ends, sorted(order, key=ends.tolist().__getitem__), None)


def _ties(*times: list[float]) -> bool:
    """Whether two kinds of event share an instant (inf: never, after a replay's stop)."""
    seen = [set(t) - {math.inf} for t in times]
    return any(a & b for i, a in enumerate(seen) for b in seen[i + 1 :])
