"""A round trip computed at once, where every member's fate is known when its trip starts: an
accelerator the World picks (`AtOnce`, behind `RoundPlan`; `EventByEvent` with batteries).

The readable path it must equal, row for row and instant for instant: `round_trip`'s
event-by-event trips (`flnet.sim.patterns._Trip`, a chain of the World's jobs on SimPy's
clock). tests/test_at_once.py runs both (`test_round_plan_equals_event_by_event_*`).

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
"""

from __future__ import annotations

import math
from typing import NamedTuple, Protocol, cast

import numpy as np
import simpy

from flnet.sim.channel import Channel, Schedule, SharedBand, TraceRateChannel
from flnet.sim.costs import Costs
from flnet.sim.fate import Fate
from flnet.sim.ledger import (
    KINDS,
    NOBODY,
    OUTCOMES,
    SERVER,
    Block,
    Tag,
    block,
    block_of,
    joined,
)
from flnet.sim.network import Network

DEDICATED = (Channel, TraceRateChannel)


class Trips(NamedTuple):
    """A round trip to compute: `cohort` ([C] client ids), each member's bits and FLOPs [C],
    the ledger's tag, the server's `deadline_s` and `keep`, and each member's fate, drawn as
    its trip starts (`World.trip_fates`)."""

    cohort: np.ndarray
    down_bits: np.ndarray
    flops: np.ndarray
    up_bits: np.ndarray
    tag: Tag
    deadline_s: float | None
    keep: int
    fates: list[Fate]


class Plan(NamedTuple):
    """A round trip's outcome, as `patterns.Delivery` has it."""

    positions: np.ndarray  # [D] cohort positions delivered, in the order they arrived
    outcomes: list[str]  # [C] ok, or how the member was stopped
    completed: np.ndarray  # [C] bool: the member's local work completed
    end_s: float  # when the server stopped waiting
    rows: Block  # its ledger rows (`Ledger.extend`'s), to write at end_s


class RoundPlan(Protocol):
    """The accelerator the World picks for round trips (`PatternWorld.round_plan`): a round
    trip computed at once, or None where `patterns.round_trip` must go event by event."""

    def plan(self, trips: Trips) -> Plan | None: ...


class EventByEvent:
    """No accelerator: every round goes event by event (a battery's cut is an estimate made
    when the work starts, and the drain the others' rows cause is the event path's)."""

    def plan(self, trips: Trips) -> Plan | None:
        return None


class AtOnce:
    """Round trips starting now on `env`'s clock, computed at once on `network`'s bands with
    `costs`' seconds, joules and fading (`sure`: every fate SURE, nothing drawn)."""

    def __init__(self, network: Network, costs: Costs, env: simpy.Environment, sure: bool) -> None:
        self.network, self.costs, self.env, self.sure = network, costs, env, sure

    def plan(self, trips: Trips) -> Plan | None:
        """`plan` of `trips`. A plan given up leaves the fading draws' counts as it found
        them: the events then draw what they would have alone."""
        costs = self.costs
        counts = costs.fading_counts() if costs.rayleigh_fading else None
        result = plan(self.network, costs, self.env.now, self.sure, trips)
        if result is None and counts is not None:
            costs.restore_fading_counts(counts)
        return result


class _Ends(NamedTuple):
    """One phase's completions: end_s [C] per position (inf: none), and the positions in the
    order SimPy processes them (time, then scheduling order)."""

    end_s: np.ndarray
    order: np.ndarray
    schedule: Schedule | None  # on a shared band: its replay, to settle it by
    cancelled: dict[int, float] | None  # on a shared band: by position, the bits left of each
    # transfer its sender's session's end cancelled (`Schedule.cancelled`)


class _Members(NamedTuple):
    """Each member's fate as arrays, and the work it runs of each phase as `_Trip` starts it
    (its share of the drop phase's bits or FLOPs, x 1.0 elsewhere)."""

    sure: bool  # every fate SURE: nothing drawn, nobody dropped, cut or judged
    drop: np.ndarray  # [C] its drop phase (0, 1, 2; 3: it never drops)
    session_end: np.ndarray  # [C] its session's end (check during; inf: none)
    judges: list | None  # [C] check at_completion: each upload's judge (None: nobody's)
    down_bits: np.ndarray  # [C]
    flops: np.ndarray  # [C]
    up_bits: np.ndarray  # [C]


class _Uploads(NamedTuple):
    """When each upload ends, its SNR (or rate; fading included, 0.0: none) and power by
    position; the band's inputs in the uploads' order (`uploaders`); each upload's outcome."""

    up: _Ends
    up_snr: list[float]  # [C]
    up_w: list[float]  # [C]
    up_start: np.ndarray  # by `uploaders`: each upload's start, bits, SNR, cancel instant
    up_order_bits: np.ndarray
    up_order_snr: list[float]
    up_cancel_s: np.ndarray
    up_outcome: np.ndarray  # [C] each upload's outcome at its end (a code in OUTCOMES)


class _Times(NamedTuple):
    """When each member's jobs end, phase by phase, by the event path's arithmetic."""

    t0: float  # the round's start
    down: _Ends
    down_snr: list[float]  # [C] each download's SNR (or rate), fading included
    down_w: list[float]  # [C] each download's power
    compute_s: np.ndarray  # [C] each compute's seconds, slowdown included
    computed: np.ndarray  # [C] each compute's end (inf: it computes nothing)
    compute_order: np.ndarray  # the positions whose compute ends, in SimPy's order
    uploaders: np.ndarray  # the positions that upload, in the order their uploads start
    uploads: _Uploads


class _Events(NamedTuple):
    """Every job's end (and every cut) in the order SimPy processes them, and how each member
    arrives."""

    pos: np.ndarray  # by event: the member's position
    kind: np.ndarray  # by event: 0 download, 1 compute, 2 upload, 3 its session's end
    end: np.ndarray  # by event: its instant
    cut_at: np.ndarray  # [C] when its session ends its trip (inf: never)
    arrive_kind: np.ndarray  # [C] the kind of event it arrives with
    arrive_s: np.ndarray  # [C] when it arrives (delivered, dropped, lost or cut)


OK, DROPPED = OUTCOMES.index("ok"), OUTCOMES.index("dropped")
# a job's phase (0, 1, 2) is its ledger kind's code
assert KINDS[:3] == ("download", "compute", "upload")
_OUTCOME_NAMES = np.array(OUTCOMES, dtype=object)


def plan(network: Network, costs: Costs, now_s: float, sure: bool, trips: Trips) -> Plan | None:
    """The round trip of `trips` starting at `now_s` on `network`'s bands (their seconds,
    joules and fading from `costs`; `sure`: every fate SURE), with its ledger rows to write
    when the clock gets to its end (an interrupted run keeps no row from beyond its clock);
    None where it must be simulated event by event. The server stops waiting once `keep`
    members have delivered (the rest: cancelled), everyone has arrived or dropped, or at
    `deadline_s` (the rest: deadline). Per-member Python runs only where fates are drawn
    (or fading, or someone is stopped): the rest is array arithmetic, the event path's.

    Its phases: the members' fates as arrays (`_members`); when each job ends (`_downloads`,
    `_computes`, `_uploads`); every event in SimPy's order (`_events`); when the server stops
    (`_server_stop`); the bands as the stop leaves them (`_settle`); the rows (`_rows`)."""
    if not (_closed(network.downlink) and _closed(network.uplink)):
        return None
    members = _members(trips, sure)
    if not (np.concatenate((members.down_bits, members.up_bits, members.flops)) > 0).all():
        return None  # zero-length jobs end at their start instant: ties by construction
    n, t0 = len(trips.cohort), now_s
    sessions = members.judges is not None or members.session_end.min() < math.inf
    # a band that may be stopped early, or whose instants a session's end or a judge is
    # compared with, needs its step-by-step state and instants (not the solve's, 1e-12 off)
    may_stop = trips.keep < n or trips.deadline_s is not None or sessions
    deadline_at_s = math.inf if trips.deadline_s is None else t0 + trips.deadline_s
    downloads = _downloads(network, costs, trips, members, t0, may_stop, deadline_at_s)
    if downloads is None:
        return None
    down, down_snr, down_w = downloads
    compute_s, computed, compute_order, uploaders = _computes(costs, trips, members, down)
    uploads = _uploads(network, costs, trips, members, computed, uploaders, may_stop, deadline_at_s)
    if uploads is None:
        return None
    times = _Times(
        t0, down, down_snr, down_w, compute_s, computed, compute_order, uploaders, uploads
    )
    events = _events(members, times)
    if events is None:
        return None
    stop = _server_stop(members, times, events, trips.keep, deadline_at_s)
    if stop is None:
        return None
    stop_s, cause = stop
    # the bands as the stop leaves them: replayed up to it where a transfer was still on
    down_left = _settle(
        network.downlink,
        down,
        stop_s,
        np.full(n, t0),
        members.down_bits,
        down_snr,
        members.session_end,
        trips.cohort,
    )
    up_left = _settle(
        network.uplink,
        uploads.up,
        stop_s,
        uploads.up_start,
        uploads.up_order_bits,
        uploads.up_order_snr,
        uploads.up_cancel_s,
        trips.cohort[uploaders],
    )
    up_left = None if up_left is None else {int(uploaders[i]): b for i, b in up_left.items()}
    return _rows(network, costs, trips, members, times, events, stop_s, cause, down_left, up_left)


def _members(trips: Trips, sure: bool) -> _Members:
    """Each member's fate, as its trip draws it, as arrays; the work it runs of each phase."""
    n = len(trips.cohort)
    down_bits, flops, up_bits = (
        np.asarray(x, dtype=float) for x in (trips.down_bits, trips.flops, trips.up_bits)
    )
    if sure:  # nothing to draw or share
        return _Members(sure, np.full(n, 3), np.full(n, math.inf), None, down_bits, flops, up_bits)
    fates = trips.fates
    drop = np.array([f.drop_phase for f in fates])
    session_end = np.array([f.cut_s for f in fates], dtype=float)
    judged = [f.judge for f in fates]
    judges = None if all(j is None for j in judged) else judged
    down_bits = down_bits * [f.portion(0)[0] for f in fates]
    flops = flops * [f.portion(1)[0] for f in fates]
    up_bits = up_bits * [f.portion(2)[0] for f in fates]
    return _Members(sure, drop, session_end, judges, down_bits, flops, up_bits)


def _downloads(
    network: Network,
    costs: Costs,
    trips: Trips,
    members: _Members,
    t0: float,
    may_stop: bool,
    deadline_at_s: float,
) -> tuple[_Ends, list[float], list[float]] | None:
    """Every download, started at `t0` by position: when each ends, its SNR and power."""
    n = len(trips.cohort)
    down_q, down_w = network.star(trips.cohort, down=True)  # lists: SNRs (or rates), powers
    down_snr = down_q
    if costs.rayleigh_fading:  # draws keyed as the transfers' own
        clients, tag = trips.cohort.tolist(), trips.tag
        down_snr = [q * costs.fading(SERVER, c, tag, None) for q, c in zip(down_q, clients)]
    down = _transfers(
        network.downlink,
        np.full(n, t0),
        np.arange(n),
        members.down_bits,
        down_snr,
        may_stop,
        n,
        deadline_at_s,
        cancel_s=members.session_end,
        clients=trips.cohort,
    )
    return None if down is None else (down, down_snr, down_w)


def _computes(
    costs: Costs, trips: Trips, members: _Members, down: _Ends
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each compute's seconds and end (inf: none), the computes in the order they end, and
    the members that go on to upload, in the order their uploads start."""
    compute_s = costs.compute_times_s(members.flops, trips.cohort)  # _Compute's durations
    if not members.sure:  # _Compute's `duration * slowdown`
        compute_s = compute_s * np.array([f.slowdown for f in trips.fates])
    down_end = down.end_s
    computed = down_end + compute_s  # SimPy: the download's end plus the duration
    # computes are scheduled as downloads complete: at one instant, in that order; a member
    # whose download never ended (cut by the stop), was dropped in it, or whose session ended
    # before it did, computes nothing
    compute_order = down.order[np.argsort(computed[down.order], kind="stable")]
    uploaders = compute_order  # uploads start as computes complete
    if not members.sure:  # but for those dropped in their compute or whose session ended first
        drop, session_end = members.drop, members.session_end
        computing = (drop >= 1) & ~(session_end < down_end)
        compute_order = compute_order[computing[compute_order]]
        computed = np.where(computing, computed, math.inf)
        uploading = (drop >= 2) & ~(session_end < computed)
        uploaders = compute_order[uploading[compute_order]]
    return compute_s, computed, compute_order, uploaders


def _uploads(
    network: Network,
    costs: Costs,
    trips: Trips,
    members: _Members,
    computed: np.ndarray,
    uploaders: np.ndarray,
    may_stop: bool,
    deadline_at_s: float,
) -> _Uploads | None:
    """Every upload, started as its compute ends: when each ends, its SNR and power, the
    band's inputs in the uploads' order, and each upload's outcome at its end."""
    n = len(trips.cohort)
    up_q, up_w = network.star(trips.cohort, down=False)
    up_snr = up_q
    if costs.rayleigh_fading:
        clients, tag = trips.cohort.tolist(), trips.tag
        up_snr = [0.0] * n
        for pos in uploaders.tolist():  # in the order the uploads start
            up_snr[pos] = up_q[pos] * costs.fading(clients[pos], SERVER, tag, None)
    up_start = computed[uploaders]
    up_order_bits = members.up_bits[uploaders]
    up_order_snr = np.asarray(up_snr)[uploaders].tolist()
    up_cancel_s = members.session_end[uploaders]
    # the keep-th delivery comes by the keep-th finish of an upload sure to deliver (not to
    # drop, nor to judge; one cut by its session's end is cancelled in the replay: no finish)
    drop, judges = members.drop, members.judges
    counted = None
    if not members.sure:
        unjudged = np.array([j is None for j in judges]) if judges is not None else True
        counted = ((drop == 3) & unjudged)[uploaders].tolist()
    up = _transfers(
        network.uplink,
        up_start,
        uploaders,
        up_order_bits,
        up_order_snr,
        may_stop,
        n,
        deadline_at_s,
        trips.keep,
        up_cancel_s,
        counted,
        trips.cohort[uploaders],
    )
    if up is None:
        return None
    # each upload's outcome at its end: dropped, or the judge's (lost: offline then), or ok
    up_outcome = np.full(n, OK, dtype=np.int8)
    if not members.sure:
        up_outcome[uploaders[drop[uploaders] == 2]] = DROPPED
    if judges is not None:
        for p in uploaders.tolist():
            judge = judges[p]
            if judge is not None and drop[p] != 2 and up.end_s[p] < math.inf:
                up_outcome[p] = OUTCOMES.index(judge(float(up.end_s[p])))
    return _Uploads(
        up, up_snr, up_w, up_start, up_order_bits, up_order_snr, up_cancel_s, up_outcome
    )


def _events(members: _Members, times: _Times) -> _Events | None:
    """Every job's end and every cut in the order SimPy processes them (None where two kinds
    of event share an instant: SimPy's queue decides), and how each member arrives."""
    n = len(members.drop)
    ends_at = (times.down.end_s, times.computed, times.uploads.up.end_s)
    # a member arrives with the job it ends with (its upload, or dropped, at the end of its
    # drop phase's job), unless its session ends first: then at that instant, cut
    if members.sure:  # with its upload, and nobody is cut
        last, arrive_s, cut_at = np.full(n, 2), times.uploads.up.end_s, np.full(n, math.inf)
    else:
        last = np.minimum(members.drop, 2)  # the kind of job it arrives with
        arrive_s = np.choose(last, ends_at)
        cut_at = np.where(members.session_end < arrive_s, members.session_end, math.inf)
    # every job's end in the order SimPy processes them: by time, then kind, then scheduling
    # order (within a kind of event, the only ties: `_ties`); cuts at one instant in the order
    # their trips registered them (`World.end_at`: cohort order)
    done = (
        times.down.order,
        times.compute_order,
        times.uploads.up.order,
        np.flatnonzero(cut_at < math.inf),
    )
    pos = np.concatenate(done)
    kind = np.repeat(np.arange(4), [len(d) for d in done])
    end = np.concatenate([ends[d] for ends, d in zip((*ends_at, cut_at), done)])
    by_time = np.argsort(end, kind="stable")  # ties: in `done`'s order, kind then scheduling
    pos, kind, end = pos[by_time], kind[by_time], end[by_time]
    if _ties(end, kind) or (len(end) and math.isnan(end[-1])):  # (NaN: sorted last)
        return None
    # a job that would end after its member's cut never ends
    happens = (kind == 3) | (end < cut_at[pos])
    pos, kind, end = pos[happens], kind[happens], end[happens]
    arrive_kind = last if members.sure else np.where(cut_at < math.inf, 3, last)
    arrive_s = arrive_s if members.sure else np.minimum(cut_at, arrive_s)
    return _Events(pos, kind, end, cut_at, arrive_kind, arrive_s)


def _server_stop(
    members: _Members, times: _Times, events: _Events, keep: int, deadline_at_s: float
) -> tuple[float, str] | None:
    """When the server stops waiting, and why (cancelled, deadline): at the keep-th delivery,
    once everyone has arrived, or at the deadline, whichever is first. None where an event
    falls on the deadline's instant: SimPy's order decides."""
    n = len(members.drop)
    if members.sure:  # every arrival a delivery, in the uploads' order
        k = min(keep, n)
        up = times.uploads.up
        keep_s = float(up.end_s[up.order[k - 1]]) if len(up.order) >= k else math.inf
    else:
        pos, kind, end = events.pos, events.kind, events.end
        arrival = kind == events.arrive_kind[pos]
        delivery = arrival & (kind == 2) & (times.uploads.up_outcome[pos] == OK)
        stops = (np.cumsum(delivery) >= keep) | (np.cumsum(arrival) == n)
        first = int(stops.argmax()) if len(stops) else 0
        keep_s = float(end[first]) if len(stops) and stops[first] else math.inf
    stop_s = min(keep_s, deadline_at_s)
    cause = "cancelled" if keep_s < deadline_at_s else "deadline"
    ends_at = (times.down.end_s, times.computed, times.uploads.up.end_s, events.cut_at)
    if deadline_at_s <= keep_s and any((t == deadline_at_s).any() for t in ends_at):
        return None
    return stop_s, cause


def _rows(
    network: Network,
    costs: Costs,
    trips: Trips,
    members: _Members,
    times: _Times,
    events: _Events,
    stop_s: float,
    cause: str,
    down_left: dict[int, float] | None,
    up_left: dict[int, float] | None,
) -> Plan:
    """The plan: the rows of the jobs that end by the stop (a cut's in its place), then each
    member still at work, in cohort order, its job charged up to the stop."""
    cohort, tag, fates, sure = trips.cohort, trips.tag, trips.fates, members.sure
    n, t0, clients = len(cohort), times.t0, cohort.tolist()
    down_bits, flops, up_bits, drop = (
        members.down_bits,
        members.flops,
        members.up_bits,
        members.drop,
    )
    down, up, computed, compute_s = times.down, times.uploads.up, times.computed, times.compute_s
    down_end, up_end, up_outcome = down.end_s, up.end_s, times.uploads.up_outcome
    down_w, up_w = times.down_w, times.uploads.up_w

    def stopped(p: int, at_s: float, outcome: str, cut: bool = False) -> tuple:
        """Member p's job under way at `at_s` stopped then, charged up to it (`Job.stop`): by
        its session's end (`cut`: a shared band's transfer, cancelled in its replay) or by
        the server (the bands as the stop leaves them)."""
        c = clients[p]
        if down_end[p] > at_s:  # its download
            left = down.cancelled if cut else down_left
            sent = _sent_bits(network.downlink, down_bits[p], times.down_snr[p], at_s - t0, left, p)
            energy = down_w[p] * (at_s - t0)
            return (tag, c, SERVER, "download", t0, at_s, energy, sent, 0.0, outcome)
        if computed[p] > at_s:  # its compute
            start, duration = float(down_end[p]), float(compute_s[p])
            work = flops[p] * (min(1.0, (at_s - start) / duration) if duration > 0 else 0.0)
            energy = costs.compute_energy_j(c, work)
            return (tag, c, NOBODY, "compute", start, at_s, energy, 0.0, work, outcome)
        start = float(computed[p])
        left = up.cancelled if cut else up_left
        sent = _sent_bits(
            network.uplink, up_bits[p], times.uploads.up_snr[p], at_s - start, left, p
        )
        return (tag, c, SERVER, "upload", start, at_s, up_w[p] * (at_s - start), sent, 0.0, outcome)

    # what completes before the stop (at the keep-th arrival: its instant's arrivals too), as
    # columns; a cut's row (its session ended: the job under way charged up to then) in its place
    m = int(np.searchsorted(events.end, stop_s, side="right"))
    pos, kind, end = events.pos[:m], events.kind[:m], events.end[:m]
    # each job's start, power (a compute: its joules), bits, FLOPs and outcome code, by kind
    # and position: gathered for the jobs that end, a transfer's joules its power x time
    jobs = np.zeros((5, 3, n))
    jobs[0, 0], jobs[0, 1], jobs[0, 2] = t0, down_end, computed
    jobs[1, 0], jobs[1, 1], jobs[1, 2] = down_w, costs.compute_energies_j(cohort, flops), up_w
    jobs[2, 0], jobs[2, 2], jobs[3, 1] = down_bits, up_bits, flops
    jobs[4, :2] = OK
    if not sure:
        jobs[4, 0] = np.where(drop == 0, DROPPED, OK)
        jobs[4, 1] = np.where(drop == 1, DROPPED, OK)
    jobs[4, 2] = up_outcome
    start, joules, bits, work, outcome = jobs[:, np.minimum(kind, 2), pos]
    transfer = (kind == 0) | (kind == 2)
    joules[transfer] *= end[transfer] - start[transfer]
    rows = block(
        tag,
        cohort[pos],
        np.where(transfer, SERVER, NOBODY),
        kind,
        start,
        end,
        joules,
        bits,
        work,
        outcome,
    )
    cuts = np.flatnonzero(kind == 3)
    if len(cuts):
        at = [(int(pos[i]), float(end[i])) for i in cuts]
        cut_rows = block_of([stopped(p, s, fates[p].cut_outcome, cut=True) for p, s in at])
        for c, v in cut_rows.items():
            rows[c][cuts] = v
    # the stop: each member still at work, in cohort order, its job charged up to now
    arrived = events.arrive_s <= stop_s  # delivered, dropped, lost or cut
    codes = up_outcome
    if not sure:
        codes = np.where(drop < 3, DROPPED, codes)
        cut_codes = np.array([OUTCOMES.index(f.cut_outcome) for f in fates])
        codes = np.where(events.arrive_kind == 3, cut_codes, codes)
    codes = np.where(arrived, codes, OUTCOMES.index(cause))
    late = np.flatnonzero(~arrived).tolist()
    if late:
        rows = joined([rows, block_of([stopped(p, stop_s, cause) for p in late])])
    delivered = (up_end <= stop_s) & (up_end < events.cut_at) & (up_outcome == OK)
    arrivals = up.order[delivered[up.order]]
    completed = computed <= stop_s
    if not sure:  # a member dropped in its compute, or cut before its end, did not complete it
        completed &= (drop >= 2) & (computed < events.cut_at)
    return Plan(
        arrivals[: trips.keep].astype(np.int64),
        _OUTCOME_NAMES[codes].tolist(),
        completed,
        stop_s,
        rows,
    )


def _settle(
    band: Channel,
    ends: _Ends,
    cut_s: float,
    start_s: np.ndarray,
    bits: np.ndarray,
    snr_hz: list[float],
    cancel_s: np.ndarray,
    clients: np.ndarray,
) -> dict[int, float] | None:
    """Leave a shared band as the round leaves it; the bits left of its transfers still under
    way at `cut_s`, by their index in its order (None on a dedicated band). Its replay stopped
    at the cut already (the deadline, the keep-th upload) or ran past it: then again, to it.
    `clients`: the transfers' clients, in its order."""
    schedule = ends.schedule
    if schedule is None:
        return None
    shared = cast(SharedBand, band)
    if schedule.settled_s > cut_s:
        schedule = shared.schedule_alone(
            start_s.tolist(),
            bits.tolist(),
            snr_hz,
            cut_s,
            cancel_s=cancel_s.tolist(),
            clients=clients.tolist(),
        )
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
    start_s: np.ndarray,
    order: np.ndarray,
    bits: np.ndarray,
    snr_hz: list[float],
    step_by_step: bool,
    n: int,
    until_s: float = math.inf,
    until_done: int = 0,
    cancel_s: np.ndarray | None = None,
    counted: list[bool] | None = None,
    clients: np.ndarray | None = None,
) -> _Ends | None:
    """Transfers started at `start_s` (non-decreasing) by the positions `order` (of `n`), in that
    order (their bits and SNRs listed alike): when each ends, and the order they complete in.
    A shared band is solved at once unless `step_by_step` (a band that may be stopped early is
    replayed, so its state at the stop is the steps') or its few transfers replay quicker;
    a replay stops at `until_s` or once `until_done` have finished (of those `counted`, listed
    alike: all by default), and who has not finished
    by then ends at inf; `cancel_s` (listed alike): when a shared band's transfer is cancelled
    if it is still under way (its sender's session ends; a dedicated band's transfer leaves
    the others alone, its member's cut is the caller's); `clients` (listed alike): each
    transfer's client (the cells' band needs it). None where SimPy's event order would decide
    (`SharedBand.schedule_alone`)."""
    ends = np.full(n, math.inf)  # [n] by position: `order` may list some of them
    if isinstance(band, SharedBand):
        solve = not step_by_step and len(order) > band.replays_up_to
        schedule = band.solve_alone(start_s, bits, snr_hz) if solve else None
        if schedule is None:
            cancels = None if cancel_s is None else cancel_s.tolist()
            who = None if clients is None else clients.tolist()
            schedule = band.schedule_alone(
                start_s.tolist(), bits.tolist(), snr_hz, until_s, until_done, cancels, counted, who
            )
        if schedule is None:
            return None
        done = order[schedule.done]
        ends[done] = schedule.end_s
        cancelled = {int(order[i]): b for i, b in schedule.cancelled.items()}
        return _Ends(ends, done, schedule, cancelled)
    # dedicated: each a timeout of bits / rate from its start, scheduled in `order`; the rate
    # through the band's scalar function (math.log1p), as `transmit` takes it: numpy's log1p
    # is another implementation on some CPUs
    ends[order] = start_s + bits / np.asarray(band.rates_bps(snr_hz))
    return _Ends(ends, order[np.argsort(ends[order], kind="stable")], None, None)


def _ties(end_s: np.ndarray, kind: np.ndarray) -> bool:
    """Whether events of two kinds share an instant (inf: never, after a replay's stop), given
    every event's end in time order and its kind."""
    same = end_s[1:] == end_s[:-1]
    return bool((same & (kind[1:] != kind[:-1]) & (end_s[1:] != math.inf)).any())
