"""Communication patterns, built only on the World's primitives: who sends what to whom, and
when a step is over. An algorithm is maths plus one of these shapes; each is a plain SimPy
generator used as ``result = yield from pattern(world, ...)``. The algorithm hands its pattern
the World it holds (`AbstractWorld`, the narrow part); the pattern uses the rest
(`PatternWorld`: jobs, fates, cuts, the round plan).

- `round_trip`: server -> cohort -> server, with a deadline and over-selection (FedAvg's).
- `exchange`: every node sends to its out-neighbours and goes on once the messages it needs have
  arrived or a timeout passed (gossip).
- `stream`: clients work and upload continuously under a concurrency limit; the server acts on
  each arrival; no round barrier (FedAsync, FedBuff).

Messages are `Packet`s: an opaque payload (tensors, on the learning side) and its bits, which are
all the time side looks at. Client-side state follows simulated time (`ClientState`): a client's
new state takes effect when its local work completes; work interrupted before then changes
nothing; a lost upload after completed work leaves the new state in place.

Availability and device behaviour (`World.fate`): `round_trip` and `stream` start only clients
online then; a member's work ends early, charged up to that instant, when its session ends
(`interrupted`), when it drops out (`dropped`) or, with the `at_completion` check, when it is
offline as its upload completes (`lost`). Such members count as arrived without an update.
`exchange` (gossip) starts only nodes online at the iteration's start (availability and battery
opt-out, drawn with the iteration as key); the others sit the iteration out. A node's compute
is slowed and dropped as a round trip member's work is (`World.compute_fates`); it is not cut
by a session ending, or its battery running empty, during the iteration.

Safe points, where a run may stop or checkpoint (each `World.publish`; `World.request_stop`
stops at the next one): the end of a round for `round_trip` and the end of an iteration for
`exchange`, where nothing is in flight; each server update for `stream`, where the work under
way is frozen into the published state's `flight` (see `stream`) and resumes to the bit.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np
import simpy

from flnet.errors import FlnetError
from flnet.rng import Stream
from flnet.sim.at_once import Trips
from flnet.sim.fate import SURE, Fate
from flnet.sim.ledger import SERVER, Tag
from flnet.sim.world import (
    SELECTION_TRIES,
    AbstractWorld,
    Job,
    PatternWorld,
    StoppedAtOnce,
    pattern_side,
)


class Packet(NamedTuple):
    """A message: what it holds (opaque here) and its size. `bits` is one number, or an array
    with one entry per recipient (or per sender, for an upload) when sizes differ."""

    payload: Any
    bits: Any  # float, or [C] floats


class ClientState(Protocol):
    """Per-client state the learning side computed eagerly for a cohort (e.g. a `Keep` of new
    table rows); the pattern commits the members whose local work completed."""

    def commit(self, positions: np.ndarray) -> None:
        """Make the rows of these cohort positions ([M] int indices) take effect."""


class Member(NamedTuple):
    """One member's part of a cohort's `ClientState`: a stream work's own state when several
    works were computed in one call."""

    cohort: ClientState
    pos: int  # the member's position in the cohort

    @classmethod
    def of(cls, cohort: ClientState | None, pos: int) -> Member | None:
        return None if cohort is None else cls(cohort, pos)

    def commit(self, positions: np.ndarray) -> None:
        """positions index this member alone ([0] or none)."""
        self.cohort.commit(np.asarray([self.pos], dtype=np.int64)[positions])


class Delivery(NamedTuple):
    """How a round trip ended for each member of the cohort."""

    positions: np.ndarray  # [D] cohort positions whose upload was delivered, in arrival order
    outcomes: list[str]  # [C] per member: ok, deadline, cancelled, ...
    completed: np.ndarray  # [C] bool: the member's local work completed
    start_s: float
    end_s: float


# ---------------------------------------------------------------------------- round_trip


def round_trip(
    world: AbstractWorld,
    cohort: np.ndarray,
    down: Packet,
    work_flops: np.ndarray,
    up: Packet,
    *,
    tag: int,
    deadline_s: float | None = None,
    keep: int | None = None,
    client_state: ClientState | None = None,
) -> Generator[simpy.Event, Any, Delivery]:
    """Each member of `cohort` ([C] client ids) downloads `down`, computes its `work_flops`
    ([C]) and uploads `up`; the value is a `Delivery`. `tag` is the round.

    The server stops waiting when `keep` members have delivered (over-selection: the rest are
    cancelled) or `deadline_s` after the start (the late are cut: outcome `deadline`); either
    way interrupted work is charged up to the moment it stopped. At the end of the round
    `client_state` is committed for the members whose compute completed. An empty cohort
    (nobody online at selection) lasts IDLE_RETRY_S: the server waits that long before the next
    round looks for clients again, so the clock moves on to when someone is online.
    Where what can stop the members' work is known when it starts (their fates, drawn as
    their trips start: `World.trip_fates`: slowdowns, dropouts, a session's end, an upload's
    judge; no battery), the World computes the whole round at once (`World.round_plan`,
    `flnet.sim.at_once`): the same rows, outcomes and instants. Under the resource policies'
    allocations (`World.allocate`: bands, frequencies, powers of the round) it goes event by
    event.
    """
    world = pattern_side(world)
    start = world.now
    n = len(cohort)
    if n == 0:  # nobody online to take part: the server looks for clients again later
        yield world.wait(IDLE_RETRY_S)
        return Delivery(np.zeros(0, np.int64), [], np.zeros(0, bool), start, world.now)
    keep = n if keep is None else keep
    down_bits, up_bits = _per_member(down.bits, n), _per_member(up.bits, n)
    step = Tag("round_trip", tag)
    flops = _per_member(work_flops, n)
    # the resource policies' band, frequencies and powers (`resources`): event by event
    allocated = world.allocate(cohort, down_bits, flops, up_bits)
    # each member's fate, drawn as its trip starts (the cohort's at once), for either path
    fates = world.trip_fates(cohort.tolist(), step, _works(down_bits, flops, up_bits))
    plan = (
        None
        if allocated
        else world.round_plan.plan(
            Trips(cohort, down_bits, flops, up_bits, step, deadline_s, keep, fates)
        )
    )
    if plan is not None:  # nothing but the server could stop anyone: computed at once
        yield world.wait_until(plan.end_s)
        world.ledger.extend(plan.rows)
        if client_state is not None:
            client_state.commit(np.flatnonzero(plan.completed))
        world.events += len(plan.positions)
        world.round_over(cohort[plan.positions], tag)
        return Delivery(plan.positions, plan.outcomes, plan.completed, start, world.now)
    gather = _Gather(world, n, keep)
    works = _works(down_bits, flops, up_bits)
    trips = [
        _Trip(world, gather, pos, client, step, *work, fate)
        for pos, (client, work, fate) in enumerate(zip(cohort.tolist(), works, fates))
    ]
    if deadline_s is None:
        yield gather.done
    else:
        yield gather.done | world.wait(deadline_s)
    gather.closed = True
    cause = "cancelled" if len(gather.delivered) >= keep else "deadline"
    for trip in trips:
        trip.stop(cause)
    completed = np.fromiter((trip.computed for trip in trips), dtype=bool, count=n)
    if client_state is not None:
        client_state.commit(np.flatnonzero(completed))
    world.events += len(gather.delivered)
    positions = np.asarray(gather.delivered, dtype=np.int64)
    world.round_over(cohort[positions], tag)
    return Delivery(positions, gather.outcomes, completed, start, world.now)


def _works(
    down_bits: np.ndarray, flops: np.ndarray, up_bits: np.ndarray
) -> Iterator[tuple[float, float, float]]:
    """Each member's (down_bits, flops, up_bits), as floats, made when first asked for (a
    round computed at once with every fate sure asks for none)."""
    yield from zip(down_bits.tolist(), flops.tolist(), up_bits.tolist())


def _per_member(amount: Any, n: int) -> np.ndarray:
    """[n] `amount` (one number, or one per member) of each member, as floats."""
    floats = np.asarray(amount, dtype=float)
    if floats.ndim == 0:
        return np.full(n, floats)
    return floats if floats.shape == (n,) else np.broadcast_to(floats, (n,))


class _Gather:
    """The server's side of a round trip: arrivals in order; `done` fires once `keep` clients
    have delivered or nobody is left to wait for. Arrivals after it closes are not used."""

    def __init__(self, world: PatternWorld, n: int, keep: int) -> None:
        self.outcomes = [""] * n
        self.delivered: list[int] = []
        self.waiting = n
        self.keep = keep
        self.closed = False
        self.done = world.signal()
        if n == 0:
            self.done.succeed()

    def arrive(self, pos: int, outcome: str) -> None:
        self.outcomes[pos] = outcome
        if self.closed or self.done.triggered:
            return
        self.waiting -= 1
        if outcome == "ok":
            self.delivered.append(pos)
        if self.waiting == 0 or len(self.delivered) >= self.keep:
            self.done.succeed()


class _Trip:
    """One client's download, compute and upload, as a chain of callbacks on the World's
    primitives (half the cost of a SimPy process per client, the same timing and charges).
    `stop` charges the phase under way up to now."""

    __slots__ = (
        "world",
        "gather",
        "pos",
        "client",
        "tag",
        "flops",
        "up_bits",
        "job",
        "computed",
        "over",
        "fate",
        "cut",
    )

    def __init__(
        self,
        world: PatternWorld,
        gather: _Gather,
        pos: int,
        client: int,
        tag: Tag,
        down_bits: float,
        flops: float,
        up_bits: float,
        fate: Fate,
    ) -> None:
        self.world, self.gather, self.pos, self.client, self.tag = (world, gather, pos, client, tag)
        self.flops, self.up_bits = flops, up_bits
        self.computed = self.over = False
        self.fate = fate  # `World.trip_fates`'s
        share, ends = fate.portion(0)
        self.job: Job = world.start_transfer(
            SERVER, client, down_bits * share, tag, then=self._downloaded, ends_as=ends
        )
        self.cut = world.end_at(fate.cut_s, self.stop, fate.cut_outcome)

    def _downloaded(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        share, ends = self.fate.portion(1)
        self.job = self.world.start_compute(
            self.client,
            self.flops * share,
            self.tag,
            then=self._trained,
            slowdown=self.fate.slowdown,
            ends_as=ends,
        )

    def _trained(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        self.computed = True
        share, ends = self.fate.portion(2)
        self.job = self.world.start_transfer(
            self.client, SERVER, self.up_bits * share, self.tag, then=self._uploaded, ends_as=ends
        )

    def _uploaded(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        self.over = True
        self.world.cancel_end(self.cut)
        self.gather.arrive(self.pos, "ok")

    def stop(self, cause: str) -> None:
        """Stop where the trip is (nothing, once it is over), charging that phase up to now:
        the end of the round, a session's end (`World.end_at`) and a job that ended as
        dropped or lost all come here."""
        if self.over:
            return
        self.over = True
        self.world.cancel_end(self.cut)
        self.job.stop(cause)
        self.gather.arrive(self.pos, cause)


# ---------------------------------------------------------------------------- exchange


class Exchange(NamedTuple):
    """How one gossip iteration ended."""

    arrived: np.ndarray  # [M] bool per edge (in the order given): its message arrived in time
    start_s: float
    end_s: float
    computed: np.ndarray  # [N] bool per node: its compute completed (before the timeout)
    present: np.ndarray  # [N] bool per node: online at the start (False: it sat the step out)


def exchange(
    world: AbstractWorld,
    nodes: np.ndarray,
    edges: np.ndarray,
    packets: Packet,
    work_flops: np.ndarray,
    *,
    tag: int,
    timeout_s: float | None = None,
    send_after_work: bool = False,
    client_state: ClientState | None = None,
    substep: int = 0,
    present: np.ndarray | None = None,
) -> Generator[simpy.Event, Any, Exchange]:
    """One iteration of gossip: every node computes its `work_flops` ([N]) and sends `packets`
    along each directed edge of `edges` ([M, 2] positions into `nodes`, [N] client ids); the
    value is an `Exchange`. `tag` is the iteration.

    `packets.bits` is one number, or [M] per edge (in `edges` order): a sender may send
    different sizes to different receivers (compression is per edge). How messages go out is
    the D2D radio's (`world.d2d`, `flnet.sim.d2d`): unicast, one transmission per edge; or
    broadcast, one transmission per sender to all its out-neighbours, of the largest of its
    edges' bits, at its weakest receiver's rate. Each message is lost with
    `d2d.loss_probability` (drawn from (seed, D2D_LOSS, iteration, substep), one uniform per edge in
    `edges` order): its airtime is charged, and it counts as not arrived.

    Sends start with the compute (the message is the model before the local step, as in
    D-PSGD), or after it with `send_after_work`. The iteration ends once every compute and
    every transmission has ended, or `timeout_s` after it started: then compute still under
    way is stopped (outcome `timeout`, charged pro rata; `computed` is False) and so are
    transmissions (charged up to then; their messages count as lost; a transmission not yet
    started, or never started because its sender's compute was cut, costs nothing). At the
    end `client_state` is committed for the nodes whose compute completed.

    Availability: only nodes online at the start (`world.online_clients(nodes, tag)`: the
    availability model, drawn with the iteration as key, and the battery opt-out) take part. A
    node offline then sits the iteration out: no compute, no sends and no ledger row; every
    edge into or out of it counts as not arrived (an online sender does not transmit to it:
    its neighbours see it is absent, as a D2D peer that does not answer), `computed` and
    `present` are False. Work started by an online node runs on: a session that ends, or a
    battery that runs empty, during the iteration does not cut it (the iteration is short
    next to a session; its joules still drain the battery). An iteration with nobody online
    lasts IDLE_RETRY_S, as a round without clients does, so a night passes in simulated time.
    With everyone online (availability `always`, no battery) nothing differs from a run
    without availability. `present` ([N] bool) is that answer when the caller asked it already
    (to train only the nodes online: `flnet.algorithms.decentralized.train_online`).

    Dropouts and stragglers (`clients.dropout_probability`, `slowdown_*`): a present node's
    compute (where `work_flops` > 0; a pure gossip step draws nothing) has the fate a round
    trip member's work would, drawn from (seed, BEHAVIOUR, `tag`, node) (`World.compute_fates`):
    slowed, it takes `slowdown_factor` times longer for the same joules; dropped, it stops at
    its uniform point (outcome `dropped`, charged up to then) as a timeout would stop it:
    `computed` is False, and with `send_after_work` it sends nothing; messages it sent as its
    compute started go on (the node took no step, it still mixes what arrives).
    """
    world = pattern_side(world)
    start = world.now
    step = Tag("exchange", tag)
    ids, flops = nodes.tolist(), np.asarray(work_flops, dtype=float).tolist()
    pairs = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    m = len(pairs)
    bits = _per_edge(packets.bits, m)
    d2d = world.d2d
    lossy = d2d.loss_probability > 0
    lost = (
        (world.generator(Stream.D2D_LOSS, tag, substep).random(m) < d2d.loss_probability).tolist()
        if lossy
        else []
    )
    if present is None:
        present = np.asarray(world.online_clients(nodes, tag), dtype=bool)
    if not present.any():  # nobody online: the iteration waits, the next one asks again
        yield world.wait(IDLE_RETRY_S)
        return Exchange(np.zeros(m, bool), start, world.now, np.zeros(len(ids), bool), present)
    usable = None if present.all() else (present[pairs[:, 0]] & present[pairs[:, 1]]).tolist()
    groups = _transmissions(len(ids), pairs, d2d.transmission == "broadcast", usable)
    receivers = pairs[:, 1].tolist()
    arrived = np.zeros(m, dtype=bool)
    computed = np.zeros(len(ids), dtype=bool)
    sends: list[Job | None] = [None] * sum(len(g) for g in groups)  # D2D jobs, by transmission
    remaining = _Countdown(world, int(present.sum()) + len(sends))
    first = np.cumsum([0] + [len(g) for g in groups]).tolist()  # node -> its first transmission

    def aired(group: list[int]) -> Callable[[Any], None]:
        def then(job: Any) -> None:
            for e, ok in zip(group, job.delivered):
                arrived[e] = ok
            remaining.tick()

        return then

    def send(pos: int) -> None:
        for t, group in enumerate(groups[pos], first[pos]):
            sends[t] = world.start_d2d(
                ids[pos],
                [ids[receivers[e]] for e in group],
                bits[group[0]] if len(group) == 1 else max(bits[e] for e in group),
                step,
                lost=[lost[e] for e in group] if lossy else None,
                then=aired(group),
            )

    def worked(pos: int, job: Job) -> None:
        remaining.tick()
        if job.outcome != "ok":  # dropped: no local step, and its sends never start
            for _ in groups[pos] if send_after_work else ():
                remaining.tick()
            return
        computed[pos] = True
        if send_after_work:
            send(pos)

    on = np.flatnonzero(present).tolist()
    working = [pos for pos in on if flops[pos] > 0]  # a pure gossip step draws no fate
    drawn = world.compute_fates([ids[pos] for pos in working], step) if working else None
    fates = dict(zip(working, drawn or ()))
    computes = []
    for pos in on:
        fate = fates.get(pos, SURE)
        share, ends = fate.portion(1)
        computes.append(
            world.start_compute(
                ids[pos],
                flops[pos] * share,
                step,
                then=functools.partial(worked, pos),
                slowdown=fate.slowdown,
                ends_as=ends,
            )
        )
        if not send_after_work:
            send(pos)
    if timeout_s is None:
        yield remaining.done
    elif not remaining.done.triggered and start + timeout_s > world.now:
        yield remaining.done | world.wait(start + timeout_s - world.now)
    for job in computes:
        job.stop("timeout")  # nothing for those that completed
    for sent in sends:
        if sent is not None:
            sent.stop("timeout")
    if client_state is not None:
        client_state.commit(np.flatnonzero(computed))
    world.events += int(arrived.sum())
    return Exchange(arrived, start, world.now, computed, present)


def _per_edge(bits: Any, m: int) -> list[float]:
    b = np.asarray(bits, dtype=float)
    if b.ndim > 1 or (b.ndim == 1 and len(b) != m):
        raise ValueError(f"packets.bits must be one number or [M] = [{m}] per edge, got {b.shape}")
    return np.broadcast_to(b, (m,)).tolist()


def _transmissions(
    n: int, pairs: np.ndarray, broadcast: bool, usable: list[bool] | None = None
) -> list[list[list[int]]]:
    """Per sender position, its transmissions, each the list of edges it carries: one edge
    each (unicast), or all the sender's edges at once (broadcast); only the `usable` edges
    ([M] bool, None: all), those whose two ends are online."""
    out: list[list[int]] = [[] for _ in range(n)]
    for e, src in enumerate(pairs[:, 0].tolist()):
        if usable is None or usable[e]:
            out[src].append(e)
    if broadcast:
        return [[edges] if edges else [] for edges in out]
    return [[[e] for e in edges] for edges in out]


class _Countdown:
    """`done` fires once `tick` has been called `n` times."""

    __slots__ = ("left", "done")

    def __init__(self, world: PatternWorld, n: int) -> None:
        self.left = n
        self.done = world.signal()
        if n == 0:
            self.done.succeed()

    def tick(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.succeed()


# ---------------------------------------------------------------------------- stream


class Work(NamedTuple):
    """One client's piece of work in a stream, computed eagerly when it starts."""

    down: Packet  # what the client downloads (bits: one number)
    flops: float  # its local compute
    up: Packet  # what it uploads when done
    state: ClientState | None = None  # committed (positions [0]) when its compute completes


class Deferred(Protocol):
    """An upload's payload computed when first needed (`flnet.algorithms.deferred`): the
    pattern checkpoints what it is now (`frozen`), and drops it when its work fails."""

    def frozen(self) -> Any:
        """What a checkpoint keeps of it (tensors, numbers, flnet NamedTuples)."""

    def cancel(self) -> None:
        """Its work failed: it will never be needed."""


def _frozen(payload: Any) -> Any:
    return payload.frozen() if hasattr(payload, "frozen") else payload


def thawed_payloads(frozen: dict, thaw: Callable[[Any], Any]) -> dict:
    """A stream's frozen flight (`stream`'s `resume`) with every payload under way and every
    arrival's made `thaw(payload)` (a `Deferred`'s frozen form back into one), in launch
    order: the works under way, then the arrivals."""
    works = [{**w, "up": thaw(w["up"])} for w in frozen["works"]]
    arrived = [[*a[:4], thaw(a[4]), *a[5:]] for a in frozen["arrived"]]
    return {**frozen, "works": works, "arrived": arrived}


class Arrival(NamedTuple):
    """An upload that reached the server."""

    client: int
    # the client's work count: this was its count-th piece of work (from 0); the field
    # shadows tuple.count, which nothing here calls
    count: int  # type: ignore[assignment]  # a field named like a tuple method
    version: int  # server version (updates so far) when the work started
    staleness: int  # server version at arrival minus `version`
    payload: Any  # the uploaded packet's payload
    start_s: float  # when the work started


class StreamServer(Protocol):
    """The algorithm's side of a stream."""

    @property
    def version(self) -> int:
        """Server updates so far: the stream's step."""

    def work(self, clients: np.ndarray, counts: np.ndarray) -> list[Work]:
        """Start each of `clients`' ([C] ids) `counts`-th ([C]) piece of work from the
        current server model, in one call (maths now, each keyed by (client, count); time
        later): one `Work` per client, in order."""

    def receive(self, arrival: Arrival) -> Any:
        """Act on one arrival; return a `Progress` to publish after a server update (which
        must have advanced `version`), else None."""


def stream(
    world: AbstractWorld,
    server: StreamServer,
    clients: range | np.ndarray,
    *,
    concurrency: int,
    resume: dict | None = None,
    pick: Callable[[int, set[int]], int] | None = None,
) -> Generator[simpy.Event, Any, list[_Work]]:
    """Clients in `clients` (ids: a `range` for every registered client, which costs nothing
    per client, or an [n] array) work and upload continuously, at most `concurrency` at
    once, until the run stops: whenever a slot is free the pattern picks an idle client, asks
    `server.work` for its work and runs its download, compute and upload; each upload that
    arrives goes to `server.receive`, in arrival order; a server update is published at once.
    No round barrier. The value is the work still under way when the run stopped. A stop
    requested while nobody is online and nothing is under way, where no update will come to
    stop at, stops at once (`StoppedAtOnce`), not after IDLE_GIVE_UP_S; so does one where works
    go on failing and no update has come for STOP_PATIENCE_S of wall time since (at the next
    failure), not after GIVE_UP_FAILED_FIRST failed works.

    Keys: a client's work is keyed by (client, its work count); the n-th launch picks uniformly
    among idle clients with the generator (seed, ARRIVALS, n), or with `pick(n, busy) ->
    client`. The clients that start at one instant (the first fill of the concurrency limit,
    the free slots after an arrival) are picked first and their work is computed in one
    `server.work` call, from the same model and with the same keys as one by one. A client's
    state is committed when its compute completes. At a stop, work under way is beyond the
    run's horizon: neither charged nor recorded.

    Safe points: each published server update. There the pattern freezes what it needs into the
    published state's `flight` field (a stream algorithm's State has one, None at the start):
    the launch and work counts, the arrivals not yet handed to the server, and each work under
    way with its payload and its transfer or compute frozen to the bit (`World.freeze`, shared
    bands included). `stream(..., resume=state.flight)` continues exactly where it was.
    Uploads' payloads must be tensors (or plain numbers) to go through a checkpoint, or
    `Deferred` (computed when first needed), which freeze to those; a resumed server makes
    them `Deferred` again (`thawed_payloads`).
    """
    world = pattern_side(world)
    flight = _Flight(world, server)
    counts: dict[int, int] = {}
    launches = 0
    if resume is not None:
        counts, launches = flight.thaw(resume)
    pool = clients if isinstance(clients, range) else np.asarray(clients).tolist()
    busy = {w.client for w in flight.under_way} | {a.client for a in flight.arrived}
    concurrency = min(concurrency, len(pool))
    first_draws = _FirstDraws(world, len(pool))
    idle_since_s: float | None = None  # since when nobody has been online and nothing under way
    while world.stop_reason is None:
        starting: list[tuple[int, int, int]] = []  # (client, count, launch) starting now
        while len(busy) < concurrency:  # fill the free slots with idle online clients
            found = (
                pick(launches, busy)
                if pick
                else _pick_idle(world, pool, busy, launches, first_draws(launches))
            )
            launches += 1
            if found is None:  # nobody online among the candidates: try at the next event
                break
            client = found
            count = counts.get(client, 0)
            counts[client] = count + 1
            busy.add(client)
            starting.append((client, count, launches - 1))
        if starting:  # the clients starting at this instant train in one call
            ids, nums, _ = np.asarray(starting, dtype=np.int64).reshape(-1, 3).T
            for (client, count, launch), work in zip(starting, server.work(ids, nums)):
                flight.launch(client, count, launch, work)
        if not flight.under_way and not flight.arrived:  # nobody online: wait, then try again
            if world.stop_requested is not None:  # no server update (safe point) will come
                raise StoppedAtOnce(
                    f"nobody online and no work under way at {world.now:g} s: no server "
                    "update to stop at"
                )
            idle_since_s = world.now if idle_since_s is None else idle_since_s
            if world.now - idle_since_s >= IDLE_GIVE_UP_S:
                raise FlnetError(
                    f"no client came online for {IDLE_GIVE_UP_S / 86400:g} simulated days "
                    f"(from {idle_since_s:g} s): check clients.availability (a trace that has "
                    "ended, clients that are never online)"
                )
            yield world.wait(IDLE_RETRY_S)
            continue
        idle_since_s = None
        arrival = yield from flight.next()
        busy.difference_update(flight.failed)
        flight.failed.clear()
        if arrival is None:  # a work failed (dropped, interrupted, lost): its slot is free
            flight.give_up_if_nothing_arrives()
            flight.stop_if_no_update_comes()
            continue
        busy.discard(arrival.client)
        world.events += 1
        progress = server.receive(arrival)
        if progress is not None:
            if progress.state is not None:
                progress = progress._replace(
                    state=progress.state._replace(flight=flight.freeze(counts, launches))
                )
            world.publish(progress)
    return flight.under_way


IDLE_RETRY_S = 60.0  # a round with nobody online, or an idle stream, looks again after this
IDLE_GIVE_UP_S = 7 * 86400.0  # a stream idle this long fails (nobody will come online): no hang
# A stream whose works all fail (every upload dropped, interrupted or lost) would retrain
# forever: it fails once this many works in a row have failed, before any upload arrived
# (nothing suggests one ever will) and after (a stream that made progress, then stopped).
# By chance alone: 1,000 in a row is a 4e-5 event at a 99% failure rate, 10,000 one at 99.9%.
GIVE_UP_FAILED_FIRST = 1_000
GIVE_UP_FAILED = 10_000
# A stop requested (Ctrl-C, SIGTERM) in a stream whose works fail, with no server update (its
# safe point) for this long in wall time since: it stops at once at the next failure. Wall
# time, as the person waiting sees it; an update that comes sooner is the usual safe stop.
STOP_PATIENCE_S = 1.0


def _pick_idle(
    world: PatternWorld,
    pool: range | list[int],
    busy: set[int],
    launches: int,
    first: list[list[int]] | None = None,
) -> int | None:
    """A uniform idle client online now (availability drawn with key `launches`), or None
    when none of SELECTION_TRIES candidates is: the first online one of the candidates drawn
    in turn, skipping busy ones. Candidates are drawn in chunks (16, 32, ...) rather than one
    at a time: numpy draws an array of integers as the same calls one by one would
    (tests/test_stream_pick.py), availability is keyed per client (a client's answer does not
    depend on who else is asked), so the pick is the one-at-a-time loop's; the extra draws
    of a chunk's tail come from this launch's own generator and change nothing else. A
    trace's candidates are asked one at a time, up to the first online (`World.first_online`).
    `first`: the launch's first chunks (`[0, len(pool))` indices), drawn beforehand with
    other launches' (`_FirstDraws`), the generator made only when more are needed."""
    drawn = first or []
    rng = None
    tries, chunk, k = 0, PICK_CHUNK, -1
    ids_are_indices = isinstance(pool, range) and pool.start == 0 and pool.step == 1
    while tries < SELECTION_TRIES:  # busy clients are at most `concurrency` of the pool
        k += 1
        if k < len(drawn):
            indices = drawn[k]
        else:
            if rng is None:
                rng = world.generator(Stream.ARRIVALS, launches)
                for done in drawn:  # the chunks drawn already
                    rng.integers(len(pool), size=len(done))
            indices = rng.integers(len(pool), size=chunk).tolist()
        ids = indices if ids_are_indices else [pool[i] for i in indices]  # (every client's)
        candidates = [c for c in ids if c not in busy]
        candidates = candidates[: SELECTION_TRIES - tries]
        chunk *= 2
        if not candidates:
            continue
        tries += len(candidates)
        found = world.first_online(candidates, launches)
        if found >= 0:
            return candidates[found]
    return None


PICK_CHUNK = 16  # candidates drawn at once by the first draw of a pick
PICK_BLOCK = 64  # launches whose first chunks are drawn as one block
PICK_FIRST = (PICK_CHUNK, 2 * PICK_CHUNK)  # a launch's chunks drawn in the block


class _FirstDraws:
    """Each launch's first chunks of candidate indices (`_pick_idle`: PICK_FIRST), PICK_BLOCK
    launches drawn at once (`World.integers`: their generators run as one block, the same
    numbers), which costs a fraction of a generator made per launch. numpy's generator keeps
    a 64-bit word's unused half for its next 32-bit draw, so calls of 16 then 32 draws are
    one call of 48 (tests/test_data.py: also where Lemire rejects words)."""

    def __init__(self, world: PatternWorld, n: int) -> None:
        self.world, self.n = world, n
        self.start, self.rows = 0, list[list[list[int]]]()  # launches start, start + 1, ...

    def __call__(self, launch: int) -> list[list[int]]:
        if not self.start <= launch < self.start + len(self.rows):
            keys = np.arange(launch, launch + PICK_BLOCK, dtype=np.int64)[:, None]
            drawn = self.world.integers(Stream.ARRIVALS, keys, self.n, sum(PICK_FIRST))
            ends = np.cumsum(PICK_FIRST).tolist()
            chunks = [drawn[:, a:b].tolist() for a, b in zip([0, *ends], ends)]
            self.rows = [list(row) for row in zip(*chunks)]
            self.start = launch
        return self.rows[launch - self.start]


class _Flight:
    """The works under way in a stream and the arrivals not yet handed to the server."""

    def __init__(self, world: PatternWorld, server: StreamServer) -> None:
        self.world, self.server = world, server
        self.under_way: list[_Work] = []
        self.arrived: list[Arrival] = []
        self.failed: list[int] = []  # clients whose work failed since the loop last looked
        self.failed_in_a_row: Counter[str] = Counter()  # outcomes since the last arrival
        self.any_arrived = False  # since this process started (a resumed stream: its version)
        self.wake = world.signal()
        self.stop_seen_s: float | None = None  # wall time a failure first saw a stop requested

    def launch(self, client: int, count: int, launch: int, work: Work) -> None:
        self.under_way.append(_Work(self, client, count, launch, self.server.version, work))

    def fail(self, done: _Work, cause: str) -> None:
        """A work ended early (its ledger rows are written): its client's slot is free."""
        self.under_way.remove(done)
        self.failed.append(done.client)
        if hasattr(done.work.up.payload, "cancel"):  # a `Deferred`: never needed now
            done.work.up.payload.cancel()
        self.failed_in_a_row[cause] += 1
        if not self.wake.triggered:
            self.wake.succeed()

    def give_up_if_nothing_arrives(self) -> None:
        """Fail the run once GIVE_UP_FAILED_FIRST works in a row have failed before any upload
        arrived, or GIVE_UP_FAILED after: no upload arrives, so no server update (the stream's
        progress, and its stop) will come."""
        failed = sum(self.failed_in_a_row.values())
        first = not self.any_arrived and self.server.version == 0
        if failed < (GIVE_UP_FAILED_FIRST if first else GIVE_UP_FAILED):
            return
        how = ", ".join(f"{n:,} {cause}" for cause, n in self.failed_in_a_row.most_common())
        raise FlnetError(
            f"no upload arrived in {failed:,} works in a row ({how}), by {self.world.now:.4g} "
            "simulated s: "
            "every work fails before it is delivered; check clients.dropout_probability, "
            "clients.availability (sessions shorter than a work) and clients.battery"
        )

    def stop_if_no_update_comes(self) -> None:
        """At a failure: stop at once (`StoppedAtOnce`) when a stop was requested and no server
        update, where it would be taken, has come for STOP_PATIENCE_S of wall time since a
        failure first saw it. An update turns the request into the run's stop, so it is still
        requested here only while none has come."""
        if self.world.stop_requested is None:
            return
        now_s = time.monotonic()
        if self.stop_seen_s is None:
            self.stop_seen_s = now_s
        if now_s - self.stop_seen_s < STOP_PATIENCE_S:
            return
        failed = sum(self.failed_in_a_row.values())
        raise StoppedAtOnce(
            f"no server update to stop at: {failed:,} works in a row failed, the last at "
            f"{self.world.now:.4g} simulated s"
        )

    def arrive(self, done: _Work) -> None:
        self.under_way.remove(done)
        self.failed_in_a_row.clear()
        self.any_arrived = True
        self.arrived.append(
            Arrival(
                done.client,
                done.count,
                done.version,
                self.server.version - done.version,
                done.work.up.payload,
                done.start_s,
            )
        )
        if not self.wake.triggered:
            self.wake.succeed()

    def next(self) -> Generator[simpy.Event, Any, Arrival | None]:
        """Wait for the next arrival (in arrival order); None: a work failed first."""
        if not self.arrived and not self.failed:
            self.wake = self.world.signal()
            yield self.wake
        return self.arrived.pop(0) if self.arrived else None

    def freeze(self, counts: dict[int, int], launches: int) -> dict:
        works = [
            {
                "client": w.client,
                "count": w.count,
                "launch": w.launch,
                "version": w.version,
                "start_s": w.start_s,
                "phase": w.phase,
                "flops": float(w.work.flops),
                "down_bits": float(w.work.down.bits),
                "up_bits": float(w.work.up.bits),
                "up": _frozen(w.work.up.payload),
                "state_under_way": w.work.state is not None and w.phase < 2,
            }
            for w in self.under_way
        ]
        return {
            "counts": [[c, n] for c, n in counts.items()],
            "launches": launches,
            "works": works,
            "jobs": self.world.freeze([w.job for w in self.under_way]),
            "arrived": [list(a._replace(payload=_frozen(a.payload))) for a in self.arrived],
        }

    def thaw(self, frozen: dict) -> tuple[dict[int, int], int]:
        if any(w["state_under_way"] for w in frozen["works"]):
            raise FlnetError(
                "this stream checkpoint cannot resume exactly: work under way "
                "had client state not yet committed"
            )
        self.under_way = [_Work.thawed(self, w) for w in frozen["works"]]
        ends = [w.fate.portion(w.phase)[1] for w in self.under_way]
        jobs = self.world.thaw(frozen["jobs"], [w.then for w in self.under_way], ends)
        for w, job in zip(self.under_way, jobs):
            w.job = job
            w.cut = self.world.end_at(w.fate.cut_s, w.stop, w.fate.cut_outcome)
        self.arrived = [
            Arrival(int(c), int(n), int(v), int(s), p, t) for c, n, v, s, p, t in frozen["arrived"]
        ]
        return {int(c): int(n) for c, n in frozen["counts"]}, int(frozen["launches"])


class _Work:
    """One client's download, compute and upload in a stream, as a callback chain; its
    transfers' fading keyed by (client, count)."""

    __slots__ = (
        "flight",
        "client",
        "count",
        "launch",
        "version",
        "work",
        "start_s",
        "tag",
        "job",
        "phase",
        "fate",
        "over",
        "cut",
    )

    def __init__(
        self, flight: _Flight, client: int, count: int, launch: int, version: int, work: Work
    ) -> None:
        self.flight, self.client, self.count, self.launch, self.version, self.work = (
            flight,
            client,
            count,
            launch,
            version,
            work,
        )
        world = flight.world
        self.start_s = world.now
        self.tag = Tag("stream", version)
        self.phase = 0  # 0 download, 1 compute, 2 upload
        self.over = False
        self.fate = self._fate(float(work.down.bits))
        share, ends = self.fate.portion(0)
        self.job = world.start_transfer(
            SERVER,
            client,
            float(work.down.bits) * share,
            self.tag,
            then=self._downloaded,
            key=(client, count),
            ends_as=ends,
        )
        self.cut = world.end_at(self.fate.cut_s, self.stop, self.fate.cut_outcome)

    def _fate(self, down_bits: float) -> Fate:
        """Its fate, keyed (client, count); the same when thawed (it started at `start_s`)."""
        world = self.flight.world
        work = (down_bits, float(self.work.flops), float(self.work.up.bits))
        keys = (self.client, self.count)
        return world.fate(
            self.client, self.launch, Stream.BEHAVIOUR_KEYED, keys, work, start_s=self.start_s
        )

    @classmethod
    def thawed(cls, flight: _Flight, w: dict) -> _Work:
        self = cls.__new__(cls)
        self.flight, self.client, self.count = flight, int(w["client"]), int(w["count"])
        self.launch, self.over = int(w.get("launch", 0)), False  # older checkpoints lack it
        self.version, self.start_s, self.phase = int(w["version"]), w["start_s"], int(w["phase"])
        down = Packet(None, float(w.get("down_bits", 0.0)))
        self.work = Work(down, w["flops"], Packet(w["up"], w["up_bits"]))
        self.tag = Tag("stream", self.version)
        self.fate = self._fate(float(down.bits))
        return self

    @property
    def then(self) -> Callable[[Job], None]:
        return (self._downloaded, self._trained, self._uploaded)[self.phase]

    def _downloaded(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        self.phase = 1
        share, ends = self.fate.portion(1)
        self.job = self.flight.world.start_compute(
            self.client,
            float(self.work.flops) * share,
            self.tag,
            then=self._trained,
            slowdown=self.fate.slowdown,
            ends_as=ends,
        )

    def _trained(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        self.phase = 2
        if self.work.state is not None:
            self.work.state.commit(np.zeros(1, dtype=np.int64))
        share, ends = self.fate.portion(2)
        self.job = self.flight.world.start_transfer(
            self.client,
            SERVER,
            float(self.work.up.bits) * share,
            self.tag,
            then=self._uploaded,
            key=(self.client, self.count),
            ends_as=ends,
        )

    def _uploaded(self, job: Job) -> None:
        if job.outcome != "ok":
            return self.stop(str(job.outcome))
        self.over = True
        self.flight.world.cancel_end(self.cut)
        self.flight.arrive(self)

    def stop(self, cause: str) -> None:
        """The work fails now with outcome `cause` (its session ended, or its job ended as
        dropped or lost), charging the job under way up to now; its slot is freed."""
        if self.over or self not in self.flight.under_way:
            return
        self.over = True
        self.flight.world.cancel_end(self.cut)
        self.job.stop(cause)
        self.flight.fail(self, cause)
