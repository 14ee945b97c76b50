"""Sweeps: one scenario, many points (a grid, paired lists, seeds), each a full run.

A point is identified by a hash of its resolved scenario (every default filled in, output and
checkpoint settings left out), not by its place in the grid, and writes its own folder named by
that hash. Started again, a sweep skips the points whose folder holds a finished run (completed
or diverged) and reruns the others from scratch, so adding values to a grid reuses what was
computed. A point that is invalid, raises, or whose worker dies is a row with its status and
swept values; the other points and the combined tables are kept.

Swept values get the field's type from the schema (``1e-3`` is a float for a float field); a
value the field cannot hold refuses the whole sweep at once, naming it, while a combination
that is inconsistent (``sps`` with an ``lr``) is reported and skipped.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd
import yaml
from pydantic import ValidationError

from flnet import reuse
from flnet import workers as pool
from flnet.base import yaml_text
from flnet.cluster import ClusterOptions
from flnet.columns import REUSE_COLUMNS, SUMMARY_COLUMNS
from flnet.config import AdagradConfig, AdamConfig, DeltaSgdConfig, SgdConfig, SpsConfig
from flnet.errors import FlnetError, ScenarioError
from flnet.output import (
    CHECKPOINT,
    KILLED,
    RUNNING,
    killed_note,
    lock_holder,
    lock_sweep,
    run_status,
)
from flnet.run_folders import default_sweep_folder, finished, format_of, identity
from flnet.scenario import Scenario, describe, merge, nest, parse_override, resolve

LR = "algorithm.local.lr"
OPTIMIZER = "algorithm.local.optimizer"
DEFAULT_LR = {
    n: c.default_lr
    for n, c in (
        ("sgd", SgdConfig),
        ("adam", AdamConfig),
        ("adagrad", AdagradConfig),
        ("sps", SpsConfig),
        ("delta_sgd", DeltaSgdConfig),
    )
}


# ---------------------------------------------------------------- what to sweep


def parse_values(item: str, option: str = "--grid") -> tuple[str, list]:
    """``"algorithm.local.steps=1,5,10"`` or ``"model.hidden=[[16], [32, 8]]"`` ->
    (field, [values]); values are read as YAML here and typed by the schema later."""
    if "=" not in item:
        raise ScenarioError(f"{option} {item!r} must look like field.path=v1,v2,...")
    key, raw = (s.strip() for s in item.split("=", 1))
    try:
        values = (
            yaml.load(raw, Loader=yaml_text.Loader)
            if raw.startswith("[")
            else [yaml.load(v, Loader=yaml_text.Loader) for v in raw.split(",")]
        )
    except (yaml.YAMLError, RecursionError):
        raise ScenarioError(f"{option} {item!r}: the values are not valid YAML") from None
    if not key or not isinstance(values, list) or not values:
        raise ScenarioError(f"{option} {item!r} has no field or no values")
    return key, values


def parse_grid(items: Iterable[str], option: str = "--grid") -> dict[str, list]:
    """Several ``field=v1,v2`` items -> {field: [values]}; a field given twice is refused."""
    grid: dict[str, list] = {}
    for item in items:
        key, values = parse_values(item, option)
        if key in grid:
            raise ScenarioError(
                f"{option} {key} is given twice; give all its values in one "
                f"{option} {key}=v1,v2,..."
            )
        grid[key] = values
    return grid


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> [0, 1, 2]."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        raise ScenarioError(
            f"--seeds {text!r} must be a comma-separated list of integers, e.g. --seeds 0,1,2"
        ) from None
    return seeds


@dataclass(frozen=True)
class Spec:
    """What a sweep varies. Points are grid x paired groups x seeds (seeds innermost).

    `paired` holds groups of equal-length lists that move together (point i takes the i-th
    value of each); `fixed` are overrides applied to every point (``--set``).
    """

    grid: dict[str, list] = field(default_factory=dict)
    paired: tuple[dict[str, list], ...] = ()
    seeds: tuple[int, ...] = ()
    fixed: dict[str, Any] = field(default_factory=dict)

    def swept(self) -> list[str]:
        keys = [*self.grid, *(k for group in self.paired for k in group)]
        return keys + (["seed"] if self.seeds else [])

    def check(self) -> None:
        seen: set[str] = set()
        for key in [*self.swept(), *self.fixed]:
            if key in seen:
                raise ScenarioError(
                    f"{key} is given more than once (grid, paired, seeds or "
                    "--set); give it in one place"
                )
            seen.add(key)
        for group in self.paired:
            lengths = {k: len(v) for k, v in group.items()}
            if len(set(lengths.values())) > 1:
                raise ScenarioError(f"paired lists must have equal lengths, got {lengths}")

    def combos(self) -> list[dict]:
        axes = [[{k: v} for v in values] for k, values in self.grid.items()]
        axes += [
            [dict(zip(group, values)) for values in zip(*group.values())] for group in self.paired
        ]
        if self.seeds:
            axes.append([{"seed": s} for s in self.seeds])
        return [
            {k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)
        ]


def spec_from(
    grid: dict[str, list] | None = None,
    paired: dict[str, list] | Sequence[dict[str, list]] | None = None,
    seeds: int | Iterable[int] | None = None,
    fixed: list[str] | tuple[str, ...] | dict[str, Any] | None = None,
) -> Spec:
    """A Spec from the plain arguments of `sweep` (dicts, lists, an int number of seeds)."""
    if isinstance(paired, dict):
        paired = [paired]
    if isinstance(seeds, int):
        seeds = range(seeds)
    if isinstance(fixed, (list, tuple)):
        fixed = _flat(merge_all(parse_override(t) for t in fixed))
    spec = Spec(
        dict(grid or {}),
        tuple(dict(g) for g in paired or ()),
        tuple(seeds or ()),
        dict(fixed or {}),
    )
    spec.check()
    return spec


def merge_all(dicts: Iterable[dict]) -> dict:
    out: dict = {}
    for d in dicts:
        out = merge(out, d)
    return out


def _flat(tree: dict, prefix: str = "") -> dict:
    """{"a": {"b": 1}} -> {"a.b": 1} (the dotted form `--set` uses)."""
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ---------------------------------------------------------------- points


@dataclass
class Point:
    """One point: its swept values (typed), resolved scenario and identity, or why invalid."""

    values: dict
    key: str = ""  # hash of the resolved scenario; empty when invalid
    data: dict | None = None  # the resolved scenario (JSON form)
    error: str | None = None
    note: str | None = None


def load_base(scenario: Scenario | dict | str | Path) -> tuple[dict, Spec]:
    """The scenario as a plain dict (unvalidated) and the `sweep:` section a file may hold."""
    if isinstance(scenario, Scenario):
        return scenario.model_dump(mode="json"), Spec()
    if isinstance(scenario, dict):
        data = dict(scenario)
    else:
        data = resolve(scenario)
        data.setdefault("name", Path(scenario).stem)
    section = data.pop("sweep", None) or {}
    if not isinstance(section, dict) or set(section) - {"grid", "paired", "seeds"}:
        raise ScenarioError("must be a mapping with grid, paired and/or seeds", field="sweep")
    return data, spec_from(section.get("grid"), section.get("paired"), section.get("seeds"))


def combine(a: Spec, b: Spec) -> Spec:
    """A file's sweep section plus the command line's; a field in both is refused."""
    spec = Spec(
        {**a.grid, **b.grid}, a.paired + b.paired, b.seeds or a.seeds, {**a.fixed, **b.fixed}
    )
    for key in set(a.grid) & set(b.grid):
        raise ScenarioError(f"{key} is swept in the file and on the command line; give it once")
    if a.seeds and b.seeds:
        raise ScenarioError("seeds are given in the file and on the command line; give them once")
    spec.check()
    return spec


def _optimizer_name(overrides: dict, base: dict) -> str | None:
    """The optimizer name `overrides` set (None when they do not touch the optimizer)."""
    if f"{OPTIMIZER}.name" in overrides:
        return overrides[f"{OPTIMIZER}.name"]
    if OPTIMIZER in overrides:
        opt = overrides[OPTIMIZER]
        return opt.get("name", "sgd") if isinstance(opt, dict) else opt
    return None


def _base_optimizer(base: dict) -> str:
    opt = base.get("algorithm", {}).get("local", {}).get("optimizer", {})
    return opt.get("name", "sgd") if isinstance(opt, dict) else "sgd"


def apply(base: dict, overrides: dict, explicit_lr: bool) -> tuple[dict, str | None]:
    """The point's scenario dict, and a note when it switched the optimizer without an lr:
    the new optimizer then runs at its own documented default, not the scenario's lr."""
    data = merge_all([base, *(nest(k, v) for k, v in overrides.items())])
    name = _optimizer_name(overrides, base)
    if name is None or explicit_lr or name == _base_optimizer(base):
        return data, None
    data = merge(data, nest(LR, None))
    default = DEFAULT_LR.get(name)
    note = (
        f"lr = {default:g}, {name}'s default"
        if default is not None
        else f"{name} sets its own step size"
    )
    return data, note


def get(tree: dict, path: str, missing: Any = None) -> Any:
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return missing
        tree = tree[part]
    return tree


def _related(a: str, b: str) -> bool:
    """Whether one dotted path is the other or lies inside it."""
    return (
        a == b
        or a.startswith(b + ".")
        or b.startswith(a + ".")
        or a.startswith(b + "[")
        or b.startswith(a + "[")
    )


def check_values(base: dict, spec: Spec) -> Spec:
    """Every swept value must fit its field on its own (type, range, known field): the sweep
    is refused naming the value otherwise. Returns the spec with each value as the schema
    reads it (``"1e-3"`` -> 0.001 for a float field). Inconsistent combinations are left to
    the points."""
    fixed_lr = LR in spec.fixed
    typed: dict[str, list] = {}
    for key in spec.swept():
        typed[key] = []
        for value in _values_of(spec, key):
            data, _ = apply(base, {**spec.fixed, key: value}, fixed_lr or key == LR)
            try:
                resolved = Scenario.model_validate(data).model_dump(mode="json")
            except ValidationError as e:
                for err in e.errors():
                    line = describe(err)
                    path = line.split(":", 1)[0]
                    if err["type"] != "inconsistent" and _related(path, key):
                        raise ScenarioError(
                            f"swept value {value!r} does not fit {key}: {line}"
                        ) from None
                typed[key].append(value)  # only its combination with the base is wrong
            else:
                typed[key].append(_as_given(value, get(resolved, key, value)))
    return Spec(
        {k: typed[k] for k in spec.grid},
        tuple({k: typed[k] for k in g} for g in spec.paired),
        tuple(typed["seed"]) if spec.seeds else (),
        spec.fixed,
    )


def _as_given(raw: Any, resolved: Any) -> Any:
    """The schema's reading of a swept value in the shape the user gave it: a number given for a
    distribution field resolves to ``{kind: constant, value: x}`` and stays the number x."""
    if isinstance(resolved, dict) and not isinstance(raw, dict) and "value" in resolved:
        return resolved["value"]
    return resolved


def _values_of(spec: Spec, key: str) -> list:
    if key in spec.grid:
        return spec.grid[key]
    if key == "seed" and spec.seeds:
        return list(spec.seeds)
    return next(g[key] for g in spec.paired if key in g)


def _cell(value: Any) -> Any:
    """A table cell: numbers, strings and None as they are, anything else as JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value)


def plan(base: dict, spec: Spec) -> list[Point]:
    """Every point, resolved and validated; invalid ones keep their error."""
    spec = check_values(base, spec)
    explicit_lr = LR in spec.fixed or LR in spec.swept()
    out = []
    for combo in spec.combos():
        data, note = apply(base, {**spec.fixed, **combo}, explicit_lr)
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as e:
            out.append(
                Point(
                    {k: _cell(v) for k, v in combo.items()},
                    error="; ".join(describe(err) for err in e.errors()),
                    note=note,
                )
            )
            continue
        resolved = scenario.model_dump(mode="json")
        values = {k: _cell(_as_given(v, get(resolved, k, v))) for k, v in combo.items()}
        out.append(Point(values, identity(resolved), resolved, note=note))
    return out


# ---------------------------------------------------------------- results on disk


def stale_inputs(summary: dict, data: dict) -> list[str]:
    """The input files a finished point read (its summary's digests) whose bytes differ now,
    for the point's scenario `data`; none for a run that kept no digests."""
    from flnet.checkpoint import input_digests  # loads torch: only for such runs
    from flnet.runner import changed_inputs, input_files  # loads torch: only for such runs

    if not summary.get("inputs"):
        return []
    scenario = Scenario.model_validate(data)
    files = input_files(scenario)
    changed = changed_inputs(summary["inputs"], scenario, input_digests(files))
    return [files.get(name, name) for name in changed]


def left_behind(folder: Path) -> dict | None:
    """The outcome an unfinished run left in `folder` (its summary's status and error, a run
    killed with -9 shown as `killed`: `flnet.output.run_status`), or None when it left no
    summary."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
        status = summary["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    shown = run_status(folder, status)
    if shown == KILLED:
        note = f"{killed_note(folder)}; or run the sweep again, which runs it afresh"
        return {"status": shown, "error": note}
    if shown == RUNNING:
        return {"status": shown, "error": f"being written by pid {lock_holder(folder)}"}
    return {"status": shown, "error": summary.get("error")}


def read_records(folder: Path) -> pd.DataFrame:
    fmt = format_of(folder)
    return (
        pd.read_parquet(folder / "records.parquet")
        if fmt == "parquet"
        else pd.read_csv(folder / "records.csv")
    )


def point_row(point: Point, summary: dict | None, outcome: dict | None) -> dict:
    """One row of the points table."""
    row = {"point": point.key or None, **point.values}
    done: dict = {}
    if point.error is not None:
        row.update(status="invalid", error=point.error)
    elif summary is not None:
        done = summary
        row.update({c: summary.get(c) for c in SUMMARY_COLUMNS}, error=None)
    elif outcome is not None:
        row.update(status=outcome["status"], error=outcome.get("error"))
    else:
        row.update(status="not finished", error=None)
    row.update({c: done.get(c) for c in REUSE_COLUMNS})
    said = [point.note, *(done.get("warnings") or [])]  # what the run warned of, too
    row["note"] = "; ".join(n for n in said if n) or None
    return row


def typed(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """A swept column mixing numbers and text (e.g. a number or a distribution) becomes text,
    so the table can always be written."""
    for c in columns:
        if c in df and df[c].dtype == object:
            kinds = {type(v) for v in df[c] if v is not None and not _isnan(v)}
            if len(kinds) > 1 and not kinds <= {int, float}:
                df[c] = df[c].map(lambda v: None if v is None else str(v))
    return df


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def gather(
    points: list[Point], out: Path, outcomes: dict[str, dict]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The points table and every finished point's records with its swept values in front."""
    rows, parts, seen = [], [], set()
    swept = list(points[0].values) if points else []
    for p in points:
        summary = finished(out / p.key) if p.key else None
        outcome = outcomes.get(p.key)
        if outcome is None and summary is None and p.key:
            outcome = left_behind(out / p.key)
        rows.append(point_row(p, summary, outcome))
        if summary is None or p.key in seen:
            continue
        seen.add(p.key)
        rec = read_records(out / p.key)
        front = {"point": p.key, **{k: v for k, v in p.values.items() if k not in rec}}
        rec = pd.concat(
            [pd.DataFrame({k: [v] * len(rec) for k, v in front.items()}, index=rec.index), rec],
            axis=1,
        )
        parts.append(rec)
    table = typed(pd.DataFrame(rows), swept)
    if "rounds" in table:
        table["rounds"] = table["rounds"].astype("Int64")
    records = typed(pd.concat(parts, ignore_index=True), swept) if parts else pd.DataFrame()
    return table, records


def write_tables(table: pd.DataFrame, records: pd.DataFrame, out: Path) -> list[str]:
    """points.csv and records.parquet, each atomically; a table pyarrow refuses is written as
    CSV instead (named in the returned warnings) rather than lost."""
    out.mkdir(parents=True, exist_ok=True)
    warnings = []
    tmp = out / "points.csv.tmp"
    table.to_csv(tmp, index=False)
    tmp.replace(out / "points.csv")
    if len(records):
        tmp = out / "records.parquet.tmp"
        try:
            records.to_parquet(tmp, index=False)
            tmp.replace(out / "records.parquet")
        except Exception as e:
            tmp.unlink(missing_ok=True)
            records.to_csv(out / "records.csv", index=False)
            warnings.append(f"records.parquet could not be written ({e}); wrote records.csv")
    return warnings


# ---------------------------------------------------------------- running


def _for_worker(data: dict, folder: Path) -> dict:
    """The point's scenario with its folder and its data paths absolute, so a worker whose
    working directory differs (a Ray node) reads and writes the same files. Applied after the
    point is named: where the sweep runs does not change what it is."""
    extra: dict = {
        "output": {"dir": str(folder.absolute())},
        "data": {"root": str(Path(data["data"]["root"]).absolute())},
    }
    features = data["data"].get("features")
    if isinstance(features, dict) and features.get("kind") == "npz":
        extra["data"]["features"] = {"path": str(Path(features["path"]).absolute())}
    return merge(data, extra)


@dataclass
class SweepResult:
    """What `run_sweep` returns besides the tables: counts and messages for the user."""

    table: pd.DataFrame
    records: pd.DataFrame
    out: Path
    ran: list[str] = field(default_factory=list)  # keys run in this call
    skipped: list[str] = field(default_factory=list)  # keys already finished on disk
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def run_sweep(
    scenario: Scenario | dict | str | Path,
    spec: Spec = Spec(),
    *,
    workers: int = 1,
    out_dir: str | Path | None = None,
    backend: str = "local",
    address: str | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    reuse_runs: bool = True,
    cluster: ClusterOptions | None = None,
) -> SweepResult:
    """Plan, skip finished points, run the rest, gather. `on_progress(done, total)` is called
    as points finish. Ctrl-C stops the workers, writes the tables of what finished, and
    raises KeyboardInterrupt. With `reuse_runs`, points that differ only in radio or device
    settings replay one training run where they can (`flnet.reuse`). The sweep's folder is
    locked while it runs (`flnet.output.lock_sweep`)."""
    start = time.perf_counter()
    base, file_spec = load_base(scenario)
    spec = combine(file_spec, spec)
    points = plan(base, spec)
    name = base.get("name", "scenario")
    out = Path(out_dir) if out_dir else default_sweep_folder(name)
    with lock_sweep(out) as folder:  # held until the tables are written
        try:
            result = _run_locked(
                points, out, workers, backend, address, on_progress, reuse_runs, cluster
            )
        finally:
            folder.discard_if_unused()  # a sweep refused before it ran leaves no folder
    result.wall_s = time.perf_counter() - start
    return result


def _run_locked(
    points: list[Point],
    out: Path,
    workers: int,
    backend: str,
    address: str | None,
    on_progress: Callable[[int, int], None] | None,
    reuse_runs: bool,
    cluster: ClusterOptions | None,
) -> SweepResult:
    """`run_sweep` once the sweep holds its folder's lock."""
    unique = {p.key: p for p in points if p.key}
    done = {k: s for k in unique if (s := finished(out / k)) is not None}
    # a finished point whose input files (traces, features) changed since it ran runs again
    stale = {
        k: stale_inputs(s, _for_worker(cast(dict, unique[k].data), out / k))
        for k, s in done.items()
    }
    skipped = [k for k in done if not stale[k]]
    todo = [p for k, p in unique.items() if k not in skipped]
    for p in todo:  # a folder a live run writes (another sweep's) must not be deleted under it
        holder = lock_holder(out / p.key)
        if holder is not None:
            raise FlnetError(
                f"{out / p.key} is being written by another flnet run (pid {holder}; another "
                f"sweep into {out}?): wait for it to end, or choose another --out"
            )
    # points that differ only in costs replay one training run (flnet.reuse): a replay starts
    # once its trajectory has finished (at once when it finished in an earlier sweep)
    plan_ = reuse.schedule(list(unique.values()), {p.key for p in todo}, out, reuse_runs)
    # a full run that was interrupted or killed after a checkpoint continues from it (the
    # worker starts it afresh if the checkpoint does not fit); any other unfinished folder,
    # replays' included, is started afresh
    resumable = {
        p.key for p, _ in plan_.first if (out / p.key / CHECKPOINT).is_file() and p.key not in done
    }
    for p in todo:
        if p.key not in resumable:
            shutil.rmtree(out / p.key, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)

    def data_of(p: Point) -> dict:
        return _for_worker(cast(dict, p.data), out / p.key)  # keyed points are valid

    tasks = [
        (p.key, reuse.Job(data_of(p), note=note, resume=p.key in resumable))
        for p, note in plan_.first
    ]
    waiting = dict(plan_.replays)
    running = {p.key for p, _ in plan_.first}
    for key in [k for k in waiting if k not in running]:
        tasks += reuse.replay_jobs({key: waiting.pop(key)}, out, data_of)

    def follow(key: str) -> list:
        return reuse.replay_jobs({key: waiting.pop(key)}, out, data_of) if key in waiting else []

    outcomes: dict[str, dict] = {}
    total = len(todo)
    if on_progress:
        on_progress(0, total)
    try:
        for key, outcome in pool.execute(
            tasks,
            workers=workers,
            backend=backend,
            address=address,
            log=out / "sweep.log",
            follow=follow,
            cluster=cluster,
        ):
            outcomes[key] = outcome
            if on_progress:
                on_progress(len(outcomes), total)
    finally:
        table, records = gather(points, out, outcomes)
        warnings = [
            f"{k}: {', '.join(files)} changed since it ran; it ran again"
            for k, files in stale.items()
            if files
        ] + write_tables(table, records, out)
    return SweepResult(table, records, out, list(outcomes), skipped, warnings)


def sweep(
    scenario: str | Path | dict | Scenario,
    grid: dict[str, list] | None = None,
    *,
    paired: dict | list[dict] | None = None,
    seeds: int | list[int] | None = None,
    fixed: dict | list[str] | None = None,
    workers: int = 1,
    out_dir: str | Path | None = None,
    backend: str = "local",
    address: str | None = None,
    reuse: bool = True,
    cluster: ClusterOptions | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run every point; return (points table, all records), both also written to `out_dir`
    (default ``runs/<name>-sweep``): ``points.csv`` and ``records.parquet``.

    `grid` {field: values} gives every combination; `paired` {field: values, ...} (or a list of
    such groups) moves its lists together; `seeds` (a list, or n for 0..n-1) is the innermost
    axis; `fixed` {field: value} or ["field=value"] applies to every point. Workers are separate
    processes (one torch thread each), so a script calling this needs no
    ``if __name__ == "__main__":`` guard. `backend="ray"` runs the points as Ray tasks
    (`address` of a cluster, or a local instance), `backend="slurm"` as Slurm array tasks;
    `cluster` (`flnet.cluster.ClusterOptions`) gives their CPUs, GPUs and retries.
    `reuse=False` runs every point in full (by default points that differ only in radio or
    device settings replay one training run where they can; the table's `reused_from` says
    which).
    """
    result = run_sweep(
        scenario,
        spec_from(grid, paired, seeds, fixed),
        workers=workers,
        out_dir=out_dir,
        backend=backend,
        address=address,
        reuse_runs=reuse,
        cluster=cluster,
    )
    return result.table, result.records
