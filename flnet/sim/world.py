"""The World: devices, links and the ledger on a SimPy clock, and the primitives built on them.

Primitives are all an algorithm's time is made of: a transfer of a message from one node to
another (`start_transfer`), local compute of some FLOPs (`start_compute`), a D2D transmission
(`start_d2d`), each a job that calls its `then` when it ends, and waiting (`wait`). Each job
writes its ledger row (time, joules, bits, outcome) when it ends, completed or stopped. The
communication shapes (`round_trip`, `exchange`, `stream`) are built on these in
`flnet.sim.patterns`, which see the World as a `PatternWorld`; algorithms see only the
narrower `AbstractWorld`. Nothing here imports torch: the World sees bits and FLOPs, never
tensors.

Who is online when (`availability`, `flnet.sim.availability`) and how a started client's work
goes (`fate`: its session's end, a slowdown, a dropout point) are the World's too; patterns
end a member's work at such an instant with `end_at` (see docs/concepts/availability.md).

The run's progress goes through the World too: an algorithm `publish`es a `Progress` record after
each unit of its pattern (a round, an iteration, a server update); observers evaluate, record,
checkpoint and stop the run (`Observer`). `request_stop` asks the run to stop at the next such
point, the only places a run may stop or checkpoint (see `flnet.sim.patterns` for each pattern's).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

import numpy as np
import simpy

from flnet import draws
from flnet.dists import AnyDist
from flnet.errors import ScenarioError
from flnet.rng import Stream, generator, key_rows, stream_key, stream_keys
from flnet.schema import D2D, ClientsConfig, Radio, ResourcesConfig
from flnet.sim import availability as availability_mod
from flnet.sim import population as population_mod
from flnet.sim.at_once import AtOnce, EventByEvent, RoundPlan
from flnet.sim.availability import Availability, Diurnal
from flnet.sim.battery import Battery
from flnet.sim.cell_clients import cell_clients
from flnet.sim.channel import Channel, SharedBand, Transmission, band, timeout_at
from flnet.sim.classes import ClassEnergy
from flnet.sim.costs import Costs, Devices
from flnet.sim.d2d import AirScheduler, D2DJob
from flnet.sim.fate import SURE, Ends, Fate
from flnet.sim.interference import D2DReuseBand
from flnet.sim.ledger import NOBODY, SERVER, Ledger, Tag
from flnet.sim.network import Link, Network, d2d_link
from flnet.sim.resources import Policies, equal_share_rate_bps
from flnet.sim.scheduling import Work
from flnet.sim.stops import ScheduledStops
from flnet.sim.traces import TraceError, TraceReplay, TraceSpeeds, speeds_from

SELECTION_AHEAD = 16  # rounds of client selection drawn at once
FASTEST_BLOCK = 16_384  # clients a block in `fastest_round_trip_s` with cells
SELECTION_TRIES = 64  # under availability: candidates examined per client wanted, at most
INTERRUPTED = "interrupted"  # the stop reason of `request_stop` from a signal


class StoppedAtOnce(KeyboardInterrupt):
    """A stop was requested (`World.request_stop`: a signal) where no safe point will come:
    a stream with nobody online and nothing under way, or whose works go on failing with no
    server update. The run stops at once, as on a second Ctrl-C: the runner writes its
    results so far and keeps the last checkpoint."""


class Progress(NamedTuple):
    """One unit of the run done: what observers judge, record and checkpoint.

    `step` counts the pattern's unit (round_trip: rounds; exchange: iterations; stream: server
    updates); `run.rounds`, `eval_every` and `checkpoint_every` count it too. `model` is the model
    the run is judged on (a [P] tensor, opaque here); `nodes` optional per-node figures (e.g.
    the [N, P] models of a gossip run); `state` the algorithm's checkpointable state (a NamedTuple
    of tensors and numbers; a resumed run rebuilds it as `State(**fields)`); `figures` optional
    numbers of this step for the records (name -> float, e.g. FedBuff's staleness). The World
    stamps `sim_time_s` and `events` (client results delivered so far) when it is published.
    """

    step: int
    model: Any
    state: Any
    pattern: str = "round_trip"
    nodes: Any = None
    sim_time_s: float = math.nan
    events: int = 0
    figures: dict | None = None


class Alone(NamedTuple):
    """Seconds each client ([C] each) would take for a download, some compute and an upload,
    each alone on its band and without fading: what a client can know of its own speed."""

    down_s: np.ndarray
    compute_s: np.ndarray
    up_s: np.ndarray


class Weights(Protocol):
    """A distribution over the N clients that draws from a generator (`World.sample_weighted`);
    it may store only the clients with their own weight (`flnet.learn.simplex.Simplex`)."""

    @property
    def n(self) -> int: ...

    def sample(self, rng: np.random.Generator, m: int, replace: bool = True) -> np.ndarray: ...


class Observer(Protocol):
    """Watches a run: `flnet.run(..., observers=[...])`. Observers are called in order; each
    sees the stop reason of those before it."""

    def on_start(self, world: World) -> None:
        """Before the first step (of a fresh or a resumed run)."""

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        """After each step; return a reason to stop the run, or None."""

    def on_end(self, world: World, reason: str | None) -> None:
        """After the last step (reason: why the run stopped; None if the protocol ended)."""


class Job(Protocol):
    """A transfer or a compute under way. `event` fires when it completes on its own; `stop`
    ends it early, charging it up to now. `outcome` is None while it runs, then ok or the cause
    it was stopped for."""

    event: simpy.Event
    outcome: str | None

    def stop(self, cause: str) -> None: ...


class AbstractWorld(Protocol):
    """What an algorithm may use of the World: its size, clock and random streams, who takes
    part, and publishing its steps (and what it hands the World to: `flnet.sim.topology`'s
    `Schedule` reads `generator` and `positions_m`). Time passes only through a pattern
    (`flnet.sim.patterns`), which is the sim's own and sees the rest (`PatternWorld`)."""

    @property
    def num_clients(self) -> int: ...

    @property
    def now(self) -> float: ...

    def steps(self, start: int = 0) -> Iterator[int]: ...

    def publish(self, progress: Progress) -> None: ...

    def sample_clients(
        self,
        k: int,
        round: int,
        over_selection: float = 1.0,
        stream: Stream = Stream.SELECTION,
        work: Work | None = None,
    ) -> np.ndarray: ...

    def sample_weighted(
        self, m: int, round: int, weights: Weights, replace: bool = True
    ) -> np.ndarray: ...

    def online_clients(self, clients: np.ndarray, draw: int) -> np.ndarray: ...

    def alone_s(
        self, clients: np.ndarray, down_bits: float, flops: float, up_bits: float
    ) -> Alone: ...

    def generator(self, stream: Stream, *keys: int) -> np.random.Generator: ...

    def positions_m(self, nodes: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class PatternWorld(AbstractWorld, Protocol):
    """What the patterns use of the World besides the algorithms' part: jobs (transfers,
    computes, D2D jobs) and waiting, each member's fate and the cuts that end its work,
    the round plan, freezing work under way for a checkpoint, the ledger and the count of
    results delivered."""

    ledger: Ledger
    events: int  # client results delivered so far (patterns count them)
    round_plan: RoundPlan  # round trips computed at once where it can (`flnet.sim.at_once`)

    @property
    def stop_reason(self) -> str | None: ...

    @property
    def stop_requested(self) -> str | None: ...

    def start_transfer(
        self,
        src: int,
        dst: int,
        bits: float,
        tag: Tag,
        *,
        then: Callable[[Job], None] | None = None,
        key: tuple[int, ...] | None = None,
        ends_as: Ends = "ok",
    ) -> Job: ...

    def start_compute(
        self,
        node: int,
        flops: float,
        tag: Tag,
        *,
        then: Callable[[Job], None] | None = None,
        slowdown: float = 1.0,
        ends_as: Ends = "ok",
    ) -> Job: ...

    @property
    def d2d(self) -> D2D: ...

    def start_d2d(
        self,
        src: int,
        receivers: list[int],
        bits: float,
        tag: Tag,
        *,
        lost: list[bool] | None = None,
        then: Callable[[D2DJob], None] | None = None,
    ) -> D2DJob: ...

    def wait_until(self, t_s: float) -> simpy.Event: ...

    def wait(self, seconds: float) -> simpy.Event: ...

    def signal(self) -> simpy.Event: ...

    def fate(
        self,
        client: int,
        draw: int,
        stream: Stream,
        keys: tuple[int, int],
        work: tuple,
        start_s: float | None = None,
    ) -> Fate: ...

    def trip_fates(self, cohort: list[int], tag: Tag, works: Iterable[tuple]) -> list[Fate]: ...

    def compute_fates(self, nodes: list[int], tag: Tag) -> list[Fate] | None: ...

    def end_at(self, t_s: float, stop: Callable[[str], None], outcome: str) -> int: ...

    def integers(self, stream: Stream, keys: np.ndarray, high: int, count: int) -> np.ndarray: ...

    def first_online(self, clients: list[int], draw: int) -> int: ...

    def allocate(
        self,
        cohort: np.ndarray,
        down_bits: np.ndarray,
        flops: np.ndarray,
        up_bits: np.ndarray,
    ) -> bool: ...

    def round_over(self, delivered: np.ndarray, round: int) -> None: ...

    def cancel_end(self, token: int) -> None: ...

    def freeze(self, jobs: list[Job]) -> dict: ...

    def thaw(
        self, frozen: dict, thens: list[Callable[[Job], None]], ends: list[Ends] | None = None
    ) -> list[Job]: ...


_PATTERN_WORLDS: set[type] = set()  # classes checked to implement PatternWorld


def pattern_side(world: AbstractWorld) -> PatternWorld:
    """The World an algorithm handed a pattern, as the pattern sees it (the World implements
    both interfaces; a stand-in an algorithm made would lack the patterns' part). A protocol's
    isinstance costs ~0.1 ms: each class is checked once."""
    if type(world) in _PATTERN_WORLDS:
        return cast(PatternWorld, world)
    if not isinstance(world, PatternWorld):
        raise TypeError(f"{type(world).__name__} is not a World: it lacks the patterns' part")
    _PATTERN_WORLDS.add(type(world))
    return world


class World:
    """Devices, links and the ledger on a SimPy clock, built from the sections it needs."""

    def __init__(
        self,
        clients: ClientsConfig,
        radio: Radio,
        seed: int,
        *,
        start_time_s: float = 0.0,
        flops_per_sample: float | None = None,
        resources: ResourcesConfig | None = None,
    ) -> None:
        """`flops_per_sample` (the training FLOPs charged per sample) turns a capacity trace's
        seconds per sample into seconds per FLOP; needed only with `clients.capacity_trace`.
        `resources`: the per-round resource policies (`flnet.sim.resources`; None: none)."""
        self.clients = clients
        self.radio = radio
        self.seed = seed
        self.env = simpy.Environment(initial_time=start_time_s)
        self.events = 0
        # every per-client attribute is an [N] column; links are made from them when used
        self.population = population_mod.build(clients, radio, seed)
        pop = self.population
        self.devices = Devices(pop.cpu_hz, pop.flops_per_cycle, pop.kappa)
        self.speeds: TraceSpeeds | None = None  # a capacity trace replaces devices and rates
        if clients.capacity_trace is not None:
            if flops_per_sample is None:
                raise ValueError("a capacity trace needs the model's flops_per_sample")
            self.speeds = speeds_from(clients.capacity_trace, seed, flops_per_sample, clients.count)
        self.costs = Costs(self.devices, self.speeds, clients.count, seed, radio.rayleigh_fading)
        self.network = Network(
            self.env, radio, pop, self.speeds, cell_clients(radio, clients, seed, pop)
        )
        self.availability: Availability = availability_mod.build(clients.availability, seed)
        self._stops = ScheduledStops(self.env)  # work to end when its session does
        self.battery: Battery | None = None
        if clients.battery is not None:
            self.battery = Battery(
                clients.battery,
                seed,
                self._zone_of(clients),
                self._capacity_of(clients),
                self._charging_of(clients),
            )
        self.class_energy: ClassEnergy | None = None  # energy by clients.device_classes
        if clients.device_classes:
            names = [c.name for c in clients.device_classes]
            self.class_energy = ClassEnergy(names, pop.device_class)
        # a client's ledger row drains its battery and adds to its class's energy
        self.ledger = Ledger([sub for sub in (self.battery, self.class_energy) if sub is not None])
        # the accelerator of round trips: at once, where every fate is known when it starts
        # (not where clients move: a round's uploads may start in a later epoch than its start)
        cells = self.network.cells
        moving = cells is not None and cells.walk is not None
        self.round_plan: RoundPlan = (
            AtOnce(self.network, self.costs, self.env, self.fates_sure)
            if self.fates_known and not moving
            else EventByEvent()
        )
        self.observers: list[Observer] = []
        self._stop_reason: str | None = None
        self._stop_requested: str | None = None
        self._selections: dict[tuple[int, int, int], np.ndarray] = {}  # (stream, size, round)
        self._d2d_channel: Channel | None = None  # made when the first D2D link is
        self.air_scheduler = AirScheduler(radio.d2d.sharing == "tdma", radio.d2d.half_duplex)
        self.resources = Policies(resources) if resources is not None else None
        self._round_links: dict[tuple[int, int], Link] = {}  # a round's uplinks by a policy

    @property
    def num_clients(self) -> int:
        return self.clients.count

    @property
    def now(self) -> float:
        return self.env.now

    # ------------------------------------------------------------------ steps and observers

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def stop_requested(self) -> str | None:
        """The reason of a stop requested (`request_stop`) and not yet reached."""
        return self._stop_requested if self._stop_reason is None else None

    def stop(self, reason: str | None) -> None:
        """Set the run's stop reason directly (a resumed run that had already ended)."""
        self._stop_reason = reason

    def steps(self, start: int = 0) -> Iterator[int]:
        """Step numbers start+1, start+2, ... until an observer stops the run."""
        t = start
        while self._stop_reason is None:
            t += 1
            yield t

    def request_stop(self, reason: str = INTERRUPTED) -> None:
        """Stop at the next published step (a safe point), after observers have seen it with
        `stopping=reason` (so the checkpointer saves it). Safe to call from a signal handler."""
        if self._stop_requested is None:
            self._stop_requested = reason

    def start(self) -> None:
        for obs in self.observers:
            obs.on_start(self)

    def end(self) -> None:
        for obs in self.observers:
            obs.on_end(self, self._stop_reason)
        self.ledger.unsubscribe()

    def publish(self, progress: Progress) -> None:
        """A step is done: stamp time and events, let observers evaluate, record, checkpoint,
        and stop the run."""
        progress = progress._replace(sim_time_s=float(self.env.now), events=self.events)
        requested = self._stop_reason is None and self._stop_requested is not None
        if requested:  # observers see it (the checkpointer saves); a limit reached here wins
            self._stop_reason = self._stop_requested
        for obs in self.observers:
            reason = obs.on_progress(self, progress, self._stop_reason)
            if reason is not None and (self._stop_reason is None or requested):
                self._stop_reason, requested = reason, False

    # ------------------------------------------------------------------ who takes part

    def sample_clients(
        self,
        k: int,
        round: int,
        over_selection: float = 1.0,
        stream: Stream = Stream.SELECTION,
        work: Work | None = None,
    ) -> np.ndarray:
        """ceil(k * over_selection) distinct clients, uniformly, from `stream` (the selection
        stream; a second draw in a round, such as DRFA's dual step, names its own). Under an
        availability model other than `always`, only clients online now (`_sample_online`).
        With a scheduler (`resources.scheduling`), the selection stream's cohort is its
        choice among a uniform pool of candidates (`flnet.sim.resources`; `work`: what the
        server expects each member to do, for its deadline filter).

        Each round's draw comes from its own generator. They are made SELECTION_AHEAD rounds at
        a time: the same draws, at a third of the cost of making each between training steps,
        which leave numpy's code cold in the CPU caches. numpy's ``choice`` without
        replacement costs O(k), not O(N), while k <= N / 50 above 10,000 clients (Floyd's
        method; a permutation of all N only when k is a larger share), so a round's selection
        from 10,000,000 clients allocates kilobytes (tests/test_population.py). A draw of all N
        clients is every client, sorted, whatever it draws: no draw is made for it.
        """
        m = min(self.num_clients, math.ceil(k * over_selection - 1e-9))
        if self.resources is not None and self.resources.schedules and stream == Stream.SELECTION:
            return self.resources.schedule(self, m, round, work)
        if self.battery is not None or not isinstance(self.availability, availability_mod.Always):
            return self._sample_online(m, round, stream)
        if m == self.num_clients:
            return np.arange(m, dtype=np.int64)
        if (stream, m, round) not in self._selections:
            kept = {key: v for key, v in self._selections.items() if key[0] != stream}
            self._selections = kept | {
                (stream, m, r): np.sort(
                    generator(self.seed, stream, r).choice(self.num_clients, size=m, replace=False)
                )
                for r in range(round, round + SELECTION_AHEAD)
            }
        return self._selections[(stream, m, round)].copy()

    def candidates(self, pool: int, round: int) -> np.ndarray:
        """A scheduler's `pool` candidates for round `round`, uniformly, in draw order: online
        ones only under an availability model or batteries (`_sample_online`, its order by
        id). O(pool), never O(N), as `sample_clients`."""
        if self.battery is not None or not isinstance(self.availability, availability_mod.Always):
            return self._sample_online(pool, round, Stream.SELECTION)
        if pool == self.num_clients:
            return np.arange(pool, dtype=np.int64)
        rng = generator(self.seed, Stream.SELECTION, round)
        return rng.choice(self.num_clients, size=pool, replace=False).astype(np.int64)

    def up_rate_bps(self, clients: np.ndarray, users: int) -> np.ndarray:
        """[C] each client's uplink rate alone without fading on an equal share of the band
        among `users` (a dedicated band: the whole band; a capacity trace: its rate)."""
        net = self.network
        if self.speeds is not None:
            return self.speeds.up_rate_bps[self.speeds.mapping(clients)]
        share = users if net.uplink.shared else 1
        snr = net.snr_hz(clients)
        return equal_share_rate_bps(net.uplink.bandwidth_hz, share, snr)

    def allocate(
        self,
        cohort: np.ndarray,
        down_bits: np.ndarray,
        flops: np.ndarray,
        up_bits: np.ndarray,
    ) -> bool:
        """A round trip's start: the resource policies' band, CPU frequency and transmit
        power for each member ([C] each: the members, their bits and FLOPs), in force until
        `round_over`. False (nothing set) without such policies. The members' uplinks are
        then links of their own: a sub-band of the uplink each (FDMA, `Channel`), or the
        shared band at the policy's power."""
        if self.resources is None or not self.resources.allocates:
            return False
        plan, snr_hz, power_w = self.resources.allocate(self, cohort, down_bits, flops, up_bits)
        cfg = self.resources.cfg
        if cfg.compute_power != "fixed":
            self.costs.cpu_hz_now = dict(zip(cohort.tolist(), plan.cpu_hz.tolist()))
        own_band = cfg.bandwidth != "equal"
        for k, client in enumerate(cohort.tolist()):
            channel = (
                Channel(self.env, float(plan.bandwidth_hz[k])) if own_band else self.network.uplink
            )
            link = Link(channel, float(snr_hz[k]), float(power_w[k]), "upload")
            self._round_links[(client, SERVER)] = link
        return True

    def round_over(self, delivered: np.ndarray, round: int) -> None:
        """A round trip's end: `delivered` clients delivered their update (the policies'
        history); the round's allocation ends."""
        if self.resources is not None:
            self.resources.delivered(delivered, round)
            self._round_links = {}
            self.costs.cpu_hz_now = {}

    def sample_weighted(
        self, m: int, round: int, weights: Weights, replace: bool = True
    ) -> np.ndarray:
        """m clients drawn with replacement from a distribution over all N clients (e.g. DRFA's
        lambda, `flnet.learn.simplex.Simplex`), in draw order, from the stream (seed,
        WEIGHTED_SELECTION, round); without replacement, m distinct ones. Under an availability
        model other than `always` (or with batteries), only clients online now, as
        `sample_clients`: the weights restricted to them (`_sample_weighted_online`)."""
        if weights.n != self.num_clients:
            raise ValueError(f"weights over {weights.n} clients, the run has {self.num_clients}")
        rng = generator(self.seed, Stream.WEIGHTED_SELECTION, round)
        if self.battery is not None or not isinstance(self.availability, availability_mod.Always):
            return self._sample_weighted_online(rng, m, round, weights, replace)
        return weights.sample(rng, m, replace)

    def _sample_weighted_online(
        self, rng: np.random.Generator, m: int, round: int, weights: Weights, replace: bool
    ) -> np.ndarray:
        """Draws from `weights` (with replacement), in order, the offline ones rejected: the
        weights restricted to the online clients, renormalised; without replacement, repeats
        skipped too. Each client's availability is asked once. At most SELECTION_TRIES * m
        draws are examined: when the online clients carry too little weight to give m in
        those, the round goes ahead with the draws found (possibly none), as in
        `_sample_online`."""
        now, limit = self.env.now, SELECTION_TRIES * m
        online: dict[int, bool] = {}
        chosen: list[int] = []
        taken: set[int] = set()
        tried, rate = 0, 1.0
        while len(chosen) < m and tried < limit:
            want = min(limit - tried, math.ceil((m - len(chosen)) / rate) + 4)
            draws = weights.sample(rng, want, True).tolist()
            tried += len(draws)
            new = np.asarray(sorted({c for c in draws if c not in online}), dtype=np.int64)
            if len(new):
                online.update(zip(new.tolist(), self._online(new, now, round).tolist()))
            for c in draws:
                if online[c] and (replace or c not in taken) and len(chosen) < m:
                    chosen.append(c)
                    taken.add(c)
            rate = max(len(chosen), 1) / tried
        return np.asarray(chosen, dtype=np.int64)

    def _sample_online(self, m: int, round: int, stream: Stream) -> np.ndarray:
        """Up to `m` distinct clients online at the round's start (now), uniformly among them.

        Candidates are uniform draws from `stream` (seed, stream, round), examined in
        order (repeats skipped); the online ones are taken until there are `m`. The cost is
        O(m / online fraction) availability questions, never O(N). At most
        ``min(N, SELECTION_TRIES * m)`` distinct candidates are examined: when fewer than `m`
        of them are online the round goes ahead with those found (possibly none: a round
        without clients, which `round_trip` makes last IDLE_RETRY_S, so the next round asks
        again later)."""
        n, now = self.num_clients, self.env.now
        limit = min(n, SELECTION_TRIES * m)
        rng = generator(self.seed, stream, round)
        seen: set[int] = set()
        chosen: list[int] = []
        rate = 1.0  # online share of the candidates so far, for the next batch's size
        while len(chosen) < m and len(seen) < limit:
            want = math.ceil((m - len(chosen)) / max(rate, 1.0 / SELECTION_TRIES)) + 4
            fresh: list[int] = []
            for c in rng.integers(n, size=want).tolist():
                if c not in seen and len(seen) < limit:
                    seen.add(c)
                    fresh.append(c)
            batch = np.asarray(fresh, dtype=np.int64)
            online = batch[self._online(batch, now, round)]
            chosen.extend(online[: m - len(chosen)].tolist())
            rate = max(len(chosen), 1) / len(seen)
        return np.sort(np.asarray(chosen, dtype=np.int64))

    def link(self, src: int, dst: int) -> Link:
        """The link a transfer from `src` to `dst` uses (the one place links are looked up).
        A client-to-client link is made on first use from `radio.d2d`, its SNR (or shadowing)
        drawn from the pair's own key (seed, D2D, min(src, dst), max(src, dst)): reciprocal, and
        never dependent on the order links are used in; the network caches it (`keep`)."""
        if self._round_links:
            link = self._round_links.get((src, dst))
            if link is not None:
                return link
        try:
            return self.network.link(src, dst)
        except KeyError:
            if src < 0 or dst < 0 or src == dst or max(src, dst) >= self.num_clients:
                raise
        if self._d2d_channel is None:
            d2d, pop = self.radio.d2d, self.population
            if d2d.sharing == "spatial_reuse":
                assert d2d.path_loss is not None  # the schema's check
                self._d2d_channel = D2DReuseBand(
                    self.env, d2d.bandwidth_hz, pop.x_m, pop.y_m, pop.radiated_w, d2d.path_loss
                )
            else:
                self._d2d_channel = band(
                    self.env, d2d.bandwidth_hz, d2d.sharing == "shared", users=self.num_clients
                )
        link = d2d_link(
            self.network,
            self.radio.d2d,
            self._d2d_channel,
            src,
            dst,
            generator(self.seed, Stream.D2D, min(src, dst), max(src, dst)),
        )
        self.network.keep(src, dst, link)
        return link

    def alone_s(self, clients: np.ndarray, down_bits: float, flops: float, up_bits: float) -> Alone:
        """`clients`' download, compute and upload times, each alone and without fading
        (O(C): only these clients' rows are read)."""
        net = self.network
        return Alone(
            net.alone_s(down_bits, clients, down=True),
            self.costs.compute_times_s(
                flops, clients
            ),  # a capacity trace's times when there is one
            net.alone_s(up_bits, clients),
        )

    def fastest_round_trip_s(
        self, down_bits: float, flops: float, up_bits: float, enough_s: float = -math.inf
    ) -> float:
        """The quickest any client could download, compute and upload: alone on every band,
        without fading. With cells, which compute a client's channel when it is asked about,
        clients are taken a block at a time, and the first block's best at most `enough_s`
        is the answer (what a check against `enough_s` needs, without a pass over all N)."""
        net = self.network
        if net.cells is not None:
            best = math.inf
            for first in range(0, self.num_clients, FASTEST_BLOCK):
                block = np.arange(first, min(first + FASTEST_BLOCK, self.num_clients))
                down_s, up_s = net.star_alone_s(down_bits, up_bits, block)
                best = min(
                    best, float((down_s + up_s + self.costs.compute_times_s(flops, block)).min())
                )
                if best <= enough_s:
                    break
            return best
        total = (
            net.alone_s(down_bits, down=True)
            + net.alone_s(up_bits)
            + self.costs.compute_times_s(flops)
        )
        return float(total.min())

    # ------------------------------------------------------------------ primitives

    def start_transfer(
        self,
        src: int,
        dst: int,
        bits: float,
        tag: Tag,
        *,
        then: Callable[[Job], None] | None = None,
        key: tuple[int, ...] | None = None,
        ends_as: Ends = "ok",
    ) -> Job:
        """Start sending `bits` from `src` to `dst`; `then(job)` runs when it completes (after
        its ledger row is written, with outcome `ends_as`: `job.outcome` says which). `key`
        (ints) keys its fading draw; by default the draw is keyed by the step and the link's
        draws so far in that step."""
        return _Transfer(self, src, dst, bits, tag, then, key, ends_as=ends_as)

    def start_compute(
        self,
        node: int,
        flops: float,
        tag: Tag,
        *,
        then: Callable[[Job], None] | None = None,
        slowdown: float = 1.0,
        ends_as: Ends = "ok",
    ) -> Job:
        """Start `flops` of local work on `node`; `then(job)` runs when it completes. A
        `slowdown` makes it take that many times longer for the same energy: the device is
        busy with other work, the cycles and their frequency are the same."""
        return _Compute(self, node, flops, tag, then, slowdown=slowdown, ends_as=ends_as)

    # ------------------------------------------------------------------ availability, behaviour

    def online_clients(self, clients: np.ndarray, draw: int) -> np.ndarray:
        """[k] bool: which of `clients` are online now (`draw`: round or launch count)."""
        return self._online(np.asarray(clients, dtype=np.int64), self.env.now, draw)

    def first_online(self, clients: list[int], draw: int) -> int:
        """The position in `clients` of the first one online now (`online_clients`), -1 if
        none: asked one at a time, stopping at the first, where the availability model
        answers one client in plain floats (a trace's `first_online`) and no battery can opt
        a client out; else all at once."""
        first = getattr(self.availability, "first_online", None)
        if first is not None and self.battery is None:
            return int(first(clients, self.env.now))
        online = self._online(np.asarray(clients, dtype=np.int64), self.env.now, draw)
        return int(online.argmax()) if online.any() else -1

    def _online(self, clients: np.ndarray, t_s: float, draw: int) -> np.ndarray:
        """Online AND (with batteries) not opted out by a low battery."""
        online = self.availability.online(clients, t_s, draw)
        if self.battery is not None and online.any():
            online[online] = self.battery.ok(clients[online], t_s)
        return online

    def _zone_of(self, clients: ClientsConfig) -> Callable[[int], float]:
        """Each client's UTC offset for charging: `battery.time_zones_h` drawn per client,
        else the diurnal availability's zone, else UTC."""
        zones = clients.battery.time_zones_h if clients.battery is not None else None
        if zones is not None:
            offsets = np.asarray(zones, dtype=float)
            return lambda c: float(
                offsets[generator(self.seed, Stream.BATTERY_ZONES, c).integers(len(offsets))]
            )
        if isinstance(self.availability, Diurnal):
            return self.availability.zone_h
        return lambda c: 0.0

    def _capacity_of(self, clients: ClientsConfig) -> Callable[[int], AnyDist] | None:
        """Each client's battery capacity distribution, where device classes give their own."""
        classes = clients.device_classes or []
        if clients.battery is None or all(c.battery_capacity_j is None for c in classes):
            return None
        default = clients.battery.capacity_j
        by_class = [c.battery_capacity_j or default for c in classes]
        column = self.population.device_class
        return lambda c: by_class[int(column[c])]

    def _charging_of(
        self, clients: ClientsConfig
    ) -> Callable[[int, float], tuple[bool, float]] | None:
        """With `battery.charging: trace`, the availability trace's charging flag (None: the
        daily window)."""
        if clients.battery is None or clients.battery.charging != "trace":
            return None
        replay = self.availability
        assert isinstance(replay, TraceReplay)  # the scenario checks the kind
        if replay.trace.charging is None:
            path = getattr(clients.availability, "path", "")
            raise TraceError(
                f"{path} has no charging column (0 or 1 per interval), which "
                "clients.battery.charging: trace needs",
                field="clients.battery.charging",
            )
        return replay.charging_until

    def fate(
        self,
        client: int,
        draw: int,
        stream: Stream,
        keys: tuple[int, int],
        work: tuple,
        start_s: float | None = None,
    ) -> Fate:
        """How `client`'s work starting now (`start_s`: a thawed work's start) goes: its
        session's end (check `during`) or, earlier, the instant its battery runs empty
        (outcome battery; `_battery_cut_s`), its
        slowdown and its dropout point, drawn from `stream` at `keys` (round_trip: (round,
        client); stream: (client, count)) in that order: slowdown, dropout, point. `work` is
        (down_bits, flops, up_bits): the dropout point is uniform over the work's progress,
        each phase weighted by its time alone on its band without fading (compute: with the
        slowdown), so the point falls in a phase and after a share of its bits or FLOPs."""
        if self.fates_sure:  # what `_drawn_fate` gives then (tests/test_world.py)
            return SURE
        return self._drawn_fate(client, draw, stream, keys, work, start_s)

    def trip_fates(self, cohort: list[int], tag: Tag, works: Iterable[tuple]) -> list[Fate]:
        """Each round trip member's `fate` as its trip starts (drawn from the behaviour stream
        at (round, client)), whether the round goes event by event (`patterns.round_trip`) or
        at once (`at_once`): the same answers as `fate` a member at a time, the members'
        behaviour generators run as one block (`flnet.draws.uniforms`) and their sessions'
        ends asked in one call. `works`: each member's (down_bits, flops, up_bits), read only
        where fates are drawn."""
        if self.fates_sure:
            return [SURE] * len(cohort)
        n = len(cohort)
        drawn: list = [None] * n
        if self._draws_fates:
            keys = stream_keys(self.seed, Stream.BEHAVIOUR, tag.step, cohort)
            drawn = draws.uniforms(keys, 3).tolist()
        ends_s: list = [None] * n
        avail = self.clients.availability
        if avail.kind != "always" and avail.check == "during":
            ids = np.asarray(cohort, dtype=np.int64)
            ends_s = self.availability.online_until(ids, self.env.now, tag.step).tolist()
        return [
            self._drawn_fate(c, tag.step, Stream.BEHAVIOUR, (tag.step, c), w, None, u, e)
            for c, w, u, e in zip(cohort, works, drawn, ends_s)
        ]

    def compute_fates(self, nodes: list[int], tag: Tag) -> list[Fate] | None:
        """Each gossip node's compute as its iteration starts (`patterns.exchange`): its
        slowdown and dropout point, drawn as a round trip member's (stream BEHAVIOUR at
        (iteration, node), in the order slowdown, dropout, point), the point uniform over the
        compute, which is the node's work there (its sends are the D2D radio's). None: no
        dropouts or slowdowns, every compute sure. Sessions' ends and batteries play no part:
        work a node started in an iteration runs on (`exchange`)."""
        if not self._draws_fates:
            return None
        cfg = self.clients
        u = draws.uniforms(stream_keys(self.seed, Stream.BEHAVIOUR, tag.step, nodes), 3)
        fates = []
        for u_slow, u_drop, point in u.tolist():
            slowdown = cfg.slowdown_factor if u_slow < cfg.slowdown_probability else 1.0
            dropped = u_drop < cfg.dropout_probability
            fates.append(
                Fate(
                    slowdown=slowdown,
                    drop_phase=1 if dropped else 3,
                    drop_fraction=point if dropped else 1.0,
                )
            )
        return fates

    @property
    def _draws_fates(self) -> bool:
        """Whether a fate draws its slowdown, dropout and point (dropouts or slowdowns on)."""
        cfg = self.clients
        return cfg.dropout_probability > 0 or cfg.slowdown_probability > 0

    @property
    def fates_known(self) -> bool:
        """Whether every `fate` is known when its work starts and fixed whatever the others
        do: no battery (whose cut is an estimate, and whose drain other rows change). A
        session's end (`cut_s`, check during) and the judge of an upload (check
        at_completion: the member's online state at the upload's end) are functions of the
        client and the instant alone, so the trip's arithmetic gives when each acts
        (`flnet.sim.at_once`)."""
        return self.battery is None

    @property
    def fates_sure(self) -> bool:
        """Whether nothing can cut, slow or drop any work: no session end, no battery, no
        dropout or slowdown draw (every `fate` is SURE)."""
        return (
            self.fates_known
            and self.clients.availability.kind == "always"
            and not self._draws_fates
        )

    def _drawn_fate(
        self,
        client: int,
        draw: int,
        stream: Stream,
        keys: tuple[int, int],
        work: tuple,
        start_s: float | None = None,
        drawn: list[float] | None = None,
        session_end_s: float | None = None,
    ) -> Fate:
        """`fate`, the general path: the session's end, the battery and the draws (`drawn`:
        the stream's three uniforms, `session_end_s`: the session's end, where the caller
        asked them already)."""
        cfg = self.clients
        avail = cfg.availability
        now = self.env.now
        cut_s, judge = math.inf, None
        if avail.kind != "always":
            if avail.check == "during":
                cut_s = (
                    self._session_end_s(client, now, draw)
                    if session_end_s is None
                    else session_end_s
                )
            else:
                judge = functools.partial(self._judged, client, draw)

        slowdown, u_drop, point = 1.0, 1.0, 0.0
        if self._draws_fates:
            u_slow, u_drop, point = drawn or generator(self.seed, stream, *keys).random(3).tolist()
            slowdown = cfg.slowdown_factor if u_slow < cfg.slowdown_probability else 1.0
        cut_outcome = "interrupted"
        alone = None  # (download, compute without slowdown, upload) seconds, once
        if self.battery is not None:
            alone = self._alone_one(client, work)
            empty_s = self._battery_cut_s(
                client, now if start_s is None else start_s, work, slowdown, alone
            )
            if empty_s < cut_s:
                cut_s, cut_outcome = empty_s, "battery"
        if u_drop >= cfg.dropout_probability:
            return Fate(cut_s, slowdown=slowdown, judge=judge, cut_outcome=cut_outcome)
        down_s, compute_s, up_s = alone or self._alone_one(client, work)
        times = np.array([down_s, compute_s * slowdown, up_s])
        edges = np.cumsum(times) / times.sum() if times.sum() > 0 else np.array([0.0, 1, 1])
        phase = int(np.searchsorted(edges, point, side="right"))
        phase = min(phase, 2)
        below = edges[phase - 1] if phase else 0.0
        share = (point - below) / (edges[phase] - below) if edges[phase] > below else 0.0
        return Fate(cut_s, phase, float(share), slowdown, judge, cut_outcome)

    def _session_end_s(self, client: int, t_s: float, draw: int) -> float:
        """`client`'s `online_until` at `t_s`: in plain floats where the model answers one
        client so (a trace's `online_until_one`)."""
        one = getattr(self.availability, "online_until_one", None)
        if one is not None:
            return float(one(client, t_s))
        ids = np.asarray([client], dtype=np.int64)
        return float(self.availability.online_until(ids, t_s, draw)[0])

    def _judged(self, client: int, draw: int, t_s: float | None = None) -> str:
        """Check at_completion: an upload of `client` ending at `t_s` (default now) arrives
        (ok) if the client is online then, else it is `lost` (a function of the instant
        alone: the event path asks at the upload's end, `at_once` at its planned end)."""
        now = self.env.now if t_s is None else t_s
        online = self.availability.online(np.asarray([client], dtype=np.int64), now, draw)[0]
        return "ok" if online else "lost"

    def _alone_one(self, client: int, work: tuple) -> tuple[float, float, float]:
        """`client`'s download, compute (without slowdown) and upload seconds for `work`
        ((down_bits, flops, up_bits)), each alone on its band without fading."""
        down_bits, flops, up_bits = work
        ids = np.asarray([client], dtype=np.int64)
        net = self.network
        return (
            float(net.alone_s(down_bits, ids, down=True)[0]),
            self.costs.compute_time_s(client, flops),
            float(net.alone_s(up_bits, ids)[0]),
        )

    def _battery_cut_s(
        self,
        client: int,
        start_s: float,
        work: tuple,
        slowdown: float,
        alone: tuple[float, float, float],
    ) -> float:
        """When `client`'s battery runs empty if its download, compute and upload (`alone`:
        `_alone_one`) run back to back from `start_s`, each alone on its band without fading
        (what is known when the work starts; on a shared band or under fading the cut is this
        estimate). inf: never."""
        assert self.battery is not None
        flops = work[1]
        down_s, compute_s, up_s = alone
        down, up = self.link(-1, client), self.link(client, -1)
        phases = [
            (down_s, down.power_w),
            (
                compute_s * slowdown,
                self.costs.compute_energy_j(client, flops) / compute_s / slowdown
                if compute_s > 0
                else 0.0,
            ),
            (up_s, up.power_w),
        ]
        return self.battery.empty_s(client, start_s, phases)

    def end_at(self, t_s: float, stop: Callable[[str], None], outcome: str) -> int:
        """Call `stop(outcome)` at `t_s` (if finite): the member's work ends there with that
        outcome. The token lets a member that is over first cancel it (`cancel_end`)."""
        return self._stops.add(t_s, stop, outcome)

    def cancel_end(self, token: int) -> None:
        self._stops.cancel(token)

    @property
    def d2d(self) -> D2D:
        """The D2D radio's settings (`radio.d2d`): how `exchange` sends."""
        return self.radio.d2d

    def start_d2d(
        self,
        src: int,
        receivers: list[int],
        bits: float,
        tag: Tag,
        *,
        lost: list[bool] | None = None,
        then: Callable[[D2DJob], None] | None = None,
    ) -> D2DJob:
        """Start one D2D transmission of `bits` from `src` to `receivers` (one: unicast;
        several: broadcast, at the weakest one's rate), scheduled on the air by
        `self.air_scheduler`; `lost[r]` marks receiver r's copy lost (still charged). `then(job)`
        runs when its airtime ends (`flnet.sim.d2d`)."""
        links = [self.link(src, r) for r in receivers]
        return D2DJob(
            self.env,
            self.ledger,
            self.costs,
            self.air_scheduler,
            src,
            receivers,
            links,
            bits,
            tag,
            lost,
            then,
        )

    def wait_until(self, t_s: float) -> simpy.Event:
        """An event at exactly `t_s` (not now + a delay rounded to its neighbour)."""
        return timeout_at(self.env, t_s)

    def wait(self, seconds: float) -> simpy.Event:
        """An event `seconds` from now (charges nothing)."""
        return self.env.timeout(seconds)

    def signal(self) -> simpy.Event:
        """An event for a pattern to fire itself (the server's 'enough has arrived')."""
        return self.env.event()

    def generator(self, stream: Stream, *keys: int) -> np.random.Generator:
        """The run's random stream `stream` at `keys` (see `flnet.rng`)."""
        return generator(self.seed, stream, *keys)

    def integers(self, stream: Stream, keys: np.ndarray, high: int, count: int) -> np.ndarray:
        """[C, count] int64: row i is ``generator(stream, *keys[i]).integers(high,
        size=count)`` ([C, K] keys), the rows' generators run as one block (`flnet.draws`)."""
        keys = np.asarray(keys, dtype=np.int64)
        rows = key_rows(stream_key(self.seed, stream), *keys.T)
        return draws.integers(rows, np.full(len(keys), high, dtype=np.int64), count)

    def positions_m(self, nodes: np.ndarray) -> np.ndarray:
        """[len(nodes), 2] the clients' (x, y) in metres (`clients.positions`)."""
        pop, cells = self.population, self.network.cells
        if not len(pop.x_m) and cells is not None:  # drawn by client (flnet.sim.cells)
            return cells.start_xy_m(np.asarray(nodes, dtype=np.int64))
        if not len(pop.x_m):
            raise ScenarioError("no positions: set clients.positions", field="clients.positions")
        return np.stack([pop.x_m[nodes], pop.y_m[nodes]], axis=1)

    def freeze(self, jobs: list[Job]) -> dict:
        """Jobs under way, as numbers a checkpoint can hold: each one's timing, and the state
        of every shared band they are on. `thaw` puts them back under way to the bit."""
        bands: list[dict] = []
        where: dict[int, int] = {}  # id(channel) -> index in bands
        out = []
        for job in jobs:
            if isinstance(job, _Compute):
                out.append(
                    {
                        "tag": tuple(job.tag),
                        "compute": (job.node, job.flops, job.start_s, job.duration_s),
                    }
                )
                continue
            assert isinstance(job, _Transfer)
            channel, tx = job.link.channel, job.tx
            frozen: dict = {"tag": tuple(job.tag), "link": (job.src, job.dst)}
            if math.isnan(tx.end_s):  # on a shared band: the band's state holds it
                if id(channel) not in where:
                    where[id(channel)] = len(bands)
                    shared = cast(SharedBand, channel)  # an unfinished end: a shared band
                    bands.append({"link": (job.src, job.dst), **shared.freeze_band()})
                frozen["band"] = where[id(channel)]
                frozen["slot"] = cast(SharedBand, channel).position(tx)
            else:
                frozen["tx"] = channel.freeze(tx)
            out.append(frozen)
        return {"jobs": out, "bands": bands}

    def thaw(
        self, frozen: dict, thens: list[Callable[[Job], None]], ends: list[Ends] | None = None
    ) -> list[Job]:
        """Frozen jobs under way again, each calling its `then` when it completes (with the
        outcome its `ends` entry gives; default ok)."""
        bands = [
            cast(SharedBand, self.link(*b["link"]).channel).thaw_band(b) for b in frozen["bands"]
        ]
        jobs: list[Job] = []
        ends = ends if ends is not None else ["ok"] * len(thens)
        for f, then, ends_as in zip(frozen["jobs"], thens, ends):
            tag = Tag(f["tag"][0], int(f["tag"][1]))
            if "compute" in f:
                node, flops, start_s, duration_s = f["compute"]
                jobs.append(
                    _Compute(
                        self,
                        int(node),
                        flops,
                        tag,
                        then,
                        resume=(start_s, duration_s),
                        ends_as=ends_as,
                    )
                )
                continue
            src, dst = map(int, f["link"])
            link = self.link(src, dst)
            tx = bands[f["band"]][f["slot"]] if "band" in f else link.channel.thaw(f["tx"])
            jobs.append(_Transfer(self, src, dst, tx.bits, tag, then, None, tx=tx, ends_as=ends_as))
        return jobs

    # ------------------------------------------------------------------ costs

    def _charge_transfer(
        self, tag: Tag, src: int, dst: int, link: Link, tx: Transmission, outcome: str
    ) -> None:
        start, end = tx.start_s, self.env.now
        if link.kind == "download":
            self.ledger.add(
                tag,
                dst,
                src,
                "download",
                start,
                end,
                link.power_w * (end - start),
                tx.sent_bits,
                0.0,
                outcome,
            )
            return
        self.ledger.add(
            tag,
            src,
            dst,
            link.kind,
            start,
            end,
            link.power_w * (end - start),
            tx.sent_bits,
            0.0,
            outcome,
        )
        if link.kind == "d2d":  # the receiver's own battery, on its own row; bits counted once
            self.ledger.add(
                tag,
                dst,
                src,
                "d2d_rx",
                start,
                end,
                link.rx_power_w * (end - start),
                0.0,
                0.0,
                outcome,
            )

    def _charge_compute(
        self,
        tag: Tag,
        node: int,
        flops: float,
        start_s: float,
        duration_s: float,
        outcome: str,
        stopped: bool,
    ) -> None:
        """Work stopped before its end is charged pro rata. Timed by a capacity trace, it
        costs the configured compute power times its seconds (the trace measured time, not
        cycles, so the cycle model's kappa f^2 has nothing to act on). Work of no FLOPs (a
        pure gossip step's: it only sends) is no compute and writes no row; it costs nothing
        either way, and the ledger's compute rows are the computes that happened."""
        if flops == 0:
            return
        if stopped:
            flops *= min(1.0, (self.env.now - start_s) / duration_s) if duration_s > 0 else 0.0
        energy_j = self.costs.compute_energy_j(node, flops)
        self.ledger.add(
            tag, node, NOBODY, "compute", start_s, self.env.now, energy_j, 0.0, flops, outcome
        )


class _Transfer:
    """A transfer under way: its ledger row is written when it completes or is stopped."""

    __slots__ = ("world", "tag", "src", "dst", "link", "tx", "event", "outcome", "then", "ends")

    def __init__(
        self,
        world: World,
        src: int,
        dst: int,
        bits: float,
        tag: Tag,
        then: Callable[[Job], None] | None,
        key: tuple[int, ...] | None,
        tx: Transmission | None = None,
        ends_as: Ends = "ok",
    ) -> None:
        self.world, self.tag, self.src, self.dst, self.then = world, tag, src, dst, then
        self.ends = ends_as
        self.link = link = world.link(src, dst)
        self.tx = (
            tx
            if tx is not None
            else link.channel.transmit(
                bits,
                link.snr_hz * world.costs.fading(src, dst, tag, key),
                dst if src == SERVER else src,  # the client whose cell it is
                dst,
            )
        )
        self.event = self.tx.done
        self.outcome: str | None = None
        self.event.callbacks.append(self._done)

    def _done(self, _event: simpy.Event) -> None:
        if self.outcome is None:
            self.outcome = outcome = self.ends if isinstance(self.ends, str) else self.ends()
            self.world._charge_transfer(self.tag, self.src, self.dst, self.link, self.tx, outcome)
            if self.then is not None:
                self.then(self)

    def stop(self, cause: str) -> None:
        if self.outcome is None:
            self.outcome = cause
            self.tx.cancel()
            self.world._charge_transfer(self.tag, self.src, self.dst, self.link, self.tx, cause)


class _Compute:
    """Local work under way: charged when it completes, or pro rata when stopped."""

    __slots__ = (
        "world",
        "tag",
        "node",
        "flops",
        "start_s",
        "duration_s",
        "event",
        "outcome",
        "then",
        "ends",
    )

    def __init__(
        self,
        world: World,
        node: int,
        flops: float,
        tag: Tag,
        then: Callable[[Job], None] | None,
        resume: tuple[float, float] | None = None,
        slowdown: float = 1.0,
        ends_as: Ends = "ok",
    ) -> None:
        self.world, self.tag, self.node, self.flops, self.then = world, tag, node, flops, then
        self.ends = ends_as
        if resume is None:
            self.start_s = world.env.now
            self.duration_s = world.costs.compute_time_s(node, flops) * slowdown
            self.event: simpy.Event = world.env.timeout(self.duration_s)
        else:  # thawed: it ends when it would have (SimPy added the duration to the start)
            self.start_s, self.duration_s = resume
            self.event = timeout_at(world.env, self.start_s + self.duration_s)
        self.outcome: str | None = None
        self.event.callbacks.append(self._done)

    def _done(self, _event: simpy.Event) -> None:
        if self.outcome is None:
            self._charge(self.ends if isinstance(self.ends, str) else self.ends(), False)
            if self.then is not None:
                self.then(self)

    def stop(self, cause: str) -> None:
        if self.outcome is None:
            self._charge(cause, True)

    def _charge(self, outcome: str, stopped: bool) -> None:
        self.outcome = outcome
        self.world._charge_compute(
            self.tag, self.node, self.flops, self.start_s, self.duration_s, outcome, stopped
        )
