"""Build the world for a scenario, run its algorithm, record and write the results.

A run writes as it goes: every `run.checkpoint_every` rounds or `run.checkpoint_interval_s`
wall-clock seconds it saves a checkpoint and the records so far, so a killed run keeps its
finished work and `resume=True` continues it on the same trajectory. The folder's lifecycle
(creation, lock, one run per folder, atomic writes) is `flnet.output`'s.

At the end the records, the summary and the ledger are written first, each on its own, and the
final checkpoint last: a checkpoint that cannot be written loses nothing the run computed. A run
that fails or is interrupted part-way still writes its records, ledger and summary so far, with
status `failed` (and the error) or `interrupted`.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pandas as pd
import pyarrow
import torch
import yaml

from flnet import checkpoint, divergence, journal, output, units
from flnet.algorithms import ALGORITHMS
from flnet.errors import FlnetError, ScenarioError, TopologyWarning, UnitWarning
from flnet.journal import TableJournal
from flnet.learn import data as data_mod
from flnet.learn import models, references
from flnet.learn.aggregate import consensus_distance
from flnet.learn.data.blocks import BlockClock
from flnet.learn.evaluate import Evaluator
from flnet.learn.local import Learner
from flnet.learn.server_optim import labels as server_optim_labels
from flnet.output import WriteError
from flnet.rng import Stream
from flnet.scenario import Scenario, load_scenario
from flnet.sim import topology
from flnet.sim.ledger import NOBODY, SERVER, Tag, remove_journal
from flnet.sim.world import INTERRUPTED, Observer, Progress, StoppedAtOnce, World

SMALL_MODEL_PARAMS = 5_000_000  # below this, one torch thread: batching is the parallelism


@dataclass
class Result:
    """What a run returns: the two tables, a summary, and where they were written. The ledger
    is made a DataFrame when first read (`ledger`): a caller that reads only the records or the
    summary (a sweep's points, a benchmark) does not pay for it."""

    records: pd.DataFrame
    # the ledger, or what makes it; None only in the partial results written at checkpoints
    ledger_table: pd.DataFrame | Callable[[], pd.DataFrame] | None
    summary: dict
    scenario: Scenario
    output_dir: Path | None = None
    partition: pd.DataFrame = field(default_factory=pd.DataFrame)
    checkpoint_round: int | None = None  # the round of the checkpoint on disk, if any

    @property
    def ledger(self) -> pd.DataFrame | None:
        if callable(self.ledger_table):
            self.ledger_table = self.ledger_table()
        return self.ledger_table

    def __getstate__(self) -> dict:  # pickled (a sweep's worker to its driver) with the table
        return {**self.__dict__, "ledger_table": self.ledger}


class StopRules:
    """Observer: the run's limits on steps (`run.rounds`), simulated seconds and joules. The
    target accuracy needs the step's evaluation, so `TargetAccuracy` checks it after the
    Recorder."""

    def __init__(self, scenario: Scenario) -> None:
        self.run = scenario.run

    def reason(self, world: World, step: int) -> str | None:
        run = self.run
        if step >= run.rounds:
            return "rounds"
        if run.time_budget_s is not None and world.now >= run.time_budget_s:
            return "time_budget"
        if run.energy_budget_j is not None and world.ledger.total_energy_j >= run.energy_budget_j:
            return "energy_budget"
        return None

    def on_start(self, world: World) -> None:
        pass

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        return self.reason(world, progress.step)

    def on_end(self, world: World, reason: str | None) -> None:
        pass


class Recorder:
    """Observer: evaluates every `eval_every` steps and when a limit ends the run (not when it
    is interrupted: a resumed run must give the same records), and ends the run as diverged
    when a rule of `run.divergence` fires (`flnet.divergence`): without a row when the model or
    an evaluation figure is not finite, after the row that broke any other rule.

    `train_loss` is the evaluated step's participating clients' local losses (their mean, as
    each algorithm weighs them: `flnet.algorithms.train_loss`; NaN where no client's work
    counted, as at round 0). It is read at every step, so with `eval_every` above 1 it is the
    evaluated step's own, not a mean since the last record."""

    def __init__(self, scenario: Scenario, evaluator: Evaluator, learner: Learner) -> None:
        self.scenario = scenario
        self.evaluator = evaluator
        self.learner = learner
        self.rules = divergence.Rules(scenario.run.divergence, learner.data.num_classes)
        self.rows: list[dict] = []
        self.diverged_round: int | None = None
        self.diverged_by: str | None = None  # the rule that fired
        if scenario.run.global_train_loss and learner.data.lazy is not None:
            raise ScenarioError(
                "this data set generates its clients' rows when they train: there is no "
                "training set to score the global model on",
                field="run.global_train_loss",
            )

    def on_start(self, world: World) -> None:
        pass

    def diverged(self, t: int, rule: str) -> str:
        self.diverged_round, self.diverged_by = t, rule
        return "diverged"

    def resumed_diverged(self, t: int) -> None:
        """A checkpoint of a run that diverged at step t: the rule that fired is the one its
        last row breaks, else (no row for that step) a non-finite figure."""
        last = self.rows and self.rows[-1]["round"] == t
        self.diverged(t, (self.rules.fired(self.rows) if last else None) or divergence.NON_FINITE)

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        t = progress.step
        losses = self.learner.train_loss  # the step's: read if evaluated, else dropped
        if self.rules.non_finite and not all_finite(progress.model):
            losses.clear()
            return self.diverged(t, divergence.NON_FINITE)
        if t % self.scenario.run.eval_every and stopping in (None, INTERRUPTED):
            losses.clear()
            return None
        train_loss = losses.take()
        metrics = self.evaluator(progress.model, self.learner.block_in_force)
        # block-cyclic data: per-block figures of the predictors, if the state has them
        metrics.update(self.evaluator.blocks(getattr(progress.state, "predictors", progress.model)))
        if progress.nodes is not None:  # gossip: every node's own model too
            metrics.update(self.evaluator.nodes(progress.nodes))
        if self.scenario.run.global_train_loss:
            metrics.update(self.evaluator.global_train_loss(progress.model))
        if self.rules.non_finite and not all(map(math.isfinite, metrics.values())):
            return self.diverged(t, divergence.NON_FINITE)
        world.ledger.add(Tag(progress.pattern, t), SERVER, NOBODY, "evaluate", world.now, world.now)
        self.rows.append(
            record_row(
                self.scenario,
                world,
                progress,
                {
                    **metrics,
                    "train_loss": train_loss,
                    **local_steps(self.scenario, self.learner, t),
                },
            )
        )
        rule = self.rules.fired(self.rows)
        return None if rule is None else self.diverged(t, rule)

    def on_end(self, world: World, reason: str | None) -> None:
        pass


class TargetAccuracy:
    """Observer: stops the run at the first evaluation that reaches `run.target_accuracy`."""

    def __init__(self, target: float | None, recorder: Recorder) -> None:
        self.target = target
        self.recorder = recorder

    def reason(self) -> str | None:
        rows = self.recorder.rows
        if self.target is not None and rows and rows[-1]["test_accuracy"] >= self.target:
            return "target_accuracy"
        return None

    def on_start(self, world: World) -> None:
        pass

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        return self.reason()

    def on_end(self, world: World, reason: str | None) -> None:
        pass


class Checkpointer:
    """Observer: every `every` steps or `interval_s` wall seconds, whichever comes first,
    saves a checkpoint (with the algorithm's state from the progress record), appends the new
    ledger rows to the journal and writes the records so far. When the run stops, for whatever
    reason (a limit, divergence, an interruption), it keeps the final step for the runner to
    save after the tables (`Run.finish`). Checkpoints never change the trajectory, so a
    wall-clock trigger keeps runs reproducible while bounding both the work lost to a kill and
    the time spent writing."""

    def __init__(
        self, run: Run, every: int | None, interval_s: float | None, tables: TableJournal
    ) -> None:
        self.run = run
        self.tables = tables  # the per-client tables' journal
        self.every = every
        self.interval_s = interval_s
        self.last_s = time.monotonic()
        self.final: tuple[Progress, float, str] | None = None  # (progress, now_s, stopping)
        self.saved_round: int | None = None  # the round of the checkpoint on disk

    def _due(self, step: int) -> bool:
        if self.every is not None and step % self.every == 0:
            return True
        return self.interval_s is not None and time.monotonic() - self.last_s >= self.interval_s

    def on_start(self, world: World) -> None:
        pass

    def on_progress(self, world: World, progress: Progress, stopping: str | None) -> str | None:
        if stopping is not None:
            self.final = (progress, world.now, stopping)
            return None
        if not self._due(progress.step):
            return None
        self.last_s = time.monotonic()
        try:
            write_results(self.run.result("running", ledger=False))
        except OSError as e:
            raise WriteError(
                f"could not write {e.filename or self.run.output_dir}: "
                f"{e.strerror or e}; {self.kept()}"
            ) from None
        try:
            self.save_or_raise(world, progress, world.now, None)
        except OSError as e:
            raise WriteError(
                f"could not write {e.filename or self.run.output_dir}: "
                f"{e.strerror or e}; {self.kept()}"
            ) from None
        return None

    def on_end(self, world: World, reason: str | None) -> None:
        pass

    def save_or_raise(
        self, world: World, progress: Progress, now_s: float, stopping: str | None
    ) -> None:
        """Append the journals (the ledger's new rows, the tables' changed rows; each fsynced),
        then save the checkpoint that points into them (fsynced, then renamed); raises the
        OSError of a failed write (the checkpoint on disk is then the previous one)."""
        out = self.run.output_dir
        try:
            rows, size = world.ledger.flush(out / checkpoint.JOURNAL)
        except OSError as e:
            e.filename = e.filename or str(out / checkpoint.JOURNAL)
            raise
        try:
            tables = self.tables.save(self.run.learner)
        except OSError as e:
            e.filename = e.filename or str(self.tables.path)
            raise
        ckpt = checkpoint.Checkpoint(
            round=progress.step,
            events=progress.events,
            now_s=now_s,
            state=progress.state._asdict(),
            tables=tables,
            ledger_rows=rows,
            ledger_bytes=size,
            records=list(self.run.recorder.rows),
            stop_reason=stopping,
            scenario=checkpoint.trajectory_fields(self.run.scenario),
            inputs=self.run.inputs,
            resources=world.resources.state() if world.resources is not None else None,
        )

        def committed() -> None:  # the round noted is the round on disk, even under Ctrl-C
            self.saved_round = ckpt.round
            self.tables.committed()

        try:
            checkpoint.save(out, ckpt, committed)
        except OSError as e:
            e.filename = e.filename or str(out / checkpoint.FILE)
            raise

    def kept(self) -> str:
        if self.saved_round is None:
            return "no checkpoint was written, so --resume cannot continue this run"
        return f"the checkpoint of round {self.saved_round} is kept"


def all_finite(x: torch.Tensor) -> bool:
    """Whether every entry is finite, by one float64 sum: finite float32 values cannot overflow
    it, and any NaN or infinity makes it non-finite."""
    return math.isfinite(float(x.sum(dtype=torch.float64)))


def local_steps(scenario: Scenario, learner: Learner, round: int) -> dict:
    """How the round's clients worked: the mode (steps or epochs) and the mean and max local
    steps of the last cohort trained (0 before any training)."""
    local = getattr(scenario.algorithm, "local", None)
    steps = learner.last_steps if round > 0 else learner.last_steps[:0]
    return {
        "local_mode": local.mode if local is not None else None,
        "local_steps_mean": float(steps.mean()) if len(steps) else 0.0,
        "local_steps_max": int(steps.max()) if len(steps) else 0,
    }


def optimizer_labels(scenario: Scenario, round: int | None = None) -> dict:
    """What the clients trained with, as columns: `optimizer` (its name), `lr` (the effective
    learning rate: the scenario's, or the optimizer's default; None for sps and delta_sgd,
    which set their own step size), `sam_rho` (None: no SAM) and the optimizer's own settings
    as `optimizer_<field>` (momentum, b1, eta0, ...); and, for algorithms that take one, the
    server optimizer (`server_optimizer`, `server_<field>`: `flnet.learn.server_optim.labels`).
    With `local.lr_schedule` (only then), `lr` is round `round`'s learning rate (None: the
    first round's) and `lr_schedule` names the schedule (`lr_schedule_label`)."""
    local = getattr(scenario.algorithm, "local", None)
    if local is None:
        return {}
    opt = local.optimizer
    own = {f"optimizer_{k}": v for k, v in opt.model_dump().items() if k != "name"}
    schedule = local.lr_schedule
    return {
        "optimizer": opt.name,
        "lr": local.lr_at(round),
        **({} if schedule is None else {"lr_schedule": lr_schedule_label(schedule)}),
        "sam_rho": local.sam_rho,
        **own,
        **server_optim_labels(getattr(scenario.algorithm, "server_optimizer", None)),
    }


def lr_schedule_label(schedule: Any) -> str:
    """A schedule as one cell: its kind and settings, e.g. "exponential(gamma=0.998)"."""
    fields = schedule.model_dump(exclude={"kind"}, exclude_none=True)
    settings = ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in fields.items())
    return f"{schedule.kind}({settings})"


def charged_labels(learner: Learner) -> dict:
    """What the run's costs were charged as: `costs_as` (the reference model, None: the model
    trained), its parameters per model-shaped message and its training FLOPs per sample."""
    c = learner.charged
    return {
        "costs_as": c.name,
        "charged_params": c.num_params,
        "charged_flops_per_sample": c.flops_per_sample,
    }


def record_row(scenario: Scenario, world: World, progress: Progress, metrics: dict) -> dict:
    e, b = world.ledger.energy_j, world.ledger.bits
    return {
        "scenario": scenario.name,
        "algorithm": scenario.algorithm.name,
        "seed": scenario.seed,
        **optimizer_labels(scenario, progress.step),
        "costs_as": scenario.model.costs_as,
        "round": progress.step,
        "events": progress.events,
        "sim_time_s": progress.sim_time_s,
        "energy_j": world.ledger.total_energy_j,
        "energy_compute_j": e["compute"],
        "energy_uplink_j": e["upload"],
        "energy_downlink_j": e["download"],
        "energy_d2d_j": e["d2d"] + e["d2d_rx"],
        "bits_up": b["upload"],
        "bits_down": b["download"],
        "bits_d2d": b["d2d"],
        **metrics,
        **(
            {}
            if progress.nodes is None
            else {"consensus_distance": consensus_distance(progress.nodes)}
        ),
        **(progress.figures or {}),
        **(world.battery.figures(world.now) if world.battery is not None else {}),
        **(world.class_energy.figures() if world.class_energy is not None else {}),
        **(world.resources.figures() if world.resources is not None else {}),
    }


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ScenarioError(
            "'cuda' was asked for but no CUDA device is available; use 'auto' or 'cpu'",
            field="device",
        )
    return torch.device(name)


def build(scenario: Scenario, start_time_s: float = 0.0) -> tuple[World, Learner]:
    """The two sides of a run: the World (time, costs) and the Learner (maths)."""
    device = resolve_device(scenario.device)
    fed = data_mod.load(scenario.data, scenario.clients.count, scenario.seed, device)
    model = models.build(scenario.model, fed.input_shape, fed.num_classes, scenario.seed, device)
    costs_as = scenario.model.costs_as
    blocks = scenario.data.blocks
    clock = (
        None
        if blocks is None
        else BlockClock(blocks.num_blocks, blocks.rounds_per_block, blocks.block_s)
    )
    learner = Learner(
        model, fed, scenario.seed, references.charged(costs_as) if costs_as else None, clock
    )
    world = World(
        scenario.clients,
        scenario.radio,
        scenario.seed,
        start_time_s=start_time_s,
        flops_per_sample=learner.flops_per_sample,
        resources=scenario.resources_planned,
    )
    check_sampled(world)
    check_deadline(scenario, world, learner)
    check_topology(scenario, world)
    return world, learner


def check_sampled(world: World) -> None:
    """Per-client values drawn from distributions whose tails the schema cannot bound (a
    lognormal's): every one finite, and positive where the field must be (kappa may be 0)."""
    for name, values in world.devices._asdict().items():
        bad = ~np.isfinite(values) | ((values < 0) if name == "kappa" else (values <= 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise ScenarioError(
                f"client {k} drew {values[k]:g}, which no device has; use a "
                f"distribution with a smaller spread",
                field=f"clients.{name}",
            )


def check(scenario: Scenario) -> tuple[World, Learner]:
    """Every check `run` makes before it simulates, without training: `flnet validate` calls
    this, `Run` builds through the same `build`. It reads the data, partitions it, builds the
    model and the World (sampling every per-client value) and checks the deadline; then the
    algorithm's own `check`, what its protocol checks before its first step (a gossip W's
    properties: the same errors and warnings)."""
    world, learner = build(scenario)
    before_first_step = getattr(ALGORITHMS[scenario.algorithm.name], "check", None)
    if before_first_step is not None:
        before_first_step(world, learner, scenario.algorithm)
    return world, learner


def check_deadline(scenario: Scenario, world: World, learner: Learner) -> None:
    """A deadline no client could ever meet (alone on every band, without fading) is a
    mistake in the scenario, not a run that learns nothing."""
    cfg = scenario.algorithm
    cohort, local = getattr(cfg, "cohort", None), getattr(cfg, "local", None)
    if cohort is None or local is None or cohort.deadline_s is None:
        return
    model_bits = learner.charged.num_params * 32  # as charged (model.costs_as)
    if local.epochs is None:
        samples = local.steps * local.batch_size
    else:  # the fewest samples any client processes: a lower bound, so never a false alarm
        blocks = learner.data.blocks  # block-cyclic: a client's rows in any block
        sizes = (
            learner.num_samples
            if blocks is None
            else np.concatenate([learner.samples_in(m) for m in range(len(blocks.train))])
        )
        samples = local.epochs * int(
            ((sizes // local.batch_size) * local.batch_size if local.drop_last else sizes).min()
        )
    flops = samples * learner.flops_per_sample
    fastest = world.fastest_round_trip_s(model_bits, flops, model_bits, cohort.deadline_s)
    if cohort.deadline_s < fastest:
        raise ScenarioError(
            f"{cohort.deadline_s:g} s is shorter than the fastest possible round "
            f"({fastest:.4g} s: download, local work and upload of the fastest "
            "client, alone on the bands, without fading); no client could ever deliver",
            field="algorithm.cohort.deadline_s",
        )


def check_topology(scenario: Scenario, world: World) -> None:
    """A gossip graph that cannot be drawn (an Erdos-Renyi p too small to connect it) is a
    mistake in the scenario: draw it now, as the run will, so it fails before anything runs."""
    cfg = getattr(scenario.algorithm, "topology", None)
    if cfg is not None:
        n = world.num_clients
        xy = world.positions_m(np.arange(n)) if cfg.kind == "random_geometric" else None
        topology.from_config(cfg, n, world.generator(Stream.TOPOLOGY), xy_m=xy)


class Run:
    """One simulation: the world, its observers, and the algorithm's protocol."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        resume: bool = False,
        write: bool = True,
        observers: tuple = (),
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.output_dir = scenario.output_dir()
        self.write = write
        self.wall_start = time.perf_counter()
        device = resolve_device(scenario.device)
        ckpt = checkpoint.load(self.output_dir, device) if resume else None
        if resume and ckpt is None:
            raise FlnetError(f"nothing to resume: {self.output_dir} has no {checkpoint.FILE}")
        # the input files' digests, once: checked on resume and kept in each checkpoint
        self.inputs = checkpoint.input_digests(input_files(scenario)) if write else {}
        self.warnings: list[str] = []  # what the run warned of (`warnings_noted`), once each
        if ckpt is not None:
            check_resumable(ckpt, scenario, self.output_dir, self.inputs)
        self.world, self.learner = build(scenario, start_time_s=ckpt.now_s if ckpt else 0.0)
        self.partition = self.learner.data.label_histogram()
        if write:
            output.remove_stale_tables(self.output_dir, scenario.output.format)
            write_inputs(scenario, self.partition, self.output_dir)
        evaluator = Evaluator(self.learner.model, self.learner.data, threads=scenario.run.threads)
        self.recorder = Recorder(scenario, evaluator, self.learner)
        self.stop_rules = StopRules(scenario)
        self.target = TargetAccuracy(scenario.run.target_accuracy, self.recorder)
        chain: list[Observer] = [self.stop_rules, self.recorder, self.target]
        rows: dict[str, dict] = {}
        if ckpt is None:
            tables = TableJournal(self.output_dir)
        else:  # the per-client rows as of the checkpoint; what follows it is cut off
            tables, rows = TableJournal.resume(self.output_dir, ckpt.tables)
        self.checkpointer = (
            Checkpointer(
                self, scenario.run.checkpoint_every, scenario.run.checkpoint_interval_s, tables
            )
            if write
            else None
        )
        if self.checkpointer is not None:
            chain.append(self.checkpointer)
        self.world.observers = [*chain, *observers]
        self.algorithm = ALGORITHMS[scenario.algorithm.name]
        if ckpt is None:
            self.state = self.algorithm.init(self.learner, scenario.algorithm)
            if write:  # journals left by an earlier run in this folder are not this run's
                remove_journal(self.output_dir / checkpoint.JOURNAL)
                journal.remove(self.output_dir)
            self.world.start()
            try:
                # as the steps that follow are evaluated
                with threads_for(self.learner, scenario.run.threads):
                    # step 0, the initial model: its checkpoint is the run's first write
                    self.world.publish(self.algorithm.progress(self.state))
            except BaseException as e:
                if not write:
                    raise
                ended = ended_early(self, e)
                if ended is e:
                    raise
                raise ended from None
        else:
            if say is not None:
                say(f"resuming {self.output_dir} from round {ckpt.round}")
            self.world.ledger.load_journal(
                self.output_dir / checkpoint.JOURNAL, ckpt.ledger_rows, ckpt.ledger_bytes
            )
            self.world.events = ckpt.events
            if self.world.resources is not None and ckpt.resources is not None:
                self.world.resources.restore(ckpt.resources)
            try:
                self.learner.load_state_dict(rows)
                self.state = self.algorithm.State(**ckpt.state)
            except (KeyError, TypeError, ValueError, RuntimeError) as e:
                raise FlnetError(
                    f"the checkpoint in {self.output_dir} does not fit this "
                    f"scenario's algorithm or model ({e.__class__.__name__}: {e}); "
                    "start afresh with --force"
                ) from None
            self.recorder.rows = list(ckpt.records)
            if ckpt.stop_reason == "diverged":  # it ended there: say why again
                self.recorder.resumed_diverged(ckpt.round)
            if self.checkpointer is not None:
                self.checkpointer.saved_round = ckpt.round
            self.world.stop(
                "diverged"
                if ckpt.stop_reason == "diverged"
                else self.stop_rules.reason(self.world, ckpt.round) or self.target.reason()
            )
            self.world.start()

    def simulate(self) -> None:
        if self.world.stop_reason is None:
            env = self.world.env
            # Run until the protocol ends: timers it left behind (a deadline that was not
            # needed) must not move the clock past the last step.
            env.run(
                until=env.process(
                    self.algorithm.protocol(
                        self.world, self.learner, self.scenario.algorithm, self.state
                    )
                )
            )
        self.world.end()

    def result(
        self, status: str | None = None, *, ledger: bool = True, error: str | None = None
    ) -> Result:
        world, rec = self.world, self.recorder
        records = pd.DataFrame(rec.rows)
        summary = summarize(
            self.scenario,
            world,
            self.learner,
            rec,
            records,
            time.perf_counter() - self.wall_start,
            status,
        )
        if error is not None:
            summary["error"] = error
        if self.warnings:  # a sweep's table shows them in the point's note
            summary["warnings"] = list(self.warnings)
        if self.inputs:  # what a sweep started again checks a finished point against
            summary["inputs"] = self.inputs
        return Result(
            records,
            world.ledger.frame if ledger else None,
            summary,
            self.scenario,
            self.output_dir,
            self.partition,
        )

    def finish(self, result: Result) -> None:
        """The end of a run: its tables and summary, each on its own, then the final checkpoint.
        Raises WriteError naming what failed, why, and what was kept."""
        failed, kept = write_each(result)
        checkpointer = self.checkpointer
        final = checkpointer.final if checkpointer is not None else None
        if checkpointer is not None and final is not None:
            progress, now_s, stopping = final
            try:
                checkpointer.save_or_raise(self.world, progress, now_s, stopping)
                kept.append(f"{checkpoint.JOURNAL}, {checkpoint.FILE} (round {progress.step})")
            except OSError as e:
                failed.append(f"{e.filename}: {e.strerror or e}")
            except KeyboardInterrupt:
                if failed:
                    raise
                # the results on disk are the final ones: say so rather than mark them otherwise
                raise Interrupted(
                    f"stopped while writing the final checkpoint: the run's records, ledger and "
                    f"summary are complete in {self.output_dir}; " + self.kept_checkpoint(),
                    self.resumable(),
                ) from None
        if failed:
            raise WriteError(write_failure(self.output_dir, failed, kept, self.kept_checkpoint()))
        result.checkpoint_round = self.checkpointer.saved_round if self.checkpointer else None

    def abandon(self, status: str, error: str | None, *, checkpoint_said: bool = False) -> str:
        """A run that cannot go on (an error, a second Ctrl-C): write its records, ledger and
        summary so far, each on its own; say what is on disk (the checkpoint too, unless
        `checkpoint_said`: the error's message says it already)."""
        failed, kept = write_each(self.result(status, error=error))
        said = "" if checkpoint_said else self.kept_checkpoint()
        if failed:
            return write_failure(self.output_dir, failed, kept, said)
        return f"the records, ledger and summary so far are in {self.output_dir}" + (
            f"; {said}" if said else ""
        )

    def resumable(self) -> bool:
        return self.checkpointer is not None and self.checkpointer.saved_round is not None

    def kept_checkpoint(self) -> str:
        return self.checkpointer.kept() if self.checkpointer is not None else ""


class Interrupted(KeyboardInterrupt):
    """A run stopped at once (a second Ctrl-C or SIGTERM, or Ctrl-C outside `flnet run`); the
    message says what was kept, `resumable` whether a checkpoint is there to resume from."""

    def __init__(self, message: str, resumable: bool) -> None:
        super().__init__(message)
        self.resumable = resumable


def check_resumable(
    ckpt: checkpoint.Checkpoint,
    scenario: Scenario,
    out: Path,
    inputs: dict[str, str | None] | None = None,
) -> None:
    """Refuse to resume from `ckpt` a run that would not continue its trajectory: another
    scenario, fewer rounds, or an input file whose bytes changed since the checkpoint (its
    digest, `inputs`: computed here when not given)."""
    changed = checkpoint.differences(ckpt.scenario, checkpoint.trajectory_fields(scenario))
    if changed:
        raise ScenarioError(
            f"the checkpoint in {out} was written by a scenario that differs in "
            f"{', '.join(changed)}; only run and output may change on resume"
        )
    if scenario.run.rounds < ckpt.round:
        raise ScenarioError(
            f"{scenario.run.rounds} rounds is below the checkpoint's round {ckpt.round}: a "
            "resumed run cannot end before where it resumes",
            field="run.rounds",
        )
    changed = changed_inputs(ckpt.inputs, scenario, inputs)
    if changed:
        raise ScenarioError(
            f"{input_files(scenario).get(changed[0])} changed (or cannot be read) since the "
            f"checkpoint in {out} was written: a resumed run would mix two inputs; start afresh "
            "with --force",
            field=changed[0],
        )


def changed_inputs(
    recorded: dict[str, str | None] | None,
    scenario: Scenario,
    now: dict[str, str | None] | None = None,
) -> list[str]:
    """The fields naming input files whose bytes differ from the digests `recorded` (a
    checkpoint's or a finished run's summary; None: kept before digests were, so nothing is
    checked), digests `now` computed here when not given."""
    if not recorded:
        return []
    now = checkpoint.input_digests(input_files(scenario)) if now is None else now
    return [name for name, digest in sorted(recorded.items()) if now.get(name) != digest]


def resume_problem(scenario: Scenario) -> str | None:
    """Why `run(scenario, resume=True)` would refuse to continue the run in the scenario's
    output folder (no checkpoint, a damaged one, or one another scenario wrote); None if it
    would not. Reads the checkpoint only; sweeps ask before resuming an unfinished point."""
    out = scenario.output_dir()
    try:
        ckpt = checkpoint.load(out, torch.device("cpu"))
        if ckpt is None:
            return f"{out} has no {checkpoint.FILE}"
        check_resumable(ckpt, absolute_paths(scenario), out)
    except FlnetError as e:
        return str(e)
    return None


def run(
    scenario: Scenario | str | Path,
    overrides: list[str] | dict | None = None,
    *,
    write: bool = True,
    resume: bool = False,
    force: bool = False,
    observers: tuple = (),
    say: Callable[[str], None] | None = None,
) -> Result:
    """Simulate a scenario (object or YAML path) and return its records and ledger.

    With `write`, the results go to the scenario's output folder (`flnet.output`): a folder
    that already holds a run is refused unless `resume=True` (continue from its checkpoint; one
    must be there) or `force=True` (delete that run's files first). `say` receives messages
    for the user (the round a resumed run starts from).
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario, overrides)
    elif overrides:
        scenario = load_scenario(data=scenario.model_dump(mode="json"), overrides=overrides)
    with arrow_allocates_with_malloc(), warnings_noted(units.implausible(scenario)) as noted:
        if not write:
            sim = Run(scenario, write=False, observers=observers)
            sim.warnings = noted
            return _simulate(sim, write=False)
        with output.open_folder(scenario.output_dir(), resume=resume, force=force) as folder:
            # absolute folder and data paths go into scenario.yaml: --resume from anywhere
            # finds the run and its data
            scenario = absolute_paths(scenario).model_copy(
                update={"output": scenario.output.model_copy(update={"dir": str(folder.path)})}
            )
            try:
                sim = Run(scenario, resume=resume, observers=observers, say=say)
            except BaseException:
                folder.discard_if_unused()  # a run refused before it wrote leaves no folder
                raise
            sim.warnings = noted
            return _simulate(sim, write=True)


@contextlib.contextmanager
def warnings_noted(loaded: list[str]) -> Iterator[list[str]]:
    """The run's warnings, for its summary: `loaded` (the unit warnings shown when the scenario
    was loaded) and every flnet warning emitted inside (a topology's missing property, an
    unstable beta), shown as usual, once per run. They pass the warnings filter every time, so
    a sweep's worker that runs two points with the same warning notes it in both."""
    noted = list(dict.fromkeys(loaded))
    with warnings.catch_warnings():
        shown = warnings.showwarning
        for category in (UnitWarning, TopologyWarning):
            warnings.simplefilter("always", category)

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if issubclass(category, (UnitWarning, TopologyWarning)):
                if str(message) in noted:
                    return
                noted.append(str(message))
            shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield noted


def input_files(scenario: Scenario) -> dict[str, str]:
    """The files besides the data sets' own that a run reads (an npz features file,
    availability and capacity traces), by the field naming each."""
    files = {}
    features = scenario.data.features
    if features is not None and features.kind == "npz":
        files["data.features.path"] = features.path
    for name in ("availability", "capacity_trace"):
        path = getattr(getattr(scenario.clients, name), "path", None)
        if path is not None:
            files[f"clients.{name}.path"] = path
    return files


def absolute_paths(scenario: Scenario) -> Scenario:
    """The scenario with its file paths (data.root, an npz features file, availability and
    capacity traces) made absolute against the current directory."""
    data = scenario.data
    update: dict[str, Any] = {"root": os.path.abspath(data.root)}
    if data.features is not None and data.features.kind == "npz":
        path = os.path.abspath(data.features.path)
        update["features"] = data.features.model_copy(update={"path": path})
    clients = scenario.clients
    traced: dict[str, Any] = {}
    for name in ("availability", "capacity_trace"):
        section = getattr(clients, name)
        if getattr(section, "path", None) is not None:
            traced[name] = section.model_copy(update={"path": os.path.abspath(section.path)})
    return scenario.model_copy(
        update={
            "data": data.model_copy(update=update),
            "clients": clients.model_copy(update=traced),
        }
    )


@contextlib.contextmanager
def arrow_allocates_with_malloc() -> Iterator[None]:
    """Arrow's default memory pool is the system allocator inside, unless the user chose one
    (ARROW_DEFAULT_MEMORY_POOL); as it was after. A run's tables (the partition, the records:
    pandas keeps their strings in Arrow) take kilobytes, but the first allocation from pyarrow's
    own default, mimalloc, sets up its arenas, which in some processes costs more than every
    table of a short run together (`bench.py --child`'s build part)."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        yield
        return
    chosen = pyarrow.default_memory_pool()
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    try:
        yield
    finally:
        pyarrow.set_memory_pool(chosen)


YOUNG_COLLECTION_ALLOCATIONS = 20_000


@contextlib.contextmanager
def collector_sees_only_the_run() -> Iterator[None]:
    """Keep what is alive when the simulation starts (the modules of torch, pandas and pydantic,
    the data, the world: some 300,000 objects) out of the garbage collector's sight while it
    runs, so a full collection scans only what the run allocates. One full pass over them cost
    W1 a tenth of its wall time, and a long run pays it again and again. The youngest
    generation is collected every YOUNG_COLLECTION_ALLOCATIONS allocations, not 700: a round
    allocates thousands of short-lived objects, and each collection has its fixed cost. Undone
    at the end, so what they leave behind is collected as usual; left alone if the caller
    froze objects."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_COLLECTION_ALLOCATIONS), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@contextlib.contextmanager
def threads_for(learner: Learner, cohort_threads: int = 1) -> Iterator[None]:
    """One torch thread for a small model on the CPU (a thread pool costs more than it gives
    there; on a loaded machine its spinning threads cost the initial evaluation tens of
    milliseconds), the caller's threads again afterwards. A cohort trained in several calls
    is split over `cohort_threads` threads (`run.threads`), each call on one torch thread."""
    threads = torch.get_num_threads()
    learner.trainer.threads = cohort_threads
    if learner.model.num_params < SMALL_MODEL_PARAMS and learner.data.x_train.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _simulate(sim: Run, write: bool) -> Result:
    with threads_for(sim.learner, sim.scenario.run.threads), collector_sees_only_the_run():
        return _simulate_and_write(sim, write)


def _simulate_and_write(sim: Run, write: bool) -> Result:
    try:
        sim.simulate()
        result = sim.result()
    except BaseException as e:
        if not write:
            raise
        ended = ended_early(sim, e)
        if ended is e:
            raise
        raise ended from None
    if not write:
        result.output_dir = None
        return result
    try:
        sim.finish(result)
    except Interrupted:
        raise
    except KeyboardInterrupt:  # while writing the end: the tables may be the final ones
        raise Interrupted(
            "stopped at once while writing the results: " + sim.abandon("interrupted", None),
            sim.resumable(),
        ) from None
    return result


def ended_early(sim: Run, e: BaseException) -> BaseException:
    """What a writing run stopped by `e` before its end raises, once its records, ledger and
    summary so far are written (status interrupted for a Ctrl-C or SIGTERM, failed with the
    error otherwise, so no summary is left saying running): an Interrupted, a WriteError
    saying what is on disk, or `e` itself."""
    if isinstance(e, KeyboardInterrupt):
        why = f" ({e})" if isinstance(e, StoppedAtOnce) else ""
        note = sim.abandon("interrupted", None)
        return Interrupted(f"stopped at once{why}: {note}", sim.resumable())
    said = isinstance(e, WriteError) and sim.kept_checkpoint() in str(e)
    note = sim.abandon("failed", f"{e.__class__.__name__}: {e}", checkpoint_said=said)
    return WriteError(f"{e}. {note[:1].upper()}{note[1:]}") if isinstance(e, WriteError) else e


def summarize(
    scenario: Scenario,
    world: World,
    learner: Learner,
    recorder: Recorder,
    records: pd.DataFrame,
    wall_s: float,
    status: str | None,
) -> dict:
    last = records.iloc[-1].to_dict() if len(records) else {}
    reason = world.stop_reason
    if status is None:
        status = {"diverged": "diverged", INTERRUPTED: "interrupted"}.get(reason or "", "completed")
    return {
        "scenario": scenario.name,
        "algorithm": scenario.algorithm.name,
        "seed": scenario.seed,
        **optimizer_labels(scenario),
        "status": status,
        "stop_reason": reason,
        "diverged_round": recorder.diverged_round,
        "diverged_by": recorder.diverged_by,  # the rule of run.divergence that fired
        "rounds": int(last.get("round", 0)),
        # a diverged run has no final model: the last finite figure would read as its result
        "final_test_accuracy": None if status == "diverged" else last.get("test_accuracy"),
        "best_test_accuracy": float(records["test_accuracy"].max()) if len(records) else None,
        "sim_time_s": float(world.now),
        "energy_j": world.ledger.total_energy_j,
        "bits_up": world.ledger.bits["upload"],
        "bits_down": world.ledger.bits["download"],
        "bits_d2d": world.ledger.bits["d2d"],
        **(world.class_energy.figures() if world.class_energy is not None else {}),
        # gossip: the spectral gap 1 - |lambda_2| of W (the last iteration's, time-varying)
        **({"spectral_gap": float(gap)} if pd.notna(gap := last.get("spectral_gap")) else {}),
        "model_params": learner.model.num_params,
        "training_flops_per_sample": learner.model.training_flops_per_sample(),
        **charged_labels(learner),
        "wall_s": wall_s,
        "output_dir": str(scenario.output_dir()),
    }


def write_inputs(scenario: Scenario, partition: pd.DataFrame, out: Path) -> None:
    """What the run starts from: the resolved scenario and the partition, written once."""
    table = out / f"partition.{scenario.output.format}"
    text = yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)
    for path, write in (
        (table, lambda: output.write_table(partition, table)),
        (out / "scenario.yaml", lambda: output.write_text(out / "scenario.yaml", text)),
    ):
        try:
            write()
        except OSError as e:  # Arrow's errors name no file: name the one being written
            raise WriteError(f"could not write {path}: {e.strerror or e}") from None


def write_results(result: Result) -> Path:
    """Write the records, the ledger (when the result has it) and the summary; each file
    atomically. Raises the first OSError."""
    for path, write in _result_files(result):
        write(path)
    return result.output_dir or result.scenario.output_dir()


def write_each(result: Result) -> tuple[list[str], list[str]]:
    """Write every file of `result`, each whatever happens to the others: (what failed with
    why, what was written)."""
    failed, kept = [], []
    for path, write in _result_files(result):
        try:
            write(path)
            kept.append(path.name)
        except OSError as e:
            failed.append(f"{path}: {e.strerror or e}")
    return failed, kept


def write_failure(out: Path, failed: list[str], kept: list[str], checkpoint_kept: str) -> str:
    return (
        f"could not write {'; '.join(failed)}. Written in {out}: "
        f"{', '.join(kept) if kept else 'nothing'}"
        + (f"; {checkpoint_kept}" if checkpoint_kept else "")
    )


def _result_files(result: Result) -> list[tuple[Path, Callable[[Path], None]]]:
    """Records, ledger, then the summary: a summary on disk that says the run finished comes
    after its tables (a sweep counts such a folder as a finished point). Each is written
    whatever happened to the others."""
    out = result.output_dir or result.scenario.output_dir()
    fmt = result.scenario.output.format
    summary = output.summary_text(result.summary)
    files: list[tuple[Path, Callable[[Path], None]]] = [
        (out / f"records.{fmt}", lambda p: output.write_table(result.records, p))
    ]
    ledger = result.ledger
    if ledger is not None:
        files.append((out / f"ledger.{fmt}", lambda p: output.write_table(ledger, p)))
    files.append((out / "summary.json", lambda p: output.write_text(p, summary)))
    return files
