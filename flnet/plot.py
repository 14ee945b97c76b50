"""Plots of flnet results: accuracy against simulated seconds, joules and rounds, the energy
split, the best number of local steps (tau) over SNR x bandwidth, and gossip consensus distance.

Everything here reads the results folder format on disk (README, "Results": `records`,
`ledger`, `summary.json`, `scenario.yaml`; a sweep's `points.csv` and `records.parquet`), never
flnet's internals, so the simulator can change shape underneath without breaking a plot.

    from flnet.plot import load_results, accuracy_figure, save_figure
    res = load_results("runs/quickstart")            # runs, sweeps and globs, side by side
    fig = accuracy_figure(res, x="energy_j")          # a matplotlib Figure (Jupyter shows it)
    save_figure(fig, "accuracy_vs_energy.png")

Figures are built on matplotlib's Agg canvas directly, never through pyplot: no display is
needed, no global backend is switched (a notebook keeps its own), and no figure is left open.
Runs whose resolved scenarios differ only in their seed form one series (the median line and
a min-max band), named by the fewest fields that tell the series apart (`name_series`).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import io
import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np
import pandas as pd
import yaml

from flnet.analysis import best_tau, to_target
from flnet.base import yaml_text
from flnet.columns import POINT_OUTCOMES
from flnet.dist_text import as_distribution, readable
from flnet.output import run_status
from flnet.result_files import ResultsError, read_json, read_table, read_text
from flnet.sim.ledger import FLOATS

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

P = ParamSpec("P")
R = TypeVar("R")

# -- reading results --------------------------------------------------------------------------

RECORD_FILES = ("records.parquet", "records.csv")
NEEDED_COLUMNS = ("round", "sim_time_s", "energy_j", "test_accuracy")
DEFAULT_TARGET = 0.9


@dataclass
class Results:
    """One or more runs read from disk.

    `records`: every record, with a `run_id` column. `runs`: one row per run (`run_id`,
    `label`, `group`, `seed`, `status`, `folder`, and the fields that vary between runs; for
    several folders also `source`, the folder given it came from, and a sweep's `point`).
    `fields`: the fields that vary between runs, seed excluded; runs with equal fields form
    one group, plotted as one series with a band over seeds.
    """

    records: pd.DataFrame
    runs: pd.DataFrame
    fields: list[str]
    kind: str  # "run", "sweep", "runs" (several run folders) or "records" (a DataFrame)
    sources: list[Path] = field(default_factory=list)
    scenario_text: str | None = None
    grid: dict[str, list] = field(default_factory=dict)

    @property
    def groups(self) -> list[str]:
        """Group labels in the order their first run appears."""
        return list(
            dict.fromkeys(
                self.runs.loc[self.runs.run_id.isin(self.records.run_id.unique()), "group"]
            )
        )

    def folder(self, run_id: Any) -> Path | None:
        value = self.runs.set_index("run_id").folder.get(run_id)
        return (
            None
            if value is None or (isinstance(value, float) and math.isnan(value))
            else Path(value)
        )

    def ledger(self, run_id: Any, columns: list[str] | None = None) -> pd.DataFrame | None:
        """The run's ledger; a killed run's journal (`ledger-journal.csv`, the same columns,
        appended at each checkpoint) when it has no ledger; None when it has neither."""
        folder = self.folder(run_id)
        if folder is None:
            return None
        ledger = _read_table(folder, "ledger", columns)
        if ledger is not None:
            return ledger
        journal = _read_table(folder, "ledger-journal", columns)
        if journal is None:
            return None
        # the journal writes a whole float without ".0" (`Ledger.flush`): the ledger's dtypes
        return journal.astype({c: float for c in FLOATS if c in journal})

    def target(self) -> float:
        """The run's own `run.target_accuracy` when it set one, else DEFAULT_TARGET."""
        if self.scenario_text:
            try:
                value = (
                    (yaml.load(self.scenario_text, Loader=yaml_text.Loader) or {})
                    .get("run", {})
                    .get("target_accuracy")
                )
            except (yaml.YAMLError, AttributeError, RecursionError):
                value = None
            if isinstance(value, (int, float)) and 0 < value <= 1:
                return float(value)
        return DEFAULT_TARGET


# what the plotting and report functions accept: Results, a folder, folders, or records
ResultsLike = Results | pd.DataFrame | str | Path | list[str | Path] | tuple[str | Path, ...]


def load_results(
    *paths: str | Path,
    labels: dict[str, str] | None = None,
    by: Iterable[str] | None = None,
) -> Results:
    """Read any mix of run folders, sweep folders and globs of them, compared side by side.

    A folder with `points.csv` is a sweep; one with `records.parquet` or `records.csv` is a
    run; anything else is refused with a ResultsError naming it. Runs whose resolved scenarios
    differ only in their seed form one series (`series`); `labels` maps a series name to a
    folder given here (every run under it is named so) and `by` groups by these fields only.
    """
    folders = expand_paths(paths)
    for folder in folders:
        _check_folder(folder)
    if len(folders) == 1 and (folders[0] / "points.csv").exists():
        res = _load_sweep(folders[0])
    elif len(folders) == 1:
        res = _load_run(folders[0])
    else:
        res = _load_many(folders)
    if not len(res.records):
        raise ResultsError(f"{', '.join(map(str, folders))}: no records yet (nothing evaluated)")
    if labels or by:
        relabel(res, labels or {}, list(by or ()))
    return res


GLOB_CHARS = ("*", "?", "[")


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """The folders named, a glob (`runs/fedavg-*`) standing for the folders it matches in
    order; a glob that matches nothing is refused, as is a folder given twice."""

    folders: list[Path] = []
    for p in paths:
        text = str(p)
        if not Path(text).exists() and any(c in text for c in GLOB_CHARS):
            matched = sorted(glob.glob(text))
            if not matched:
                raise ResultsError(f"{text}: matches no folder")
            folders += [Path(m) for m in matched if Path(m).is_dir()]
        else:
            folders.append(Path(text))
    if not folders:
        raise ResultsError("no results folder given")
    seen: set[Path] = set()
    for f in folders:
        if f.resolve() in seen:
            raise ResultsError(f"{f}: given twice")
        seen.add(f.resolve())
    return folders


def as_results(obj: ResultsLike) -> Results:
    """Results from a Results, a path, a list of paths, or a records DataFrame (a sweep's, with
    its `point` and swept columns, or one of flnet.run(...).records)."""
    if isinstance(obj, Results):
        return obj
    if isinstance(obj, pd.DataFrame):
        return _from_records(obj)
    if isinstance(obj, (list, tuple)):
        return load_results(*obj)
    return load_results(obj)


def _check_folder(folder: Path) -> None:
    if not folder.exists():
        raise ResultsError(
            f"{folder}: no such folder; expected a flnet results folder "
            "(records.parquet or records.csv) or a sweep (points.csv)"
        )
    if not folder.is_dir():
        raise ResultsError(
            f"{folder}: is a file; expected a flnet results folder "
            "(records.parquet or records.csv) or a sweep (points.csv)"
        )
    if not (folder / "points.csv").exists() and not any(
        (folder / f).exists() for f in RECORD_FILES
    ):
        raise ResultsError(
            f"{folder}: not a flnet results folder: expected records.parquet "
            "or records.csv (a run) or points.csv (a sweep)"
        )


def _read_table(folder: Path, stem: str, columns: list[str] | None = None) -> pd.DataFrame | None:
    """`stem`.parquet or `stem`.csv from `folder`, or None when neither exists."""
    for path in (folder / f"{stem}.parquet", folder / f"{stem}.csv"):
        if path.exists():
            return read_table(path, columns)
    return None


def _read_records(folder: Path) -> pd.DataFrame:
    records = _read_table(folder, "records")
    if records is None:
        raise ResultsError(f"{folder}: no records.parquet or records.csv")
    missing = [c for c in NEEDED_COLUMNS if c not in records]
    if missing:
        raise ResultsError(
            f"{folder}: its records lack the columns {missing}; expected flnet "
            "records (README, Results)"
        )
    return records.sort_values("round", kind="stable").reset_index(drop=True)


def _load_run(folder: Path) -> Results:
    records = _read_records(folder)
    summary = read_json(folder / "summary.json")
    records.insert(0, "run_id", 0)
    text = _read_scenario(folder / "scenario.yaml")
    own = _own_label(text)
    label = own or _base_label(records)
    runs = pd.DataFrame(
        [
            {
                "run_id": 0,
                "label": label,
                "group": label,
                "seed": _first(records, "seed", summary.get("seed")),
                # a run killed with -9 left "running" behind (flnet.output.run_status)
                "status": run_status(folder, summary.get("status", "unknown")),
                "folder": str(folder),
            }
        ]
    )
    return Results(records, runs, [], "run", [folder], text)


def _own_label(text: str | None) -> str | None:
    """A `label:` the run's scenario.yaml carries at its top level, if any."""
    if not text or "label:" not in text:
        return None
    value = scenario_fields(text).get("label")
    return str(value) if _applies(value) and str(value) else None


def _load_many(folders: list[Path]) -> Results:
    """Several run and sweep folders: every run with its resolved scenario, named as a series
    by the fewest fields that tell the series apart (`name_series`)."""
    parts = [_load_sweep(f) if (f / "points.csv").exists() else _load_run(f) for f in folders]
    frames: list[pd.DataFrame] = []
    rows: list[dict[str, Any]] = []
    configs: list[dict[str, Any]] = []
    for folder, part in zip(folders, parts):
        base = scenario_fields(part.scenario_text)
        new_ids = {}
        for run in part.runs.to_dict("records"):
            new_ids[run["run_id"]] = len(rows)
            config = {**base, **{f: run.get(f) for f in part.fields}}
            if "seed" in run and pd.notna(run["seed"]):
                config["seed"] = run["seed"]
            rows.append(
                {
                    "run_id": len(rows),
                    "seed": run.get("seed"),
                    "status": run.get("status", "unknown"),
                    "folder": run.get("folder"),
                    "source": str(folder),
                    "point": run["run_id"] if part.kind == "sweep" else None,
                }
            )
            configs.append(config)
        frames.append(part.records.assign(run_id=part.records.run_id.map(new_ids)))
    runs = pd.DataFrame(rows)
    varying = name_series(runs, configs)
    records = pd.concat(frames, ignore_index=True)
    for f in varying:  # the fields that differ, as columns (a best-tau table reads them)
        if "." in f:
            applies = {r: v if _applies(v) else math.nan for r, v in zip(runs.run_id, runs[f])}
            value = records.run_id.map(applies)
            records[f] = value if f not in records else records[f].where(records[f].notna(), value)
            records[f] = _sortable(records[f])
    grid = {k: list(dict.fromkeys(runs[k])) for k in varying}
    text = next((p.scenario_text for p in parts if p.scenario_text), None)
    return Results(records, runs, varying, "runs", folders, text, grid)


def _read_scenario(path: Path) -> str | None:
    """The text of a run's scenario.yaml, refused here, naming it, when it is not YAML."""
    text = read_text(path)
    scenario_fields(text, str(path))
    return text


def scenario_fields(text: str | None, source: str = "a scenario.yaml") -> dict[str, Any]:
    """A resolved scenario (scenario.yaml's text, from `source`) as {dotted field: value}, every
    section flattened down to its leaves; lists become tuples, so every value can be compared."""
    if not text:
        return {}
    try:
        data = yaml.load(text, Loader=yaml_text.Loader)
    except yaml.YAMLError as e:
        raise ResultsError(f"{source}: not valid YAML{yaml_text.describe(e, text)}") from None
    except RecursionError:
        raise ResultsError(f"{source}: not valid YAML: nested too deeply") from None
    return _flatten(data) if isinstance(data, dict) else {}


def _flatten(data: dict, prefix: str = "") -> dict:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if as_distribution(value) is not None:  # one field, named whole (`flnet.dist_text`)
            out[f"{prefix}{key}"] = readable(value)
        elif isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = _hashable(value)
    return out


def _hashable(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


# resolved-scenario fields that differ between runs without making them different experiments
IGNORED_FIELDS = ("output.", "run.checkpoint", "device", "data.root", "label")
ABSENT = "(does not apply)"  # a field one run's scenario does not have


def _applies(value: Any) -> bool:
    return (
        value is not None and value != ABSENT and not (isinstance(value, float) and value != value)
    )


def name_series(
    runs: pd.DataFrame, configs: list[dict[str, Any]], order: list[str] | None = None
) -> list[str]:
    """Group runs whose resolved scenarios are the same but for the seed into one series and
    name each by the fewest fields that tell the series apart (the algorithm first, where it
    differs; a field a run's scenario does not have is left out of its name). A scenario's own
    `label:` names its series (followed by the fields that tell apart the series sharing it: a
    labelled sweep's points). Sets `runs`' group, label and a column per differing field;
    returns the differing fields (`order` first: a sweep's swept fields).
    """
    kept = [
        {k: v for k, v in c.items() if k != "seed" and not k.startswith(IGNORED_FIELDS)}
        for c in configs
    ]
    keys = sorted({k for c in kept for k in c})
    identity = [tuple(c.get(k, ABSENT) for k in keys) for c in kept]
    series = list(dict.fromkeys(identity))  # one per series, in the order runs first appear
    first = {s: kept[identity.index(s)] for s in series}
    varying = [k for k in keys if len({repr(first[s].get(k, ABSENT)) for s in series}) > 1]
    order = [f for f in (order or []) if f in varying]
    varying = order + [f for f in varying if f not in order]
    chosen = _fewest_fields(series, first, varying, order)
    names = _display_names(varying)
    label_of = {s: _series_label(s, series, first, chosen, varying, names) for s in series}
    own = [str(o) if _applies(o) and str(o) else None for o in (c.get("label") for c in configs)]
    shared: dict[str, set] = {}  # a label and the series that carry it (a sweep's points)
    for o, i in zip(own, identity):
        if o is not None:
            shared.setdefault(o, set()).add(i)
    runs["group"] = [
        (o if len(shared[o]) == 1 or not label_of[i] else f"{o}, {label_of[i]}")
        if o is not None
        else label_of[i] or _fallback_label(c)
        for o, i, c in zip(own, identity, configs)
    ]
    for f in varying:
        runs[f] = [c.get(f, ABSENT) for c in kept]
    _seed_labels(runs)
    return varying


def _fallback_label(config: dict[str, Any]) -> str:
    name, algo = config.get("name", "run"), config.get("algorithm.name")
    return f"{name} ({algo})" if algo is not None else str(name)


def _fewest_fields(
    series: list[tuple], first: dict[tuple, dict], varying: list[str], preferred: list[str]
) -> list[str]:
    """The fewest differing fields whose values tell every series apart, chosen greedily: the
    algorithm where it differs, then the field that tells most of the pairs still alike apart
    (ties: a swept field, then a shallower one, then the scenario's name last)."""
    chosen = ["algorithm.name"] if "algorithm.name" in varying else []

    def alike(fields: list[str]) -> list[tuple[tuple, tuple]]:
        keyed = [(tuple(repr(first[s].get(f, ABSENT)) for f in fields), s) for s in series]
        return [(a, b) for i, (ka, a) in enumerate(keyed) for kb, b in keyed[i + 1 :] if ka == kb]

    pairs = alike(chosen)
    while pairs:

        def gain(f: str, pairs: list = pairs) -> tuple:
            told = sum(
                repr(first[a].get(f, ABSENT)) != repr(first[b].get(f, ABSENT)) for a, b in pairs
            )
            return (told, f in preferred, f != "name", -f.count("."), f)

        best = max((f for f in varying if f not in chosen), key=gain, default=None)
        if best is None or gain(best)[0] == 0:
            break
        chosen.append(best)
        pairs = alike(chosen)
    return chosen


def _series_label(
    s: tuple,
    series: list[tuple],
    first: dict[tuple, dict],
    chosen: list[str],
    varying: list[str],
    names: dict,
) -> str:
    """One series' name: of the `chosen` fields in turn, those that apply to it and tell it
    apart from the series still alike so far, until none is (so `scaffold` needs no model where
    only the FedAvg runs differ in theirs). Where a chosen field does not apply to it (local
    steps, to a run in local epochs), the other `varying` fields finish the job, the one that
    tells most apart first, one the others lack (its epochs) before one they share."""

    def value(t: tuple, f: str) -> str:
        return repr(first[t].get(f, ABSENT))

    def part(f: str) -> str:
        v = first[s][f]
        return _fmt_value(v) if f == "algorithm.name" else f"{names[f]}={_fmt_value(v)}"

    alike = list(series)
    parts = []
    for f in chosen:
        if len(alike) == 1:
            break
        if not _applies(first[s].get(f, ABSENT)) or len({value(t, f) for t in alike}) == 1:
            continue
        alike = [t for t in alike if value(t, f) == value(s, f)]
        parts.append(part(f))
    extra = [f for f in varying if f not in chosen and _applies(first[s].get(f, ABSENT))]
    while len(alike) > 1 and extra:

        def rank(f: str, alike: list = alike) -> tuple:
            told = sum(value(t, f) != value(s, f) for t in alike)
            theirs = sum(_applies(first[t].get(f, ABSENT)) for t in alike if t != s)
            return (told, -theirs, -f.count("."))

        best = max(extra, key=rank)
        if rank(best)[0] == 0:
            break
        extra.remove(best)
        alike = [t for t in alike if value(t, best) == value(s, best)]
        parts.append(part(best))
    return ", ".join(parts)


def _display_names(fields: list[str]) -> dict[str, str]:
    """Each field by its shortest unambiguous tail (`tau` for the local steps; a `kind` by
    its section: `partition` for data.partition.kind)."""

    def tail(f: str, n: int) -> str:
        if f == "algorithm.local.steps" and n == 1:
            return "tau"
        parts = f.split(".")
        if parts[-1] == "kind" and len(parts) > 1:
            parts = parts[:-1]
        return ".".join(parts[-n:])

    depth = dict.fromkeys(fields, 1)
    while True:
        names = {f: tail(f, depth[f]) for f in fields}
        clash = [f for f in fields if list(names.values()).count(names[f]) > 1]
        if not clash:
            return names
        grown = False
        for f in clash:
            if depth[f] < f.count(".") + 1:
                depth[f] += 1
                grown = True
        if not grown:
            return {f: f for f in fields}


def _seed_labels(runs: pd.DataFrame) -> None:
    runs["label"] = [
        f"{g}, seed {_fmt_value(s)}" if s is not None and s == s else g
        for g, s in zip(runs.group, runs.seed)
    ]


def relabel(res: Results, labels: dict[str, str], by: list[str]) -> None:
    """Name series by hand: `labels` maps a name to a folder given (every run under it), `by`
    groups runs by these fields alone (one series per combination of their values)."""
    runs = res.runs
    if by:
        configs = _run_configs(res)
        missing = [f for f in by if not any(f in c for c in configs)]
        if missing:
            raise ResultsError(
                f"--by {', '.join(missing)}: no run has this field; fields that differ "
                f"between these runs: {', '.join(res.fields) or 'none'}"
            )
        names = _display_names(by)
        runs["group"] = [
            ", ".join(f"{names[f]}={_fmt_value(c.get(f, ABSENT))}" for f in by) for c in configs
        ]
        for f in by:
            runs[f] = [c.get(f, ABSENT) for c in configs]
    sources = (
        runs["source"]
        if "source" in runs
        else pd.Series(
            [str(res.sources[0])] * len(runs) if res.sources else [""] * len(runs), index=runs.index
        )
    )
    given = {Path(s).resolve() for s in sources}
    for name, folder in labels.items():
        path = Path(folder).resolve()
        hit = [
            i
            for i, (s, f) in enumerate(zip(sources, runs.folder))
            if Path(s).resolve() == path or (isinstance(f, str) and Path(f).resolve() == path)
        ]
        if not hit:
            raise ResultsError(
                f"--label {name}={folder}: {folder} is none of the folders given "
                f"({', '.join(str(g) for g in sorted(given))})"
            )
        several = runs.group.iloc[hit].nunique() > 1
        runs.loc[runs.index[hit], "group"] = [
            f"{name}: {g}" if several else name for g in runs.group.iloc[hit]
        ]
    _seed_labels(runs)


def _run_configs(res: Results) -> list[dict[str, Any]]:
    """Each run's resolved scenario as fields (a sweep's point: the sweep's, swept fields as
    the point has them)."""
    cache: dict[str, dict] = {}
    out = []
    base = scenario_fields(res.scenario_text)
    for run in res.runs.to_dict("records"):
        folder = run.get("folder")
        if isinstance(folder, str) and (Path(folder) / "scenario.yaml").exists():
            if folder not in cache:
                path = Path(folder) / "scenario.yaml"
                cache[folder] = scenario_fields(read_text(path), str(path))
            config = dict(cache[folder])
        else:
            config = {**base, **{f: run.get(f) for f in res.fields}}
        if run.get("seed") is not None:
            config["seed"] = run.get("seed")
        out.append(config)
    return out


def _load_sweep(folder: Path) -> Results:
    """A sweep folder: points.csv says which fields were swept and each point's status; the
    records come from the sweep's records table, or from the point folders when it has none."""
    points = read_table(folder / "points.csv")
    if "point" not in points:
        raise ResultsError(
            f"{folder / 'points.csv'}: no `point` column; expected the table flnet sweep writes"
        )
    swept = [c for c in points.columns if c not in POINT_OUTCOMES]
    records = _read_table(folder, "records")
    if records is None:
        frames = [
            _read_records(p).assign(point=i)
            for i in points.point
            if any(((p := _point_folder(folder, i)) / f).exists() for f in RECORD_FILES)
        ]
        if not frames:
            raise ResultsError(
                f"{folder}: a sweep with no records (no point finished); see its points.csv"
            )
        records = pd.concat(frames, ignore_index=True)
    missing = [c for c in (*NEEDED_COLUMNS, "point") if c not in records]
    if missing:
        raise ResultsError(
            f"{folder}: its records lack the columns {missing}; expected the "
            "records table flnet sweep writes"
        )
    records = _in_run_order(records.rename(columns={"point": "run_id"}))
    for f in swept:  # fields already in the records (seed) keep their records' values
        if f not in records:
            records[f] = records.run_id.map(points.set_index("point")[f])
    for f in swept:
        points[f], records[f] = readable_column(points[f]), readable_column(records[f])
    runs = points.rename(columns={"point": "run_id"})
    seeds = records.groupby("run_id").seed.first() if "seed" in records else pd.Series()
    runs["seed"] = runs.run_id.map(seeds) if "seed" not in swept else runs["seed"]
    runs["status"] = runs.get("status", "unknown")
    runs["folder"] = [
        str(p) if (p := _point_folder(folder, i)).is_dir() else None for i in runs.run_id
    ]
    fields = [f for f in swept if f != "seed"]
    _label_runs(runs, fields, base=_base_label(records))
    first = next((f for f in runs.folder if f), None)
    text = _read_scenario(Path(first) / "scenario.yaml") if first else None
    grid = {k: list(dict.fromkeys(points[k])) for k in swept}
    return Results(records, runs, fields, "sweep", [folder], text, grid)


def _in_run_order(rec: pd.DataFrame) -> pd.DataFrame:
    """Records sorted by run in the order runs first appear (a sweep's order: its point names
    are hashes, whose sorted order means nothing), then by round."""
    order = rec.run_id.map({r: i for i, r in enumerate(dict.fromkeys(rec.run_id))})
    return (
        rec.assign(_order=order)
        .sort_values(["_order", "round"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def _point_folder(folder: Path, point: Any) -> Path:
    """A point's folder: named by its hash (flnet.sweeps), or point-XXXX in older sweeps."""
    if isinstance(point, str) or (folder / str(point)).is_dir():
        return folder / str(point)
    if point is None or point != point:  # an invalid point has no folder
        return folder / "-"
    return folder / f"point-{int(point):04d}"


def _from_records(records: pd.DataFrame) -> Results:
    """A records DataFrame in memory: a sweep's (runs by `point`, fields are the extra columns)
    or a run's."""
    missing = [c for c in NEEDED_COLUMNS if c not in records]
    if missing:
        raise ResultsError(f"records lack the columns {missing}; expected flnet records")
    rec = records.copy()
    if "point" in rec:
        rec = rec.rename(columns={"point": "run_id"})
        fields = [c for c in rec.columns if "." in c]  # swept fields are dotted paths
    else:
        keys = [c for c in ("scenario", "algorithm", "seed") if c in rec]
        rec["run_id"] = rec.groupby(keys, sort=False).ngroup() if keys else 0
        fields = [c for c in ("scenario", "algorithm") if c in rec and rec[c].nunique() > 1]
    for f in fields:
        rec[f] = readable_column(rec[f])
    rec = _in_run_order(rec)
    runs = rec.groupby("run_id", sort=False).first().reset_index()
    runs = runs[["run_id", *fields, *(["seed"] if "seed" in runs else [])]]
    if "seed" not in runs:
        runs["seed"] = 0
    runs["status"], runs["folder"] = "unknown", None
    _label_runs(runs, fields, base=_base_label(rec))
    return Results(rec, runs, fields, "records")


def readable_column(values: pd.Series) -> pd.Series:
    """A swept field's values with its distributions as labels show them (`readable`): a
    sweep's tables keep a distribution as JSON text, and a number swept beside one as text
    too. Where numbers and named distributions mix, all are text (`_sortable`)."""
    if not any(as_distribution(v) is not None for v in values):
        return values
    shown = values.map(lambda v: readable(v) if as_distribution(v) is not None else _number(v))
    return _sortable(shown)


def _sortable(values: pd.Series) -> pd.Series:
    """`values` as text where numbers and text mix (a constant beside a named distribution),
    so that a choice among them sorts; else as they are. Missing values stay missing."""
    given = [v for v in values if _applies(v)]
    if all(isinstance(v, str) for v in given) or not any(isinstance(v, str) for v in given):
        return values
    return values.map(_as_text)


def _number(value: Any) -> Any:
    """A number written as text (a table's cell beside JSON text) as the number; else as is."""
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def _as_text(value: Any) -> Any:
    return value if isinstance(value, str) or not _applies(value) else _fmt_value(value)


def _first(df: pd.DataFrame, column: str, default: Any = None) -> Any:
    return df[column].iloc[0] if column in df and len(df) else default


def _base_label(records: pd.DataFrame) -> str:
    name, algo = _first(records, "scenario", "run"), _first(records, "algorithm")
    return f"{name} ({algo})" if algo is not None else str(name)


def short_name(field_name: str) -> str:
    """`algorithm.local.steps` -> `tau`; other dotted fields by their last part."""
    return {"algorithm.local.steps": "tau"}.get(field_name, field_name.rsplit(".", 1)[-1])


def _fmt_value(value: Any) -> str:
    if isinstance(value, tuple):  # a list field, made comparable (`scenario_fields`)
        return "[" + ", ".join(_fmt_value(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _label_runs(runs: pd.DataFrame, fields: list[str], base: str | None = None) -> None:
    """Give each run its group label (its fields but not its seed) and its own label."""
    if fields:
        names = [short_name(f) for f in fields]
        if len(set(names)) < len(names):
            names = list(fields)
        runs["group"] = [
            ", ".join(f"{n}={_fmt_value(v)}" for n, v in zip(names, row))
            for row in runs[fields].itertuples(index=False)
        ]
    elif "group" not in runs:
        runs["group"] = base or "run"
    runs["label"] = [
        f"{g}, seed {_fmt_value(s)}" if s is not None and s == s else g
        for g, s in zip(runs.group, runs.seed)
    ]


# -- figures ----------------------------------------------------------------------------------

STYLE: dict[Any, Any] = {  # rcParams (matplotlib types their names as literals)
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.8,
    "legend.frameon": False,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
}
X_AXES = {
    "sim_time_s": "simulated time (s)",
    "energy_j": "energy (J)",
    "round": "round",
    "events": "client results delivered",
}  # events: for notebooks (asynchronous runs)
ACCURACY_METRICS = {
    "test_accuracy": "test accuracy",
    "client_accuracy_mean": "mean client accuracy",
    "client_accuracy_worst": "worst-client accuracy",
}
ENERGY_PARTS = {
    "energy_compute_j": ("compute", "#4c72b0"),
    "energy_uplink_j": ("uplink", "#dd8452"),
    "energy_downlink_j": ("downlink", "#55a868"),
    "energy_d2d_j": ("D2D", "#c44e52"),
}
LEDGER_PARTS = {
    "compute": "energy_compute_j",
    "upload": "energy_uplink_j",
    "download": "energy_downlink_j",
    "d2d": "energy_d2d_j",
    "d2d_rx": "energy_d2d_j",
}  # a D2D transfer: the sender's row, the receiver's
MAX_LEGEND = 12  # more series than this: colours by order, no legend
MAX_CLASS_PANELS = 6  # device-class panels: the first few run groups
MAX_BAR_LABELS = 40


def _styled(fn: Callable[P, R]) -> Callable[P, R]:
    """Every figure is drawn under the one STYLE, whatever the caller's rcParams."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        import matplotlib as mpl

        with mpl.rc_context(STYLE):
            return fn(*args, **kwargs)

    return wrapper


def _figure(
    ncols: int = 1, nrows: int = 1, width_in: float = 4.4, height_in: float = 3.6, **kw: Any
) -> tuple[Figure, list[Axes]]:
    """A Figure on an Agg canvas (no pyplot, no display) with a grid of axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in * ncols, height_in * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, list(axes.ravel())


FORMATS = ("png", "svg", "pdf")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write `fig` in the format its suffix names (png, svg or pdf; png without one),
    atomically (a half-written plot never replaces a whole one)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in FORMATS:
        raise ResultsError(f"{path}: a figure is written as {', '.join(FORMATS)}; got {fmt!r}")
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format=fmt)
    tmp.replace(path)
    return path


def figure_table(fig: Figure) -> pd.DataFrame | None:
    """The tidy table a figure draws (each flnet figure keeps it), or None."""
    table = getattr(fig, "flnet_table", None)
    return table if isinstance(table, pd.DataFrame) else None


def png_bytes(fig: Figure) -> bytes:

    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# Okabe and Ito's colour-blind-safe palette; line styles and markers tell series apart too
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
SPARSE_EVALUATIONS = 6  # a series with this few evaluations is drawn as points
AGGREGATION = "median over seeds, band min-max"


def _colors(n: int) -> list:
    import matplotlib as mpl

    if n <= MAX_LEGEND:
        return [PALETTE[i % len(PALETTE)] for i in range(n)]
    return [mpl.colormaps["viridis"](i / max(1, n - 1)) for i in range(n)]


def _style(i: int, n: int) -> dict[str, Any]:
    """Series i of n: its colour, line style and marker (none past MAX_LEGEND: a sweep's many
    series read by colour order)."""
    if n > MAX_LEGEND:
        return {"color": _colors(n)[i]}
    shift = i + i // len(PALETTE)  # the ninth series: the first's colour, not its style
    return {
        "color": PALETTE[i % len(PALETTE)],
        "ls": LINESTYLES[shift % len(LINESTYLES)],
        "marker": MARKERS[shift % len(MARKERS)],
    }


TIME_UNITS = (("days", 86400.0, 2 * 86400.0), ("h", 3600.0, 2 * 3600.0), ("min", 60.0, 120.0))


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a time axis reading up to `seconds` is best read in: s, min, h or days."""
    for name, scale, above in TIME_UNITS:
        if seconds >= above:
            return name, scale
    return "s", 1.0


def seed_band(
    curves: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Median and min-max over seeds, on the union of their x values within the range that
    every seed covers.

    Each seed's curve is interpolated linearly between its evaluations. Beyond the range all
    seeds share, the median would jump as seeds drop out (or a seed would be extrapolated past
    what it measured), so the series stops where its shortest seed stops. Against rounds
    seeds share their evaluations, and nothing is cut unless a seed stopped early.
    Returns (x, median, low, high).
    """
    if len(curves) == 1:
        x, y = curves[0]
        return x, y, y, y
    start, stop = max(x[0] for x, _ in curves), min(x[-1] for x, _ in curves)
    grid = np.unique(np.concatenate([x for x, _ in curves]))
    grid = grid[(grid >= start) & (grid <= stop)]
    ys = np.stack([np.interp(grid, x, y) for x, y in curves])
    return grid, np.median(ys, axis=0), ys.min(axis=0), ys.max(axis=0)


def _group_curves(res: Results, x: str, y: str) -> list[tuple[str, list]]:
    """[(group label, [(x, y) per run])] with NaN rows dropped, groups in order."""
    rec = res.records[["run_id", x, y]].dropna()
    group_of = res.runs.set_index("run_id").group
    curves: dict[str, list] = {g: [] for g in res.groups}
    for run_id, r in rec.groupby("run_id", sort=False):
        if len(r):
            curves.setdefault(group_of[run_id], []).append(
                (r[x].to_numpy(float), r[y].to_numpy(float))
            )
    return [(g, c) for g, c in curves.items() if c]


def _draw_series(
    ax: Axes, res: Results, x: str, y: str, tables: list[pd.DataFrame] | None = None
) -> int:
    """One line per group (the median over its seeds) and a min-max band when it has more
    than one seed, each with its colour, line style and marker; a group with few evaluations
    is drawn as points joined by a faint line, never as a trend. Simulated time is shown in
    the unit its range reads best in (`time_unit`). Appends the tidy table drawn to `tables`;
    returns the number of series drawn."""
    series = _group_curves(res, x, y)
    many = len(series) > MAX_LEGEND
    scale = time_unit(_x_max(res, x))[1] if x == "sim_time_s" else 1.0
    for i, (group, curves) in enumerate(series):
        gx, mid, low, high = seed_band(curves)
        style = _style(i, len(series))
        seeds = len(curves)
        label = textwrap.fill(group if seeds == 1 else f"{group} ({seeds} seeds)", 48)
        sparse = len(gx) <= SPARSE_EVALUATIONS
        if many:
            ax.plot(gx / scale, mid, label=label, lw=0.9, **style)
        elif sparse:
            ax.plot(gx / scale, mid, label=label, lw=0.8, alpha=0.6, markersize=6, **style)
        else:
            ax.plot(
                gx / scale, mid, label=label, markersize=5, markevery=max(1, len(gx) // 8), **style
            )
        if seeds > 1:
            ax.fill_between(gx / scale, low, high, color=style["color"], alpha=0.18, lw=0)
        if tables is not None:
            tables.append(
                pd.DataFrame(
                    {"series": group, "seeds": seeds, "y": y, x: gx, "median": mid}
                ).assign(min=low, max=high)
            )
    return len(series)


def _x_max(res: Results, x: str) -> float:
    values = res.records[x].dropna() if x in res.records else pd.Series(dtype=float)
    return float(values.max()) if len(values) else 0.0


def _x_label(res: Results, x: str) -> str:
    if x == "sim_time_s":
        return f"simulated time ({time_unit(_x_max(res, x))[0]})"
    return X_AXES[x]


def _legend(fig: Figure, ax: Axes, n: int, title: str, res: Results | None = None) -> None:
    """A legend below the panels, in columns (even for one series: it names the run); below,
    it takes height, never the axes' width. Past MAX_LEGEND a legend would hide the plot, so
    the title says how the series are coloured instead. The title states the aggregation."""
    if 1 <= n <= MAX_LEGEND:
        fig.legend(
            *ax.get_legend_handles_labels(), loc="outside lower center", ncols=_legend_columns(n)
        )
    elif n > MAX_LEGEND:
        title += f"\n({n} series, coloured in sweep order: dark first, yellow last)"
    fig.suptitle(title + (f"\n({aggregation(res)})" if res is not None else ""))


def _legend_columns(n: int) -> int:
    return 1 if n <= 2 else 2 if n <= 6 else 3


def _legend_height_in(n: int) -> float:
    """What a legend of n series below the axes needs, so the axes keep their height."""
    if n > MAX_LEGEND or n < 1:
        return 0.0
    return 0.35 + 0.24 * math.ceil(n / _legend_columns(n)) * 2


def aggregation(res: Results) -> str:
    """How series are drawn, said the same way in every figure and caption."""
    per_group = res.runs[res.runs.run_id.isin(res.records.run_id)].groupby("group").size()
    if len(per_group) and per_group.max() > 1:
        return f"lines: {AGGREGATION}"
    return "one run per series"


@_styled
def accuracy_figure(
    results: ResultsLike, x: str = "sim_time_s", metrics: Iterable[str] | None = None
) -> Figure:
    """Accuracy (test, mean client, worst client) against `x`: `sim_time_s`, `energy_j` or
    `round` (or `events` where the records have it); one panel per accuracy, one series per
    group of runs with a band over seeds."""
    res = as_results(results)
    if x not in X_AXES or x not in res.records:
        raise ResultsError(f"x must be one of {[c for c in X_AXES if c in res.records]}; got {x!r}")
    metrics = [
        m
        for m in (metrics or ACCURACY_METRICS)
        if m in res.records and res.records[m].notna().any()
    ] or ["test_accuracy"]
    n = len(res.groups)
    fig, axes = _figure(ncols=len(metrics), sharey=True, height_in=3.6 + _legend_height_in(n))
    tables: list[pd.DataFrame] = []
    for ax, metric in zip(axes, metrics):
        n = _draw_series(ax, res, x, metric, tables)
        ax.set_title(ACCURACY_METRICS.get(metric, metric))
        ax.set_xlabel(_x_label(res, x))
        ax.set_ylabel("accuracy (fraction correct)" if ax is axes[0] else "")
    _legend(fig, axes[0], n, f"accuracy against {_x_label(res, x)}", res)
    fig.flnet_table = pd.concat(tables, ignore_index=True) if tables else None  # type: ignore[attr-defined]
    return fig


def _final_parts(res: Results) -> pd.DataFrame:
    """Per group: the median over its seeds of each energy part at the run's last record."""
    parts = [c for c in ENERGY_PARTS if c in res.records]
    last = res.records.groupby("run_id", sort=False).tail(1).set_index("run_id")[parts]
    last["group"] = res.runs.set_index("run_id").group.reindex(last.index)
    return last.groupby("group", sort=False).median().reindex(res.groups)


@_styled
def energy_split_figure(results: ResultsLike) -> Figure:
    """Each group's joules at its last record, split into compute, uplink, downlink and D2D
    (median over seeds): one stacked horizontal bar per group."""
    res = as_results(results)
    parts = _final_parts(res).fillna(0.0)
    n = len(parts)
    fig, (ax,) = _figure(width_in=7.5, height_in=min(10.0, 1.6 + 0.28 * n))
    y = np.arange(n)
    left = np.zeros(n)
    for column in parts.columns:
        name, color = ENERGY_PARTS[column]
        ax.barh(y, parts[column].to_numpy(), left=left, color=color, label=name, height=0.7)
        left += parts[column].to_numpy()
    ax.set_yticks(y, list(parts.index) if n <= MAX_BAR_LABELS else [""] * n)
    ax.invert_yaxis()
    ax.set_xlabel("energy (J)")
    ax.set_ylabel("run" if n <= MAX_BAR_LABELS else f"run ({n}, in sweep order)")
    ax.grid(axis="y", visible=False)
    ax.set_title(f"energy split per series (at the last record; {aggregation(res)})")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")
    fig.flnet_table = parts.rename_axis("series").reset_index()  # type: ignore[attr-defined]
    return fig


CLASS_NAMES = ("slow third", "middle third", "fast third")


def device_classes(ledger: pd.DataFrame) -> pd.Series:
    """Each node's class: the server, or its third of the clients by measured compute speed
    (FLOP per second of its completed compute events).

    The results hold no device attributes, but the ledger holds each compute event's FLOPs
    and duration, so speed is measured, stragglers' slowdowns included. Clients that never
    finished a computation form their own class.
    """
    nodes = pd.Index(ledger.node.unique())
    comp = ledger[
        (ledger.kind == "compute")
        & (ledger.outcome == "ok")
        & (ledger.end_s > ledger.start_s)
        & (ledger.node >= 0)
    ]
    speed = comp.groupby("node").flops.sum() / (comp.end_s - comp.start_s).groupby(comp.node).sum()
    classes = pd.Series("no finished compute", index=nodes, dtype=object)
    classes[nodes < 0] = "server"
    if len(speed):
        q = min(3, len(speed))
        names = (
            CLASS_NAMES
            if q == 3
            else CLASS_NAMES[:1] + CLASS_NAMES[-1:]
            if q == 2
            else ("clients",)
        )
        classes[speed.index] = pd.qcut(speed.rank(method="first"), q, labels=names).astype(object)
    return classes


def _class_energy(ledger: pd.DataFrame) -> pd.DataFrame:
    """Joules per device class (rows) and energy part (columns)."""
    led = ledger[ledger.energy_j > 0]
    cls = device_classes(ledger)
    part = led.kind.astype(str).map(LEDGER_PARTS).fillna("other")
    table = led.energy_j.groupby([led.node.map(cls), part]).sum().unstack(fill_value=0.0)
    order = [
        c for c in ("server", *CLASS_NAMES, "clients", "no finished compute") if c in table.index
    ]
    return table.reindex(order)


@_styled
def energy_by_class_figure(results: ResultsLike) -> Figure | None:
    """Joules per device class, split into compute, uplink, downlink and D2D; one panel per run
    group (the first MAX_CLASS_PANELS), the median over its seeds. None when no run kept a
    ledger."""
    res = as_results(results)
    columns = ["node", "kind", "start_s", "end_s", "energy_j", "flops", "outcome"]
    panels = []
    for group in res.groups[:MAX_CLASS_PANELS]:
        tables = [
            t
            for rid in res.runs.run_id[res.runs.group == group]
            if rid in set(res.records.run_id)
            if (t := res.ledger(rid, columns)) is not None and len(t)
        ]
        if tables:
            per_seed = [_class_energy(t) for t in tables]
            index = list(dict.fromkeys(i for t in per_seed for i in t.index))
            parts = list(dict.fromkeys(c for t in per_seed for c in t.columns))
            stacked = np.stack(
                [t.reindex(index=index, columns=parts, fill_value=0.0).to_numpy() for t in per_seed]
            )
            median = pd.DataFrame(np.median(stacked, axis=0), index=index, columns=parts)
            panels.append((group, median, len(tables)))
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = _figure(ncols=ncols, nrows=nrows, width_in=3.6, height_in=3.6, sharey=True)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for ax, (group, table, seeds) in zip(axes, panels):
        bottom = np.zeros(len(table))
        for column, (name, color) in {**ENERGY_PARTS, "other": ("other", "0.6")}.items():
            if column == "other" and column not in table:
                continue  # the four parts are always drawn (zeros too): one legend for all
            values = table.get(column, pd.Series(0.0, index=table.index)).to_numpy()
            ax.bar(table.index, values, bottom=bottom, color=color, label=name, width=0.65)
            bottom += values
        ax.set_title(
            textwrap.fill(group, 34) + ("" if seeds == 1 else f"\n(median of {seeds} seeds)"),
            fontsize=9,
        )
        ax.set_xlabel("device class")
        ax.tick_params(axis="x", labelrotation=20)
        ax.set_ylabel("energy (J)" if ax in axes[::ncols] else "")
        ax.grid(axis="x", visible=False)
    more = len(res.groups) - len(panels)
    fig.suptitle(
        "energy per device class (clients in thirds by measured compute speed)"
        + (f"; first {len(panels)} of {len(res.groups)} series" if more > 0 else "")
    )
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right upper")
    fig.flnet_table = pd.concat(  # type: ignore[attr-defined]
        [t.rename_axis("device_class").reset_index().assign(series=g) for g, t, _ in panels],
        ignore_index=True,
    )
    return fig


def to_target_table(
    results: ResultsLike, target: float, metric: str = "test_accuracy"
) -> pd.DataFrame:
    """Per run: whether it reached `target`, the round of the first record that did, and the
    simulated seconds and joules read between it and the record before
    (`flnet.analysis.to_target`; NaN when never reached)."""

    per_run = to_target(
        as_results(results).records, target, metric, keys=["run_id"], interpolate=True
    )
    names = {"rounds_to_target": "round", "seconds_to_target": "sim_time_s"}
    per_run = per_run.rename(columns={**names, "joules_to_target": "energy_j"})
    return per_run[["run_id", "reached", "round", "sim_time_s", "energy_j"]]


def _pick_column(columns: Iterable[Any], suffix: str) -> Any:
    found = [c for c in columns if str(c).endswith(suffix)]
    found.sort(key=lambda c: ("uplink" not in c, c))  # uplink first: it is the costly link
    return found[0] if found else None


def best_tau_table(
    records: pd.DataFrame,
    target: float,
    *,
    snr: str | None = None,
    bandwidth: str | None = None,
    tau: str = "algorithm.local.steps",
    seed: str = "seed",
    metric: str = "test_accuracy",
) -> pd.DataFrame:
    """Per (SNR, bandwidth) cell: the median, min and max over seeds of the tau that reached
    `target` with the fewest joules (read between the evaluations around the target, as
    `flnet analyze` reads them).

    `records` is a sweep's records (one run per `point`, or per seed and field values).
    A tau that never reaches the target costs infinitely many joules; a seed where no tau
    reached it has no best tau and is left out of the median (`seeds_reached` counts the
    others). Ties go to the smaller tau. SNR and bandwidth columns default to the swept
    fields ending in `snr_db` and `bandwidth_hz`; either may be absent (one row or column).
    """

    snr = snr or _pick_column(records.columns, "snr_db")
    bandwidth = bandwidth or _pick_column(records.columns, "bandwidth_hz")
    if tau not in records or not (snr or bandwidth):
        raise ResultsError(
            f"a best-tau table needs a `{tau}` column and a swept SNR or "
            "bandwidth column (…snr_db, …bandwidth_hz)"
        )
    rec = records.copy()
    for name, col in (("snr", snr), ("bandwidth", bandwidth)):
        rec[name] = rec[col] if col else "as in scenario"
    rec["seed"] = rec[seed] if seed in rec else 0
    keys = [*(["point"] if "point" in rec else []), "seed", "snr", "bandwidth", tau]
    per_run = to_target(rec, target, metric, keys=keys, interpolate=True)
    per_seed, per_cell = best_tau(per_run, "joules", tau, cell=["snr", "bandwidth"])
    reached = per_seed.groupby(["snr", "bandwidth"], sort=True).best_tau.count()
    out = per_cell[["snr", "bandwidth", "best_tau_median", "best_tau_min", "best_tau_max"]]
    out = out.assign(seeds=per_cell.seeds.to_numpy(), seeds_reached=reached.to_numpy())
    out.attrs.update(snr=snr, bandwidth=bandwidth, tau=tau, target=target, metric=metric)
    return out


def axis_name(column: str | None) -> str:
    """A readable axis label with its unit, from a field name with a unit suffix."""
    known = {
        "radio.uplink_snr_db": "uplink SNR (dB)",
        "radio.downlink_snr_db": "downlink SNR (dB)",
        "radio.uplink.bandwidth_hz": "uplink bandwidth (Hz)",
        "radio.downlink.bandwidth_hz": "downlink bandwidth (Hz)",
        "algorithm.local.steps": "local steps tau",
    }
    if column is None:
        return ""
    if column in known:
        return known[column]
    units = {"_db": "dB", "_hz": "Hz", "_s": "s", "_j": "J", "_dbm": "dBm", "_w": "W", "_m": "m"}
    for suffix, unit in units.items():
        if column.endswith(suffix):
            return f"{column[: -len(suffix)]} ({unit})"
    return column


@_styled
def best_tau_figure(table: pd.DataFrame) -> Figure:
    """Heatmap of best_tau_table: colour is the median best tau over seeds, each cell
    annotated with the median and its [min-max] spread (and how many seeds reached the target
    when not all did)."""
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import EngFormatter

    snrs = sorted(table.snr.unique(), key=_sort_key)
    bws = sorted(table.bandwidth.unique(), key=_sort_key)
    grid = table.pivot(index="snr", columns="bandwidth", values="best_tau_median").reindex(
        index=snrs, columns=bws
    )
    fig, (ax,) = _figure(
        width_in=max(4.8, 1.25 * len(bws) + 2.4), height_in=max(3.4, 0.75 * len(snrs) + 1.6)
    )
    values = grid.to_numpy(float)
    finite = values[np.isfinite(values)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (1.0, 2.0)
    norm = LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 2) if lo > 0 else None
    import matplotlib as mpl

    cmap = mpl.colormaps["viridis"].with_extremes(bad="0.85")
    image = ax.imshow(
        np.ma.masked_invalid(values), cmap=cmap, norm=norm, origin="lower", aspect="auto"
    )
    cells = table.set_index(["snr", "bandwidth"])
    for i, s in enumerate(snrs):
        for j, b in enumerate(bws):
            row = cells.loc[(s, b)]
            ax.text(
                j,
                i,
                _cell_text(row),
                ha="center",
                va="center",
                fontsize=8,
                color=_text_color(image, values[i, j]),
            )
    fmt = EngFormatter(places=0, sep="")
    ax.set_xticks(range(len(bws)), [fmt(b) if isinstance(b, (int, float)) else str(b) for b in bws])
    ax.set_yticks(range(len(snrs)), [_fmt_value(s) for s in snrs])
    ax.set_xlabel(axis_name(table.attrs.get("bandwidth")) or "bandwidth (not swept)")
    ax.set_ylabel(axis_name(table.attrs.get("snr")) or "SNR (not swept)")
    ax.grid(False)
    taus = sorted(set(table.best_tau_min.dropna()) | set(table.best_tau_max.dropna()))
    if len(taus) > 1:  # one value needs no scale: each cell says it
        bar = fig.colorbar(image, ax=ax, label="best tau (local steps), median over seeds")
        bar.set_ticks(taus, labels=[_fmt_value(float(t)) for t in taus])
        bar.minorticks_off()
    target = table.attrs.get("target")
    ax.set_title(
        f"tau with the fewest joules to {target:.0%} test accuracy" if target else "best tau",
        fontsize=10,
    )
    fig.flnet_table = table  # type: ignore[attr-defined]
    return fig


def _sort_key(v: Any) -> tuple[int, float, str]:
    return (0, float(v), "") if isinstance(v, (int, float, np.number)) else (1, 0.0, str(v))


def _cell_text(row: Any) -> str:
    if not row.seeds_reached:
        return "not\nreached"
    text = _fmt_value(float(row.best_tau_median))
    text += f"\n[{_fmt_value(float(row.best_tau_min))}–{_fmt_value(float(row.best_tau_max))}]"
    if row.seeds_reached < row.seeds:
        text += f"\n{int(row.seeds_reached)}/{int(row.seeds)} seeds"
    return text


def _text_color(image: Any, value: float) -> str:
    if not np.isfinite(value):
        return "black"
    r, g, b, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def best_tau_applies(res: Results) -> bool:
    """A best-tau heatmap needs tau swept with at least two values and an SNR or bandwidth
    field swept with at least two too (one cell is no map: the report's best-tau table says
    it)."""
    tau = "algorithm.local.steps"
    return (
        tau in res.fields
        and tau in res.records
        and res.records[tau].nunique() > 1
        and any(
            str(f).endswith(("snr_db", "bandwidth_hz"))
            and f in res.records
            and res.records[f].nunique() > 1
            for f in res.fields
        )
    )


def _sweep_records(res: Results) -> pd.DataFrame:
    return res.records.rename(columns={"run_id": "point"})


@_styled
def consensus_figure(results: ResultsLike) -> Figure | None:
    """Consensus distance (gossip runs) against rounds and simulated time, one series per group
    with a band over seeds; None when no record has one."""
    res = as_results(results)
    col = "consensus_distance"
    if col not in res.records or not res.records[col].notna().any():
        return None
    n = len(res.groups)
    fig, axes = _figure(ncols=2, sharey=True, height_in=3.6 + _legend_height_in(n))
    tables: list[pd.DataFrame] = []
    for ax, x in zip(axes, ("round", "sim_time_s")):
        n = _draw_series(ax, res, x, col, tables)
        ax.set_xlabel(_x_label(res, x))
        ax.set_ylabel("consensus distance (parameter units²)" if ax is axes[0] else "")
        if (res.records[col].dropna() > 0).all():
            ax.set_yscale("log")
    _legend(fig, axes[0], n, "consensus distance between the nodes' models", res)
    fig.flnet_table = pd.concat(tables, ignore_index=True) if tables else None  # type: ignore[attr-defined]
    return fig


PLOTS = {
    "accuracy_vs_time": lambda res, target: accuracy_figure(res, "sim_time_s"),
    "accuracy_vs_energy": lambda res, target: accuracy_figure(res, "energy_j"),
    "accuracy_vs_rounds": lambda res, target: accuracy_figure(res, "round"),
    "energy_split": lambda res, target: energy_split_figure(res),
    "energy_by_device_class": lambda res, target: energy_by_class_figure(res),
    "best_tau": lambda res, target: (
        best_tau_figure(best_tau_table(_sweep_records(res), target))
        if best_tau_applies(res)
        else None
    ),
    "consensus_distance": lambda res, target: consensus_figure(res),
}
NEEDS = {
    "energy_by_device_class": "a ledger in the run folders",
    "best_tau": "a sweep over algorithm.local.steps and an SNR or bandwidth field",
    "consensus_distance": "a consensus_distance column in the records (gossip runs)",
}


def figures(
    results: ResultsLike, target: float | None = None, only: Iterable[str] | None = None
) -> dict[str, Figure]:
    """The figures that apply to these results, by file stem (`only`: just these, each of
    which must apply)."""
    res = as_results(results)
    target = res.target() if target is None else target
    unknown = sorted(set(only or ()) - set(PLOTS))
    if unknown:
        raise ResultsError(f"no plot named {', '.join(unknown)}; the plots are {', '.join(PLOTS)}")
    out = {name: PLOTS[name](res, target) for name in PLOTS if not only or name in only}
    for name in only or ():
        if out[name] is None:
            raise ResultsError(f"{name} does not apply to these results: it needs {NEEDS[name]}")
    return {name: fig for name, fig in out.items() if fig is not None}


def check_target(target: float | None) -> float | None:
    if target is not None and not 0 < target <= 1:
        raise ResultsError(f"target accuracy is a fraction in (0, 1]; got {target:g}")
    return target


def make_plots(
    results: ResultsLike,
    out_dir: str | Path,
    target: float | None = None,
    only: Iterable[str] | None = None,
    fmt: str = "png",
) -> dict[str, Path]:
    """Write every figure that applies (or those named in `only`) as `out_dir/<name>.<fmt>`
    (png, svg or pdf), each with the CSV of the data it draws beside it (`<name>.csv`);
    returns {name: figure path}."""
    if fmt not in FORMATS:
        raise ResultsError(f"a figure is written as {', '.join(FORMATS)}; got {fmt!r}")
    res = as_results(results)
    drawn = figures(res, check_target(target), only)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, fig in drawn.items():
        written[name] = save_figure(fig, out / f"{name}.{fmt}")
        table = figure_table(fig)
        if table is not None:
            table.to_csv(out / f"{name}.csv", index=False)
    return written


def figure_tables(results: ResultsLike, target: float | None = None) -> dict[str, pd.DataFrame]:
    """The tidy table behind each figure that applies, by the figure's file stem."""
    drawn = figures(results, target)
    return {n: t for n, fig in drawn.items() if (t := figure_table(fig)) is not None}


def default_output(paths: list[str | Path], name: str) -> Path:
    """`RESULTS/name` for one results folder; with several, the user must choose (-o)."""
    if len(paths) != 1:
        raise ResultsError(
            f"several results folders given: choose where to write the {name} with -o"
        )
    return Path(paths[0]) / name
