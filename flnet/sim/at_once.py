"""A round trip computed at once, where nothing can interrupt it.

When no member's work can be cut, slowed or dropped (availability always, no battery, no
dropout or slowdown: `World.fates_sure`), nothing stops the round early (no over-selection, a
deadline that falls after the last upload) and every band is dedicated or a shared band idle
at the start, a round trip is a closed system: each member's download ends at
``t0 + bits / rate``, its compute ``duration`` after that, and its upload when the uplink lets
it. Downloads and computes use the event-by-event path's own arithmetic (IEEE +, -, *, / on
arrays, the scalar functions for the rest); a shared band is solved at once where every
transfer starts before any finishes (`SharedBand.solve_alone`: times within 1e-12 relative of
the steps') and replayed step by step otherwise (`schedule_alone`: to the bit). The ledger rows
go in the order SimPy would complete them: by time, and at one instant in the order the events
were scheduled, which within one kind of event is known (downloads by position, computes and
uploads in the order their predecessors completed). Where events of different kinds would fall
on one instant, SimPy's queue order decides: such a round (equal floats from different sums)
goes event by event (`plan` returns None). tests/test_at_once.py compares both paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

from flnet.sim.channel import Channel, Schedule, SharedBand, TraceRateChannel
from flnet.sim.ledger import NOBODY, SERVER, Tag

if TYPE_CHECKING:
    from flnet.sim.world import World

DEDICATED = (Channel, TraceRateChannel)


class Plan(NamedTuple):
    """A round trip's outcome: every member delivered."""

    positions: np.ndarray  # [C] cohort positions in the order their uploads completed
    end_s: float  # the last upload's end


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
) -> Plan | None:
    """The round trip of `cohort` starting now, its ledger rows written; None (nothing done)
    where it must be simulated event by event."""
    net = world.network
    down_band, up_band = net.downlink, net.uplink
    if not (world.fates_sure and _closed(down_band) and _closed(up_band)):
        return None
    if min(down_bits) <= 0 or min(up_bits) <= 0 or min(flops) <= 0:
        return None  # zero-length jobs end at their start instant: ties by construction
    t0 = world.env.now
    n = len(cohort)
    clients = cohort.tolist()
    down_q, down_w = net.star(cohort, down=True)
    up_q, up_w = net.star(cohort, down=False)
    fading = world.radio.rayleigh_fading  # draws keyed as the transfers' own
    down_snr = (
        [q * world._fading(SERVER, c, tag, None) for q, c in zip(down_q, clients)]
        if fading
        else down_q
    )
    everyone = list(range(n))
    down = _transfers(down_band, [t0] * n, everyone, down_bits, down_snr)
    if down is None:
        return None
    compute_s = world._compute_times_s(np.asarray(flops), cohort)  # _Compute's durations
    computed_s = down.end_s + compute_s  # SimPy: the download's end plus the duration
    # computes are scheduled as downloads complete: at one instant, in that order
    compute_order = sorted(down.order, key=computed_s.__getitem__)
    up_snr = up_q
    if fading:
        up_snr = [0.0] * n
        for pos in compute_order:  # in the order the uploads start
            up_snr[pos] = up_q[pos] * world._fading(clients[pos], SERVER, tag, None)
    up = _transfers(
        up_band,
        computed_s[compute_order].tolist(),
        compute_order,
        [up_bits[p] for p in compute_order],
        [up_snr[p] for p in compute_order],
    )
    if up is None:
        return None
    end_s = float(up.end_s.max())
    if deadline_s is not None and not end_s < t0 + deadline_s:
        return None  # the deadline cuts someone (or ties with the last upload)
    down_end, up_end = down.end_s.tolist(), up.end_s.tolist()
    computed = computed_s.tolist()
    if _ties(down_end, computed, up_end):
        return None
    energy_j = [world._compute_energy_j(c, f) for c, f in zip(clients, flops)]
    events = sorted(
        [(down_end[p], 0, i, p) for i, p in enumerate(down.order)]
        + [(computed[p], 1, i, p) for i, p in enumerate(compute_order)]
        + [(up_end[p], 2, i, p) for i, p in enumerate(up.order)]
    )
    for band, ends in ((down_band, down), (up_band, up)):
        if ends.schedule is not None:
            cast(SharedBand, band).settle_alone(ends.schedule)
    add = world.ledger.add
    for end, kind, _, p in events:
        c = clients[p]
        if kind == 0:
            add(tag, c, SERVER, "download", t0, end, down_w[p] * (end - t0), down_bits[p])
        elif kind == 1:
            start = down_end[p]
            add(tag, c, NOBODY, "compute", start, end, energy_j[p], 0.0, flops[p])
        else:
            start = computed[p]
            add(tag, c, SERVER, "upload", start, end, up_w[p] * (end - start), up_bits[p])
    return Plan(np.asarray(up.order, dtype=np.int64), end_s)


def _closed(band: Channel) -> bool:
    """A band this module computes: dedicated, or a shared band idle at the start."""
    return type(band) in DEDICATED or (isinstance(band, SharedBand) and not band._active)


def _transfers(
    band: Channel,
    start_s: list[float],
    order: list[int],
    bits: list[float],
    snr_hz: list[float],
) -> _Ends | None:
    """Transfers started at `start_s` (non-decreasing) by the positions `order`, in that
    order (their bits and SNRs listed alike): when each ends, and the order they complete in.
    None where SimPy's event order would decide (`SharedBand.schedule_alone`)."""
    ends = np.empty(len(order))
    if isinstance(band, SharedBand):
        schedule = band.solve_alone(start_s, bits, snr_hz)
        if schedule is None and type(band) is SharedBand:
            schedule = band.schedule_alone(start_s, bits, snr_hz)
        if schedule is None:
            return None
        done = []
        for end, group in schedule.groups:
            for i in group:
                ends[order[i]] = end
                done.append(order[i])
        return _Ends(ends, done, schedule)
    # dedicated: each a timeout of bits / rate from its start, scheduled in `order`
    rate = band.rate_bps
    for s, p, b, q in zip(start_s, order, bits, snr_hz):
        ends[p] = s + b / rate(q)
    return _Ends(ends, sorted(order, key=ends.__getitem__), None)


def _ties(*times: list[float]) -> bool:
    """Whether two kinds of event share an instant."""
    seen = [set(t) for t in times]
    return any(a & b for i, a in enumerate(seen) for b in seen[i + 1 :])
