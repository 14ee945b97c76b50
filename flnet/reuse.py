"""Trajectory reuse and timing-only runs: the time side without the learning.

**Why it is sound.** In a round-trip algorithm (FedAvg, FedProx, SCAFFOLD, FedDyn, MOON) the
learning never looks at the clock: the cohort of round t comes from the selection stream (seed,
round), each client's local work from its own minibatch key, and the server sums the delivered
updates in cohort order (not arrival order, so their rounding does not depend on timing). Radio
and device settings then change only when things happen and what they cost, provided nothing
timing decides took place: every ledger event ended `ok` (no deadline cut, no cancelled
transfer), no over-selection (the first K arrivals would choose the aggregate), no stop on
simulated seconds or joules. So points of a sweep that differ only in the fields of `COSTS_ONLY`
form a group; one of them trains in full (the *trajectory run*) and the others *replay* it.

**What a replay does.** It builds the point's World (same seed, its own radio and devices) and
runs the same round trips on the SimPy clock, with each client's FLOPs and each message's bits
read from the trajectory's ledger (which already holds them: nothing extra is saved) and no
torch maths: the same events in the same order with the same keyed random streams (fading), so
its ledger and the cost columns of its records (`sim_time_s`, `events`, `energy_*`, `bits_*`) are
those of a full run of the point, bit for bit; times are simulated, not derived by formula, so
shared bands and overlaps come out right. The other columns (accuracy, loss, local steps) are the
trajectory's rows of the same rounds, and the run stops where the trajectory stopped (its last
round, e.g. a target accuracy reached). A replay whose own run has an event that is not `ok` (a
deadline that now cuts a client) is not the point's run: the point runs in full instead, and its
`summary.json` says why (`reuse_note`). A replay's summary names its trajectory (`reused_from`).

The conditions are checked twice: on the configuration before anything runs (`why_not`), on the
trajectory's results (`source_problem`) and on the replay itself (`NotReusable`).

**Timing-only runs** (`flnet run FILE --timing-only`, `timing_only()`): the same replay
protocol with the work computed from the model and the local-work settings instead of read from a
ledger (FLOPs per sample of the real model times the samples each client would process; bits of
the messages the algorithm sends), no training and no evaluation; for what-if questions on
radio, devices, deadlines and rounds. Its records have the cost columns only and
`timing_only: true`, as does its summary. It reads the data set only for its shapes and the
clients' sizes.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from flnet import output
from flnet.algorithms.records import RECORDS, NotReplayable, Replay
from flnet.errors import FlnetError, ScenarioError
from flnet.output import run_status
from flnet.run_folders import finished, identity
from flnet.scenario import Scenario, load_scenario
from flnet.sim.ledger import NOBODY, SERVER, Tag
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.scheduling import Work as ExpectedWork
from flnet.sim.world import AbstractWorld, Progress, World

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

    from flnet.runner import Result  # loads torch: for annotations only

    Work = Callable[[int, np.ndarray], tuple[Any, Any, Any]]

# Fields that only change what things cost, never what is computed (a conservative list: a
# field not named here is learning-relevant). Dotted paths into the resolved scenario; a
# section name covers all of it. A capacity trace's compute power prices its compute seconds
# as kappa does the cycle model's (joules only); its path and mapping set who is online, so
# they stay out.
COSTS_ONLY = (
    "radio",
    "clients.cpu_hz",
    "clients.flops_per_cycle",
    "clients.kappa",
    "clients.capacity_trace.compute_power_w",
)

# Algorithms on `round_trip` whose learning does not depend on timing (see the module doc), with
# the size of each message in models, and why some others are not: as their records say.
REPLAYABLE = {name: r.replay for name, r in RECORDS.items() if isinstance(r.replay, Replay)}
NOT_REPLAYABLE = {
    name: r.replay.why for name, r in RECORDS.items() if isinstance(r.replay, NotReplayable)
}
STOPS_REPLAYED = ("rounds", "target_accuracy")
COST_COLUMNS = (
    "round",
    "events",
    "sim_time_s",
    "energy_j",
    "energy_compute_j",
    "energy_uplink_j",
    "energy_downlink_j",
    "energy_d2d_j",
    "bits_up",
    "bits_down",
    "bits_d2d",
)


class NotReusable(FlnetError):
    """This replay is not the point's run (the point must run in full); says why."""


# ---------------------------------------------------------------- groups


def _drop(tree: dict, path: str) -> dict:
    head, _, rest = path.partition(".")
    if head not in tree:
        return tree
    if not rest:
        return {k: v for k, v in tree.items() if k != head}
    sub = tree[head]
    return {**tree, head: _drop(sub, rest) if isinstance(sub, dict) else sub}


def group_key(data: dict) -> str:
    """The hash of a resolved scenario without its costs-only fields: points with the same
    group key compute the same thing."""
    for path in COSTS_ONLY:
        data = _drop(data, path)
    return identity({**data, "radio": None})


def why_not(data: dict) -> str | None:
    """Why a point (resolved scenario, JSON form) cannot reuse another's training, from its
    configuration alone; None when it may (its trajectory's results are checked later)."""
    algo = data["algorithm"]
    name = algo["name"]
    if name not in REPLAYABLE:
        return NOT_REPLAYABLE.get(name, f"{name} is not known to be replayable")
    if algo["cohort"].get("over_selection", 1.0) > 1.0:
        return "over-selection: the first K arrivals decide the aggregate"
    if algo["cohort"].get("sampling", "uniform") != "uniform":
        return "cohort.sampling by data size: a replay draws its cohorts without the data"
    if data.get("resources") is not None:
        return "resources: the policies decide each round from the run's own history"
    run = data["run"]
    for field in ("time_budget_s", "energy_budget_j"):
        if run.get(field) is not None:
            return f"run.{field}: a stop on simulated seconds or joules"
    return None


# ---------------------------------------------------------------- what a replay reads


@dataclass
class Source:
    """What a trajectory run left that its replays need: its summary, records, ledger and
    partition (all from its results folder)."""

    key: str
    summary: dict
    records: pd.DataFrame
    ledger: pd.DataFrame
    partition: pd.DataFrame


def _read(folder: Path, name: str) -> pd.DataFrame:
    if (folder / f"{name}.parquet").exists():
        return pd.read_parquet(folder / f"{name}.parquet")
    return pd.read_csv(folder / f"{name}.csv")


def load_source(folder: Path, key: str) -> Source:
    """A finished trajectory run's materials; FlnetError when they cannot be read."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
        summary["status"] = run_status(folder, summary.get("status"))  # killed, not running
        return Source(
            key,
            summary,
            _read(folder, "records"),
            _read(folder, "ledger"),
            _read(folder, "partition"),
        )
    except (OSError, ValueError) as e:
        raise FlnetError(f"cannot read the trajectory run in {folder}: {e}") from None


def source_problem(source: Source) -> str | None:
    """Why a trajectory run cannot serve replays (from what it did), or None."""
    s = source.summary
    if s.get("status") != "completed":
        return f"its trajectory run {source.key} ended {s.get('status')}"
    if s.get("stop_reason") not in STOPS_REPLAYED:
        return f"its trajectory run {source.key} stopped on {s.get('stop_reason')}"
    if s.get("reused_from") is not None or s.get("timing_only"):
        return f"{source.key} is not a full run"
    outcome = source.ledger["outcome"].astype(str)
    if not (outcome == "ok").all():
        cut = sorted(set(outcome[outcome != "ok"]))
        return f"its trajectory run {source.key} had events cut ({', '.join(cut)})"
    if not (source.ledger["pattern"].astype(str) == "round_trip").all():
        return f"its trajectory run {source.key} is not made of round trips"
    return None


class _LedgerWork:
    """Each (round, client)'s download bits, FLOPs and upload bits, as the trajectory's
    ledger holds them."""

    def __init__(self, ledger: pd.DataFrame) -> None:
        self.work: dict[tuple[int, int], list[float]] = {}
        kinds = ledger["kind"].astype(str)
        for kind, i, col in (
            ("download", 0, "bits"),
            ("compute", 1, "flops"),
            ("upload", 2, "bits"),
        ):
            part = ledger[kinds == kind]
            for r, n, v in zip(part["round"].tolist(), part["node"].tolist(), part[col].tolist()):
                # no compute row: the client computed nothing (work of no FLOPs writes none)
                self.work.setdefault((int(r), int(n)), [math.nan, 0.0, math.nan])[i] = float(v)

    def __call__(self, t: int, cohort: np.ndarray) -> tuple[list, list, list]:
        try:
            rows = [self.work[(t, c)] for c in cohort.tolist()]
        except KeyError as e:
            raise NotReusable(
                f"client {e.args[0][1]} of round {t} did no work in the trajectory run"
            ) from None
        if any(math.isnan(v) for row in rows for v in row):
            raise NotReusable(f"round {t} of the trajectory run is incomplete")
        down, flops, up = (list(col) for col in zip(*rows)) if rows else ([], [], [])
        return down, flops, up


class _PlannedWork:
    """Timing-only: each client's work from the model and the local-work settings, computed
    as the Learner counts it (samples processed x gradients a step x FLOPs per sample)."""

    def __init__(
        self,
        scenario: Scenario,
        num_params: int,
        flops_per_sample: float,
        sizes: np.ndarray,
        forward_flops_per_sample: float = 0.0,
    ) -> None:
        from flnet.learn import optim  # start-up speed: torch

        cfg: Any = scenario.algorithm  # a round-trip algorithm's config
        self.local = cfg.local
        if self.local.optimizer.name == "delta_sgd":
            raise ScenarioError(
                "a timing-only run cannot count Delta-SGD's gradients (its first step "
                "takes one, the others two); use sgd, adam, adagrad or sps",
                field="algorithm.local.optimizer.name",
            )
        self.grads = optim.from_config(self.local).grads_per_step
        self.flops_per_sample = (
            flops_per_sample + RECORDS[cfg.name].extra_forwards * forward_flops_per_sample
        )
        self.sizes = sizes
        replay = REPLAYABLE[cfg.name]
        down, up = replay.down_models, replay.up_models
        self.down_bits, self.up_bits = down * num_params * 32, up * num_params * 32

    def __call__(self, t: int, cohort: np.ndarray) -> tuple[Any, np.ndarray, Any]:
        local = self.local
        if local.epochs is None:
            samples = np.full(len(cohort), local.steps * local.batch_size, dtype=np.int64)
        else:
            n = self.sizes[cohort].astype(np.int64)
            b = local.batch_size
            samples = local.epochs * ((n // b) * b if local.drop_last else n)
        flops = (samples * self.grads * self.flops_per_sample).astype(float)
        return self.down_bits, flops, self.up_bits


# ---------------------------------------------------------------- the replay protocol


def protocol(
    world: AbstractWorld, cfg: Any, work: Work, sizes: np.ndarray | None = None
) -> Generator:
    """The round trips of a round-trip algorithm with the maths left out: `work(t, cohort)`
    gives (download bits, FLOPs, upload bits), each one number or one per member. `sizes`
    ([N] training rows) draw the cohorts under sampling by data size (timing-only runs)."""
    from flnet.algorithms import selection  # start-up speed: torch

    k = cfg.cohort.k(world.num_clients)
    sampler = selection.Sampler(cfg.cohort)
    if cfg.cohort.sampling != "uniform" and sizes is None:
        raise NotReusable(f"cohort.sampling {cfg.cohort.sampling} draws by the data sizes")
    for t in world.steps(0):
        expected = _expected(work, t)  # what a resources scheduler's deadline filter reads
        cohort = sampler.draw(
            world, k, t, sizes if sizes is not None else np.ones(0), expected
        ).clients
        down, flops, up = work(t, cohort)
        yield from round_trip(
            world,
            cohort,
            Packet(None, down),
            flops,
            Packet(None, up),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
        )
        world.publish(Progress(t, None, None))


def _expected(work: Work, t: int) -> ExpectedWork | None:
    """A timing-only run's work as the server expects it when it draws round t's cohort
    (`flnet.sim.scheduling.Work`); None for a trajectory's (whose cohorts are its own)."""
    if not isinstance(work, _PlannedWork):
        return None
    planned = work
    return ExpectedWork(
        planned.down_bits, lambda c: np.asarray(planned(t, c)[1], dtype=float), planned.up_bits
    )


class CostRecorder:
    """Observer: a record row with the cost columns wherever the full run would evaluate (and
    its zero-cost `evaluate` ledger row). With `rows` (a trajectory's records by round), those
    rounds' rows with their costs replaced, and a stop at the trajectory's last round."""

    def __init__(
        self, scenario: Scenario, rows: dict[int, dict] | None, end: tuple[int, str] | None
    ) -> None:
        self.scenario = scenario
        self.rows = rows
        self.end = end
        self.out: list[dict] = []

    def on_start(self, world: World) -> None:
        pass

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        from flnet.runner import record_row  # start-up speed: torch

        t = progress.step
        reason = None
        if self.end is not None and t >= self.end[0] and stopping is None:
            reason = self.end[1]
        if self.rows is not None:
            if t not in self.rows:
                return reason
            base = self.rows[t]
        elif t % self.scenario.run.eval_every and stopping is None:
            return reason
        else:
            base = {}
        world.ledger.add(Tag(progress.pattern, t), SERVER, NOBODY, "evaluate", world.now, world.now)
        assert isinstance(world, World)  # observers of a run are called by its World
        costs = record_row(self.scenario, world, progress, {})
        if self.rows is None:
            self.out.append({**costs, "timing_only": True})
        else:
            self.out.append({**base, **{c: costs[c] for c in COST_COLUMNS}})
        return reason

    def on_end(self, world: World, reason: str | None) -> None:
        pass


def _simulate(
    scenario: Scenario,
    work: Work,
    rows: dict[int, dict] | None = None,
    end: tuple[int, str] | None = None,
    flops_per_sample: float | None = None,
) -> tuple[World, CostRecorder]:
    from flnet.runner import StopRules, check_sampled  # start-up speed: torch

    world = World(
        scenario.clients,
        scenario.radio,
        scenario.seed,
        flops_per_sample=flops_per_sample,
        resources=scenario.resources_planned,  # timing-only (trajectory reuse refuses them)
    )
    check_sampled(world)
    recorder = CostRecorder(scenario, rows, end)
    world.observers = [StopRules(scenario), recorder]
    world.start()
    world.publish(Progress(0, None, None))
    env = world.env
    if world.stop_reason is None:
        sizes = work.sizes if isinstance(work, _PlannedWork) else None
        env.run(until=env.process(protocol(world, scenario.algorithm, work, sizes)))
    world.end()
    return world, recorder


def _write(result: Result, partition: pd.DataFrame) -> None:
    from flnet.runner import write_inputs, write_results  # start-up speed: torch

    with output.open_folder(result.scenario.output_dir()) as folder:
        result.output_dir = folder.path
        write_inputs(result.scenario, partition, folder.path)
        write_results(result)


def replay(scenario: Scenario, source: Source, *, write: bool = True) -> Result:
    """The point `scenario` replayed on `source`'s training: a `runner.Result` whose ledger and
    cost columns are a full run's. Raises NotReusable when it is not the point's run."""
    from flnet.checkpoint import input_digests  # start-up speed: torch
    from flnet.runner import Result, input_files  # start-up speed: torch

    problem = why_not(scenario.model_dump(mode="json")) or source_problem(source)
    if problem is not None:
        raise NotReusable(problem)
    wall = time.perf_counter()
    records = source.records
    rows = {int(r["round"]): r for r in records.to_dict("records")}
    summary = source.summary
    world, recorder = _simulate(
        scenario,
        _LedgerWork(source.ledger),
        rows,
        (int(summary["rounds"]), summary["stop_reason"]),
        summary.get("charged_flops_per_sample"),  # times a capacity trace's per-sample seconds
    )
    ledger = world.ledger.frame()
    cut = ledger["outcome"].astype(str)
    if not (cut == "ok").all():
        raise NotReusable(
            "the replay had events cut (" + ", ".join(sorted(set(cut[cut != "ok"]))) + ")"
        )
    out = pd.DataFrame(recorder.out, columns=records.columns)
    for c in records.columns:  # the trajectory's dtypes (a column of None stays object)
        if out[c].dtype != records[c].dtype and len(out):
            out[c] = out[c].astype(records[c].dtype)
    last = recorder.out[-1] if recorder.out else {}
    inputs = input_digests(input_files(scenario))  # the files this replay read, not its source's
    new = {
        **{k: v for k, v in summary.items() if k != "inputs"},
        **({"inputs": inputs} if inputs else {}),
        "status": "completed",
        "stop_reason": world.stop_reason,
        "rounds": int(last.get("round", 0)),
        "sim_time_s": float(world.now),
        "energy_j": world.ledger.total_energy_j,
        "bits_up": world.ledger.bits["upload"],
        "bits_down": world.ledger.bits["download"],
        "bits_d2d": world.ledger.bits["d2d"],
        "wall_s": time.perf_counter() - wall,
        "output_dir": str(scenario.output_dir()),
        "reused_from": source.key,
        "reuse_note": f"costs replayed on the training of point {source.key}",
    }
    result = Result(out, ledger, new, scenario, scenario.output_dir(), source.partition)
    if write:
        _write(result, source.partition)
    else:
        result.output_dir = None
    return result


def timing_only(scenario: Scenario, *, write: bool = True, force: bool = False) -> Result:
    """Run the time side of `scenario` alone (see the module doc): a `runner.Result` with cost
    columns only."""
    from flnet.learn import data as data_mod  # start-up speed: torch
    from flnet.learn import models, references  # start-up speed: torch
    from flnet.runner import Result, resolve_device  # start-up speed: torch

    algo: Any = scenario.algorithm  # every algorithm's config has a name
    name: str = algo.name
    if name not in REPLAYABLE:
        raise ScenarioError(
            f"a timing-only run supports {', '.join(REPLAYABLE)}, not {name} "
            f"({NOT_REPLAYABLE.get(name, 'not replayable')})",
            field="algorithm.name",
        )
    wall = time.perf_counter()
    device = resolve_device(scenario.device)
    fed = data_mod.load(scenario.data, scenario.clients.count, scenario.seed, device)
    model = models.build(scenario.model, fed.input_shape, fed.num_classes, scenario.seed, device)
    # messages and FLOPs as charged: the reference's under model.costs_as, as a full run's
    costs_as = scenario.model.costs_as
    charged = references.charged(costs_as) if costs_as else references.own(model)
    work = _PlannedWork(
        scenario,
        charged.num_params,
        charged.flops_per_sample,
        fed.num_samples,
        charged.forward_flops_per_sample,
    )
    world, recorder = _simulate(scenario, work, flops_per_sample=work.flops_per_sample)
    records = pd.DataFrame(recorder.out)
    summary = {
        "scenario": scenario.name,
        "algorithm": name,
        "seed": scenario.seed,
        "status": "completed",
        "stop_reason": world.stop_reason,
        "timing_only": True,
        "rounds": int(records["round"].iloc[-1]) if len(records) else 0,
        "sim_time_s": float(world.now),
        "energy_j": world.ledger.total_energy_j,
        "bits_up": world.ledger.bits["upload"],
        "bits_down": world.ledger.bits["download"],
        "bits_d2d": world.ledger.bits["d2d"],
        "model_params": model.num_params,
        "training_flops_per_sample": model.training_flops_per_sample(),
        "costs_as": charged.name,
        "charged_params": charged.num_params,
        "charged_flops_per_sample": charged.flops_per_sample,
        "wall_s": time.perf_counter() - wall,
        "output_dir": str(scenario.output_dir()),
    }
    if scenario.run.target_accuracy is not None:
        summary["note"] = "run.target_accuracy is ignored: a timing-only run has no accuracy"
    result = Result(records, world.ledger.frame(), summary, scenario, scenario.output_dir())
    partition = fed.label_histogram()
    result.partition = partition
    if not write:
        result.output_dir = None
        return result
    from flnet.runner import write_inputs, write_results  # start-up speed: torch

    with output.open_folder(scenario.output_dir(), force=force) as folder:
        result.output_dir = folder.path
        write_inputs(scenario, partition, folder.path)
        write_results(result)
    return result


# ---------------------------------------------------------------- a sweep point's job


@dataclass
class Job:
    """What a sweep worker runs for one point: its resolved scenario `data`; with `source`, a
    replay of that trajectory (in full when it cannot be); `note` goes into its summary as
    `reuse_note` (why it ran in full, or that it is a trajectory run); with `resume`, a full
    run that continues from the checkpoint an interrupted or killed run of it left (afresh if
    that checkpoint does not fit)."""

    data: dict
    source: Source | None = None
    note: str | None = None
    resume: bool = False


def scenario_data(job: dict | Job) -> dict:
    return job.data if isinstance(job, Job) else job


def run_job(job: dict | Job, *, write: bool = True) -> Result:
    """Run a sweep point: a replay when it has a source and can be, else in full."""
    if not isinstance(job, Job):
        job = Job(job)
    scenario = load_scenario(data=job.data)
    note = job.note
    if job.source is not None:
        try:
            return replay(scenario, job.source, write=write)
        except NotReusable as e:
            note = f"ran in full: {e}"
    result = _run_in_full(scenario, write, job.resume)
    if note is not None:
        result.summary["reuse_note"] = note
        if write:
            output.write_text(
                (result.output_dir or scenario.output_dir()) / "summary.json",
                output.summary_text(result.summary),
            )
    return result


def _run_in_full(scenario: Scenario, write: bool, resume: bool) -> Result:
    """The point's run; with `resume`, from its checkpoint if that fits, else afresh (the
    folder's earlier files deleted). Which of the two, and why, goes to standard error (a
    local worker's goes to the sweep's log)."""
    from flnet.runner import resume_problem, run  # start-up speed: torch

    if not (resume and write):
        return run(scenario, write=write)
    say = functools.partial(print, file=sys.stderr, flush=True)
    problem = resume_problem(scenario)
    if problem is None:
        return run(scenario, write=True, resume=True, say=say)
    say(f"starting {scenario.output_dir()} afresh: {problem}")
    return run(scenario, write=True, force=True)


# ---------------------------------------------------------------- scheduling a sweep


@dataclass
class Schedule:
    """A sweep's points in two phases: `first` (point, note) run in full at once (trajectory
    runs, points that cannot reuse, points alone in their group); `replays` maps a trajectory's
    key to the points that replay it once it has finished."""

    first: list[tuple[Any, str | None]]
    replays: dict[str, list]


def _full_run(folder: Path) -> bool:
    summary = finished(folder)
    return (
        summary is not None
        and summary.get("reused_from") is None
        and not summary.get("timing_only")
    )


TRAJECTORY_NOTE = "trajectory run: the other points of its group replay its training"


def schedule(points: list[Any], todo: set[str], out: Path, enabled: bool = True) -> Schedule:
    """Group the points (`sweeps.Point`s with a key, in plan order) by `group_key`; in each
    group with points to run, the trajectory is the first finished full run on disk, else the
    first point to run, and the other points to run replay it. Deterministic, so a sweep
    started again picks the same trajectories."""
    if not enabled:
        return Schedule([(p, None) for p in points if p.key in todo], {})
    groups: dict[str, list] = {}
    for p in points:
        groups.setdefault(group_key(p.data), []).append(p)
    first: list[tuple[Any, str | None]] = []
    replays: dict[str, list] = {}
    for members in groups.values():
        waiting = [p for p in members if p.key in todo]
        if not waiting:
            continue
        if len(members) == 1:
            first.append((waiting[0], None))
            continue
        reason = why_not(members[0].data)  # the same for the whole group
        if reason is not None:
            first += [(p, f"ran in full: {reason}") for p in waiting]
            continue
        done = [p for p in members if p.key not in todo and _full_run(out / p.key)]
        if done:
            trajectory = done[0]
        else:
            trajectory = waiting[0]
            first.append((trajectory, TRAJECTORY_NOTE))
        rest = [p for p in waiting if p is not trajectory]
        if rest:
            replays[trajectory.key] = rest
    return Schedule(first, replays)


def replay_jobs(
    replays: dict[str, list], out: Path, data_of: Callable[[Any], dict]
) -> list[tuple[str, Job]]:
    """The second phase's jobs, once the trajectories have run: each a replay of its
    trajectory, or a full run saying why not (the trajectory failed or did something timing
    decided). `data_of(point)` is the scenario dict the worker runs."""
    jobs = []
    for key, points in replays.items():
        source: Source | None = None
        note = None
        if finished(out / key) is None:
            note = f"ran in full: its trajectory run {key} did not finish"
        else:
            try:
                source = load_source(out / key, key)
                problem = source_problem(source)
            except FlnetError as e:
                problem = str(e)
            if problem is not None:
                source, note = None, f"ran in full: {problem}"
        jobs += [(p.key, Job(data_of(p), source, note)) for p in points]
    return jobs
