"""Command line: ``flnet run``, ``flnet sweep``, ``flnet analyze``, ``flnet plot``,
``flnet report``, ``flnet reproduce``, ``flnet validate``, ``flnet calibrate``, ``flnet traces``,
``flnet schema``.

Only what a command needs is imported, inside it: ``--help``, ``--version`` and ``schema`` never
load torch."""

from __future__ import annotations

import argparse
import atexit
import os
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from flnet import __version__
from flnet.base.userfiles import printable
from flnet.errors import FlnetError, TopologyWarning, UnitWarning
from flnet.output import WriteError
from flnet.papers import PAPERS

if TYPE_CHECKING:  # for annotations only: importing these at start would load torch
    import pandas as pd

    from flnet.scenario import Scenario
    from flnet.sim.world import Progress as Step
    from flnet.sim.world import World


def escape(text: str) -> str:
    """A user's text (a message quoting names, paths, values) for rich: its markup and its
    control characters escaped, so it prints as written and cannot drive the terminal."""
    return escape_markup(printable(text))


err_console = Console(stderr=True, soft_wrap=True)  # messages stay one line (paths whole)


class ProgressBar:
    """Observer that shows rounds done and the latest accuracy, simulated time and joules: a
    live bar on a terminal, otherwise (a log file, a pipe) one line per tenth of the run."""

    def __init__(self, progress: Progress, rounds: int, console: Console) -> None:
        self.progress = progress
        self.rounds = rounds
        self.console = console
        self.lines = not console.is_terminal
        self.task = progress.add_task("starting", total=rounds)
        self.next_line = 0

    def on_start(self, world: World) -> None:
        pass

    def on_progress(self, world: World, progress: Step, stopping: str | None) -> str | None:
        from flnet.runner import Recorder  # loaded by then; importing it at start loads torch

        rows = next(o.rows for o in world.observers if isinstance(o, Recorder))
        acc = f"acc {rows[-1]['test_accuracy']:.3f}" if rows else ""
        figures = f"{acc}  {world.now:10.2f} sim-s  {world.ledger.total_energy_j:10.3g} J"
        if not self.lines:
            self.progress.update(self.task, completed=progress.step, description=figures)
        elif progress.step >= self.next_line or stopping is not None:
            self.console.print(f"round {progress.step}/{self.rounds}  {figures}", highlight=False)
            tenth = max(self.rounds // 10, 1)
            self.next_line = (progress.step // tenth + 1) * tenth
        return None

    def on_end(self, world: World, reason: str | None) -> None:
        pass


def summary_table(summary: dict) -> Table:
    table = Table(
        title=escape(f"{summary['scenario']} ({summary['algorithm']}, seed {summary['seed']})")
    )
    table.add_column("quantity")
    table.add_column("value", justify="right")
    acc = summary.get("final_test_accuracy")
    rows = [
        ("status", f"{summary['status']} ({summary['stop_reason']})"),
        ("rounds", str(summary["rounds"])),
        ("final test accuracy", "-" if acc is None else f"{acc:.4f}"),
        ("simulated time", f"{summary['sim_time_s']:.3f} s"),
        ("energy", f"{summary['energy_j']:.4g} J"),
        ("bits up / down", f"{summary['bits_up']:.4g} / {summary['bits_down']:.4g}"),
        *([("bits device to device", f"{d2d:.4g}")] if (d2d := summary.get("bits_d2d")) else []),
        *([("spectral gap of W", f"{gap:.4g}")] if (gap := summary.get("spectral_gap")) else []),
        ("wall time", f"{summary['wall_s']:.1f} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def cmd_run(args: argparse.Namespace) -> int:
    from flnet import divergence
    from flnet.runner import Interrupted, run
    from flnet.scenario import load_scenario
    from flnet.stop import StopOnSignal

    overrides = list(args.set or [])
    if args.out:
        overrides.append(f"output.dir={args.out}")
    if args.rounds is not None:
        overrides.append(f"run.rounds={args.rounds}")
    scenario = load_scenario(args.file, overrides)
    if args.timing_only:
        return timing_only_run(scenario, args)
    stop = StopOnSignal()
    observers: tuple = (stop,)
    try:
        with (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console,
                disable=args.quiet or not err_console.is_terminal,
                transient=True,
            ) as progress,
            stop.installed(),
        ):
            if not args.quiet:
                observers = (ProgressBar(progress, scenario.run.rounds, err_console), stop)
            result = run(
                scenario,
                observers=observers,
                resume=args.resume,
                force=args.force,
                say=lambda text: err_console.print(escape(text), highlight=False),
            )
    except Interrupted as e:
        err_console.print(f"[bold red]{escape(str(e))}[/]", highlight=False)
        if e.resumable:
            err_console.print(f"continue with: {escape(resume_command(args))}", highlight=False)
        return 130
    Console().print(summary_table(result.summary))
    print(printable(f"results in {result.output_dir}/"))
    if result.summary["status"] == "interrupted":
        err_console.print(
            f"[bold]interrupted[/] ({stop.signal}) at round {result.checkpoint_round}: the "
            f"checkpoint of that round, the records, ledger and summary so far are in "
            f"{escape(str(result.output_dir))}",
            highlight=False,
        )
        err_console.print(f"continue with: {escape(resume_command(args))}", highlight=False)
        return 130
    if result.summary["status"] == "diverged":
        rule = result.summary.get("diverged_by")
        kept = (
            "the records up to the last finite round are kept"
            if rule in (None, divergence.NON_FINITE)
            else "the records up to that round are kept"
        )
        err_console.print(
            f"[bold red]diverged[/] at round {result.summary['diverged_round']} "
            f"({rule or divergence.NON_FINITE}): "
            f"{divergence.explained(rule, result.scenario.run.divergence)}; {kept}",
            highlight=False,
        )
        return 3
    return 0


def timing_only_run(scenario: Scenario, args: argparse.Namespace) -> int:
    """`flnet run --timing-only`: the time side alone (flnet.reuse.timing_only)."""
    from flnet.reuse import timing_only

    if args.resume:
        raise FlnetError("a timing-only run takes no checkpoints: it cannot be resumed")
    result = timing_only(scenario, force=args.force)
    Console().print(summary_table(result.summary))
    print(printable(f"timing-only (no training, no accuracy): results in {result.output_dir}/"))
    return 0


def resume_command(args: argparse.Namespace) -> str:
    """The command that continues this run, as the user would type it."""
    words = ["flnet", "run", args.file]
    for item in args.set or []:
        words += ["--set", item]
    if args.rounds is not None:  # the checkpoint's scenario has them; the file may not
        words += ["--rounds", str(args.rounds)]
    if args.out:
        words += ["--out", args.out]
    if args.quiet:
        words.append("--quiet")
    return shlex.join([*words, "--resume"])


def cmd_sweep(args: argparse.Namespace) -> int:
    from flnet.cluster import ClusterOptions
    from flnet.sweeps import parse_grid, parse_seeds, run_sweep, spec_from

    spec = spec_from(
        parse_grid(args.grid or []),
        [parse_grid(args.paired, "--paired")] if args.paired else None,
        parse_seeds(args.seeds) if args.seeds else None,
        list(args.set or []),
    )
    if args.status:
        return sweep_status_text(args, spec)
    if args.ray is not None and args.slurm:
        raise FlnetError("--ray and --slurm are two ways to run the points; give one")
    backend = "ray" if args.ray is not None else "slurm" if args.slurm else "local"
    address = None if args.ray in (None, "local") else args.ray
    cluster = ClusterOptions(
        args.cpus_per_point,
        args.gpus_per_point,
        partition=args.partition,
        time_min=args.slurm_time,
        points_per_task=args.points_per_task,
        max_parallel=args.max_parallel,
    ).check()
    with Progress(
        TextColumn("points"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err_console,
        disable=args.quiet,
        transient=True,
    ) as progress:
        task = progress.add_task("points", total=None)

        def on_progress(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        try:
            result = run_sweep(
                args.file,
                spec,
                workers=args.workers,
                out_dir=args.out,
                backend=backend,
                address=address,
                on_progress=on_progress,
                reuse_runs=not args.no_reuse,
                cluster=cluster,
            )
        except KeyboardInterrupt:
            progress.stop()
            err_console.print(
                "interrupted: the points that finished are kept; run the same "
                "flnet sweep command again to run the others (finished points "
                "are not rerun)",
                soft_wrap=True,
            )
            return 130
    table = result.table
    print(printable(sweep_text(table)))
    for row in table[~table.status.isin(("completed", "diverged"))].to_dict("records"):
        where = ", ".join(f"{k}={row[k]}" for k in spec_columns(table))
        name = row["point"] if isinstance(row["point"], str) else "-"
        err_console.print(
            escape(f"point {name} ({where}): {row['status']}: {row['error']}"),
            highlight=False,
            soft_wrap=True,
        )
    for row in table[table.note.notna()].to_dict("records"):
        where = ", ".join(f"{k}={row[k]}" for k in spec_columns(table))
        err_console.print(
            escape(f"note: point {row['point']} ({where}): {row['note']}"),
            highlight=False,
            soft_wrap=True,
        )
    for line in reuse_lines(table):
        err_console.print(escape(line), highlight=False, soft_wrap=True)
    for warning in result.warnings:
        err_console.print(f"[bold yellow]warning:[/] {escape(warning)}", soft_wrap=True)
    bad = (~table.status.isin(("completed", "diverged"))).sum()
    print(
        f"{len(table)} points: {len(result.ran)} run now, {len(result.skipped)} already "
        f"finished, {bad} not finished; wall time {result.wall_s:.1f} s"
    )
    print(
        printable(
            f"tables in {result.out}/points.csv and {result.out}/records.parquet; each point "
            f"in {result.out}/<point>/"
        )
    )
    return 1 if bad else 0


SWEEP_SHOWN = ("status", "rounds", "final_test_accuracy", "sim_time_s", "energy_j")


def sweep_status_text(args: argparse.Namespace, spec: Any) -> int:
    """``flnet sweep ... --status``: each point's status from its folder, nothing run; exit
    status 0 when every point has finished."""
    from flnet.sweep_status import sweep_status

    table, out = sweep_status(args.file, spec, args.out)
    print(sweep_text(table))
    counts = table.status.value_counts(sort=False)
    print(f"{len(table)} points in {out}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    return 0 if table.status.isin(("completed", "diverged")).all() else 1


def reuse_lines(table: pd.DataFrame) -> list[str]:
    """What trajectory reuse did: how many points replayed how many training runs, and why
    the others that could have ran in full (one line per reason)."""
    if "reused_from" not in table:
        return []
    replayed = table.reused_from.notna()
    lines = []
    if replayed.any():
        lines.append(
            f"reuse: {int(replayed.sum())} points replayed the training of "
            f"{table.reused_from[replayed].nunique()} trajectory runs (column reused_from)"
        )
    full = table.reuse_note.fillna("").str.startswith("ran in full")
    for note, n in table.reuse_note[full].value_counts(sort=False).items():
        lines.append(f"reuse: {n} points {note}")
    return lines


def spec_columns(table: pd.DataFrame) -> list[str]:
    """The swept columns of a points table (between `point` and `status`)."""
    cols = list(table.columns)
    return cols[cols.index("point") + 1 : cols.index("status")]


def sweep_text(table: pd.DataFrame) -> str:
    """The points table as plain text: full headers, numbers to 4 significant digits."""
    reused = ["reused_from"] if "reused_from" in table and table.reused_from.notna().any() else []
    shown = table[["point", *spec_columns(table), *SWEEP_SHOWN, *reused]]
    return shown.to_string(
        index=False, na_rep="-", float_format=lambda v: f"{v:.4g}", max_colwidth=40
    )


def cmd_analyze(args: argparse.Namespace) -> int:
    from flnet.analysis import read_records
    from flnet.comparison import compare
    from flnet.plot import as_results

    src = Path(args.results[0])
    if len(args.results) == 1 and src.is_file():  # a records file
        results: Any = [as_results(read_records(src))]
    else:
        results = args.results
    cmp = compare(
        *results,
        target=args.target,
        metric=args.metric,
        cost=args.cost,
        choose=args.tau,
        labels=_labels(args.label),
        by=args.by,
    )
    if args.out:
        out = Path(args.out)
    elif len(args.results) == 1:
        out = src if src.is_dir() else src.parent
    else:
        raise FlnetError(
            "several results folders given: choose where to write the tables with --out"
        )
    print(cmp.text(), end="")
    cmp.write(out)
    print(f"\ntables in {out}/")
    return 0


def _labels(items: list[str] | None) -> dict[str, str]:
    """--label NAME=RUN, repeatable: {name: folder}."""
    out = {}
    for item in items or ():
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise FlnetError(f"--label {item}: expected NAME=RUN, e.g. --label FedAvg=runs/fedavg")
        out[name] = folder
    return out


def cmd_plot(args: argparse.Namespace) -> int:
    from flnet.plot import check_target, default_output, load_results, make_plots

    out = Path(args.output) if args.output else default_output(args.results, "plots")
    check_target(args.target)
    res = load_results(*args.results, labels=_labels(args.label), by=args.by)
    written = make_plots(res, out, target=args.target, only=args.only, fmt=args.format)
    for path in written.values():
        print(path)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from flnet.plot import check_target, default_output, load_results
    from flnet.report import screenshot, write_report

    out = Path(args.output) if args.output else default_output(args.results, "report.html")
    check_target(args.target)
    res = load_results(*args.results, labels=_labels(args.label), by=args.by)
    path = write_report(res, out, target=args.target)
    print(path)
    if args.screenshot:
        print(screenshot(path, args.screenshot))
    return 0


def cmd_reproduce(args: argparse.Namespace) -> int:
    import pandas as pd

    from flnet.papers import reproduce

    written = reproduce(args.paper, args.output, smoke=args.smoke, seeds=args.seeds)
    claims = pd.read_csv(written["claims.csv"])
    table = Table(title=f"{args.paper}: the paper's claims, checked seed by seed")
    for name in ("id", "claim", "holds"):
        table.add_column(name, overflow="fold")
    for row in claims.itertuples(index=False):
        table.add_row(str(row.id), str(row.claim), str(row.holds))
    Console().print(table)
    print(written["report.md"])
    print(written["report.html"])
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    """Each file through every check `run` makes before simulating (runner.check); one error
    message per bad file, exit 2 if any."""
    from flnet.runner import check
    from flnet.scenario import load_scenario

    def refuse(path: str, e: FlnetError) -> None:
        text = str(e) if str(e).startswith(str(path)) else f"{path}: {e}"
        err_console.print(f"[bold red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)

    failed = False
    for path in args.files:
        try:
            if _has_sweep(path):
                failed |= not _validate_sweep(path, args.set, refuse)
                continue
            scenario = load_scenario(path, args.set)
            _, learner = check(scenario)
        except FlnetError as e:
            refuse(path, e)
            failed = True
            continue
        charged = learner.charged
        as_ = f", costed as {charged.name}'s {charged.num_params:,}" if charged.name else ""
        print(
            printable(
                f"{path}: ok ({scenario.algorithm.name}, {scenario.clients.count} clients, "
                f"{learner.model.num_params:,} parameters{as_})"
            )
        )
    return 2 if failed else 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Time the scenario's model training here and print the compute speed that matches."""
    from flnet.calibrate import measure, setting
    from flnet.scenario import load_scenario
    from flnet.sweeps import load_base

    base, _ = load_base(args.file)  # a sweep file: its scenario, without the sweep
    scenario = load_scenario(data=base, overrides=args.set)
    m = measure(scenario, args.repeats)
    fpc = scenario.clients.flops_per_cycle
    print(
        f"{m.works} local works of one client ({m.samples / m.works:g} sample gradients each): "
        f"{m.flops:.4g} training FLOPs of the model trained in {m.seconds:.4g} s on this host "
        f"(one torch thread): {m.flops_per_s:.4g} FLOP/s"
    )
    if scenario.model.costs_as:
        print(f"(model.costs_as = {scenario.model.costs_as}: its FLOPs are charged at this rate)")
    given = (
        f"clients.flops_per_cycle = {fpc.value:g}" if hasattr(fpc, "value") else "1 FLOP a cycle"
    )
    print(f"simulated local work takes as long as here with {given} and:")
    print("  " + " ".join(f"--set {k}={v:.6g}" for k, v in setting(scenario, m).items()))
    return 0


def _has_sweep(path: str) -> bool:
    from flnet.scenario import resolve

    return "sweep" in resolve(path)


def _validate_sweep(
    path: str, overrides: list[str], refuse: Callable[[str, FlnetError], None]
) -> bool:
    """Every point of a file's `sweep:` section through run's checks; each bad point is
    reported with its swept values. True when all are fine."""
    from flnet.runner import check
    from flnet.scenario import load_scenario
    from flnet.sweeps import combine, load_base, plan, spec_from

    base, spec = load_base(path)
    points = plan(base, combine(spec, spec_from(fixed=list(overrides or []))))
    bad = 0
    for p in points:
        where = ", ".join(f"{k}={v}" for k, v in p.values.items())
        said: list[warnings.WarningMessage] = []
        try:
            if p.error is not None:
                raise FlnetError(p.error)
            with warnings.catch_warnings(record=True) as said:
                for category in (UnitWarning, TopologyWarning):
                    warnings.simplefilter("always", category)
                check(load_scenario(data=p.data))
        except FlnetError as e:
            refuse(path, FlnetError(f"sweep point ({where}): {e}"))
            bad += 1
        for w in said:  # each warning names its point
            text = f"sweep point ({where}): {w.message}"
            named = issubclass(w.category, (UnitWarning, TopologyWarning))
            warnings.warn_explicit(text if named else w.message, w.category, w.filename, w.lineno)
    if not bad:
        print(printable(f"{path}: ok (a sweep of {len(points)} points, each checked)"))
    return not bad


def cmd_schema(args: argparse.Namespace) -> int:
    from flnet.scenario import json_schema

    text = json_schema()
    if args.output:
        Path(args.output).write_text(text + "\n")
    else:
        print(text)
    return 0


def cmd_traces_fedscale(args: argparse.Namespace) -> int:
    from flnet.fedscale import convert

    for path in convert(args.availability, args.capacity, Path(args.out), force=args.force):
        print(printable(f"wrote {path}"))
    return 0


def _results_parser(
    sub: Any, name: str, help: str, *, output: tuple[str, str], target: str
) -> argparse.ArgumentParser:
    """A command that reads results folders: RESULTS..., -o/--output and --target."""
    p = sub.add_parser(name, help=help)
    p.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="run folders, sweep folders or globs of them, compared side by side",
    )
    p.add_argument("-o", "--output", metavar=output[0], help=output[1])
    p.add_argument(
        "--target",
        type=float,
        metavar="ACC",
        help=f"{target}, a fraction (default: the scenario's run.target_accuracy, else 0.9)",
    )
    _series_options(p)
    return p


def _series_options(p: argparse.ArgumentParser) -> None:
    """--label and --by: how runs form series and what a series is called."""
    p.add_argument(
        "--label",
        action="append",
        metavar="NAME=RUN",
        help="call the runs in folder RUN (one given) NAME (repeatable); by default a "
        "series is named by the fewest fields that tell it apart, or its scenario's label:",
    )
    p.add_argument(
        "--by",
        action="append",
        metavar="FIELD",
        help="one series per value of this scenario field, e.g. --by algorithm.name "
        "(repeatable); by default runs that differ only in their seed form a series",
    )


class _HelpFormatter(argparse.HelpFormatter):
    """argparse measures command names without their extra indent, so a name longer than the
    longest option wraps its help onto the next line; this counts the indent."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if action.help is not argparse.SUPPRESS:
            for sub in self._iter_indented_subactions(action):  # indented while iterating
                width = len(self._format_action_invocation(sub)) + self._current_indent
                self._action_max_length = max(self._action_max_length, width)


def parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(
        prog="flnet",
        formatter_class=_HelpFormatter,
        description="flnet: a discrete-event network-and-energy simulator for "
        "federated learning. `flnet COMMAND --help` tells more about each command.",
    )
    p.add_argument("--version", action="version", version=f"flnet {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    r = sub.add_parser("run", help="simulate a scenario and write its results")
    r.add_argument("file")
    r.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="override a field, e.g. --set algorithm.local.lr=0.1 (repeatable)",
    )
    r.add_argument("--out", help="output folder (default: output.dir, or runs/<name>)")
    r.add_argument("--rounds", type=int, metavar="R", help="run R rounds (sets run.rounds)")
    r.add_argument(
        "--timing-only",
        action="store_true",
        help="simulate times and energy only: no training, no accuracy (what-if questions)",
    )
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    again = r.add_mutually_exclusive_group()
    again.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the output folder from its checkpoint",
    )
    again.add_argument(
        "--force",
        action="store_true",
        help="replace the run in the output folder: delete its files first",
    )
    r.set_defaults(func=cmd_run)
    w = sub.add_parser("sweep", help="run a scenario over a grid of field values and seeds")
    w.add_argument("file", help="a scenario; its optional sweep: section gives grid, paired, seeds")
    w.add_argument(
        "--grid",
        action="append",
        metavar="FIELD=V1,V2,...",
        help="values for one field, e.g. --grid algorithm.local.steps=1,5,10 "
        "(repeatable: the sweep is every combination)",
    )
    w.add_argument(
        "--paired",
        action="append",
        metavar="FIELD=V1,V2,...",
        help="lists that move together, not crossed (repeatable; equal lengths)",
    )
    w.add_argument("--seeds", metavar="S1,S2,...", help="seeds, e.g. --seeds 0,1,2")
    w.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="fixed override for every point (repeatable)",
    )
    w.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes running points at once (0: in this process)",
    )
    w.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run the points as Ray tasks: on a new local Ray instance, or on the "
        "cluster at ADDRESS (e.g. auto, ray://host:10001); the scenario's files are sent "
        "to the nodes, the results written here",
    )
    w.add_argument(
        "--cpus-per-point",
        type=float,
        default=1.0,
        metavar="N",
        help="CPUs each point reserves on Ray or Slurm (its torch threads; default 1)",
    )
    w.add_argument(
        "--gpus-per-point",
        type=float,
        default=0.0,
        metavar="N",
        help="GPUs each point reserves on Ray or Slurm (0.5: two points share one; default 0)",
    )
    w.add_argument(
        "--slurm",
        action="store_true",
        help="run the points as Slurm job arrays (submitit; the sweep folder must be on "
        "the filesystem the nodes share); Ctrl-C cancels them, the same command resumes",
    )
    w.add_argument("--partition", help="Slurm partition for --slurm (default: the cluster's)")
    w.add_argument(
        "--slurm-time",
        type=int,
        default=60,
        metavar="MIN",
        help="time limit of each Slurm array task in minutes (default 60)",
    )
    w.add_argument(
        "--points-per-task",
        type=int,
        default=1,
        metavar="N",
        help="points each Slurm array task runs one after the other (default 1)",
    )
    w.add_argument(
        "--max-parallel",
        type=int,
        default=0,
        metavar="N",
        help="Slurm array tasks running at once (default: no limit)",
    )
    w.add_argument(
        "--status",
        action="store_true",
        help="show each point's status from the sweep folder and run nothing "
        "(give the same file, grid and --out as the sweep)",
    )
    w.add_argument(
        "--no-reuse",
        action="store_true",
        help="run every point in full (by default points that differ only in radio or "
        "device settings replay one training run where they can)",
    )
    w.add_argument("--out", help="sweep folder (default: runs/<name>-sweep)")
    w.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    w.set_defaults(func=cmd_sweep)
    a = sub.add_parser(
        "analyze", help="per series and run: cost to a target accuracy; best tau, Pareto front"
    )
    a.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="run folders, sweep folders or globs of them, or one records file",
    )
    a.add_argument(
        "--target",
        type=float,
        help="accuracy to reach, e.g. 0.9 (default: the scenario's run.target_accuracy, else 0.9)",
    )
    a.add_argument(
        "--metric",
        default="test_accuracy",
        help="accuracy column, e.g. client_accuracy_worst (default test_accuracy)",
    )
    a.add_argument(
        "--cost",
        default="joules",
        choices=("joules", "seconds", "rounds", "bits"),
        help="what the best tau minimises (default joules)",
    )
    a.add_argument(
        "--tau",
        "--choose",
        dest="tau",
        metavar="FIELD[,FIELD...]",
        help="the swept field to choose (default algorithm.local.steps, or "
        "algorithm.local.epochs where only that varies); several with commas are chosen "
        "together, e.g. --choose algorithm.local.steps,clients.cpu_hz,radio.tx_power_dbm",
    )
    a.add_argument("--out", help="where to write the tables (default: the results folder, if one)")
    _series_options(a)
    a.set_defaults(func=cmd_analyze)
    pl = _results_parser(
        sub,
        "plot",
        "figures of runs and sweeps side by side, each with the CSV of its data",
        output=("DIR", "folder for the figures (default: RESULTS/plots)"),
        target="test accuracy for the best-tau heatmap",
    )
    pl.add_argument(
        "--only",
        action="append",
        metavar="NAME",
        help="just this plot (repeatable): accuracy_vs_time, accuracy_vs_energy, "
        "accuracy_vs_rounds, energy_split, energy_by_device_class, best_tau, "
        "consensus_distance",
    )
    pl.add_argument(
        "--format",
        choices=("png", "svg", "pdf"),
        default="png",
        help="figure format (default png); each figure's data is also written as CSV",
    )
    pl.set_defaults(func=cmd_plot)
    rp = _results_parser(
        sub,
        "report",
        "one self-contained HTML report of a results folder",
        output=("FILE", "the HTML file (default: RESULTS/report.html)"),
        target="test accuracy of the to-target table",
    )
    rp.add_argument(
        "--screenshot",
        metavar="PNG",
        help="also save a screenshot of the report's first screen (needs selenium "
        "and Chromium with its driver)",
    )
    rp.set_defaults(func=cmd_report)
    rr = sub.add_parser(
        "reproduce",
        help="run a paper's CPU-scale reproduction; write its report (markdown and HTML)",
        description="Runs the paper's scenarios (scenarios/papers/PAPER/), checks every claim "
        "of the paper seed by seed and writes OUTPUT/PAPER/report.md and report.html with the "
        "paper's figures beside ours. Needs a checkout of the flnet repository.",
    )
    rr.add_argument("paper", choices=list(PAPERS))
    rr.add_argument(
        "--smoke", action="store_true", help="the tiniest version (seconds; what CI runs)"
    )
    rr.add_argument(
        "-o", "--output", default="runs/reproduce", help="folder (default: runs/reproduce)"
    )
    rr.add_argument("--seeds", type=int, metavar="N", help="seeds 0..N-1 (default 3; --smoke: 1)")
    rr.set_defaults(func=cmd_reproduce)
    v = sub.add_parser("validate", help="check scenario files as run would, without training")
    v.add_argument("files", nargs="+")
    v.add_argument("--set", action="append", metavar="FIELD=VALUE")
    v.set_defaults(func=cmd_validate)
    c = sub.add_parser(
        "calibrate", help="time the model's training here; print the clients.cpu_hz to match"
    )
    c.add_argument("file")
    c.add_argument("--set", action="append", metavar="FIELD=VALUE")
    c.add_argument("--repeats", type=int, default=5, help="local works to time (default 5)")
    c.set_defaults(func=cmd_calibrate)
    t = sub.add_parser("traces", help="convert device traces to flnet's trace formats")
    tsub = t.add_subparsers(dest="trace_format", required=True, metavar="FORMAT")
    fs = tsub.add_parser(
        "fedscale",
        help="FedScale's availability (and capacity) pickles -> availability.csv, capacity.csv",
        description="Convert FedScale's device traces (pickled dicts; loaded without running "
        "any code: only plain data is accepted) to flnet's CSV trace formats: "
        "OUT/availability.csv (for availability: {kind: trace, path: ...}) and "
        "OUT/capacity.csv (for clients.capacity_trace.path).",
    )
    fs.add_argument("availability", metavar="AVAIL.pkl", help="client_behave_trace")
    fs.add_argument(
        "capacity", metavar="CAPACITY.pkl", nargs="?", help="client_device_capacity (optional)"
    )
    fs.add_argument("-o", "--out", required=True, metavar="DIR", help="folder for the CSV files")
    fs.add_argument("--force", action="store_true", help="replace CSV files already in DIR")
    fs.set_defaults(func=cmd_traces_fedscale)
    s = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    s.add_argument("-o", "--output")
    s.set_defaults(func=cmd_schema)
    return p


def _terminate(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt  # SIGTERM ends a command like Ctrl-C (`run` stops more gently)


def show_unit_warnings() -> None:
    """Each unit (and topology) warning as one line on stderr, every time (not once per place
    in the code)."""

    shown = warnings.showwarning
    if getattr(shown, "flnet", False):  # installed already (main called twice in one process)
        return

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if issubclass(category, (UnitWarning, TopologyWarning)):
            err_console.print(
                f"[bold yellow]warning:[/] {escape(str(message))}", highlight=False, soft_wrap=True
            )
        else:
            shown(message, category, filename, lineno, file, line)

    show.flnet = True  # type: ignore[attr-defined]  # marks it as installed
    warnings.showwarning = show
    warnings.simplefilter("always", UnitWarning)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    show_unit_warnings()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return args.func(args)
    except WriteError as e:  # the run went on, but not all of its results are on disk
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        return 4
    except FlnetError as e:
        err_console.print(
            f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True
        )  # one line per offending field, however long
        return 2
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130
    except BrokenPipeError:  # `flnet analyze ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # as a shell reports SIGPIPE


def exit_now(rc: int) -> NoReturn:
    """End the process with `rc` as Python's own exit would, less the C library's teardown.

    Python's exit runs native destructors after the interpreter is gone, and pyarrow's thread
    pool can abort there ("terminate called without an active exception", SIGABRT) when one of
    its workers is still alive (apache/arrow#34314): a command that had succeeded, or had
    printed its one-line error, would end killed by a signal. So the Python-level part of exit
    runs here (other threads joined, `atexit` handlers such as multiprocessing's and Ray's,
    output flushed) and `os._exit` skips the native part: the results are on disk by then."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader left: as a shell reports SIGPIPE
            rc = rc or 141
        except OSError as e:  # a full disk under `> file`: say so, as Python's exit would
            rc = rc or 120
            os.write(2, f"error: could not write the output: {e}\n".encode())
    os._exit(rc)


def entry() -> NoReturn:
    """The `flnet` command."""
    exit_now(main())


if __name__ == "__main__":
    entry()
