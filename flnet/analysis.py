"""Questions asked of a sweep's records: how much it cost to reach a target, which tau costs
least, which points no other point beats. pandas in, pandas out.

A run that never reached the target is kept as censored (``reached`` False, its cost to target
NaN, what it spent without reaching it in the ``censored_at_*`` columns); when choosing tau it
counts as an infinite cost, never as a missing row. Seeds are never pooled before a choice is
made: the best tau is chosen per seed, then summarised over seeds.

A study that runs its points itself (`run_point`) records a point whose run raises as a
status with its error, as a sweep does, and goes on.

How a run ended is part of its result. Records that carry a ``status`` column (`with_status`:
a run's summary or a sweep's points table) are read with it: a run that diverged, failed or was
killed has no accuracy at or after its end (`accuracy_at` gives NaN), never reached a target
(`to_target`), and is counted by its status, not as a number, in `median_range`; `per_seed`
decides a claim seed by seed ("holds in k of n seeds").
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd

from flnet.errors import FlnetError, ScenarioError
from flnet.result_files import read_table

if TYPE_CHECKING:
    from flnet.scenario import Scenario

OK = "completed"  # the one status whose figures are a result (`flnet.runner.summarize`)
STATUS = ("status", "diverged_round", "diverged_by", "ended_s")  # what `with_status` adds
COSTS = {"rounds": "round", "seconds": "sim_time_s", "joules": "energy_j", "bits": "bits"}
TAU = "algorithm.local.steps"


def _run_keys(records: pd.DataFrame) -> list[str]:
    """What tells one run from another: the sweep's point hash, else scenario and seed."""
    if "point" in records:
        return ["point"]
    return [c for c in ("scenario", "seed") if c in records]


def swept_columns(df: pd.DataFrame) -> list[str]:
    """Columns that name scenario fields by their dotted path (what a sweep adds)."""
    return [c for c in df.columns if "." in c]


def to_target(
    records: pd.DataFrame,
    target: float,
    metric: str = "test_accuracy",
    keys: list[str] | None = None,
    *,
    interpolate: bool = False,
) -> pd.DataFrame:
    """One row per run: the rounds, seconds, joules (compute and radio) and bits spent up to
    the first evaluation with `metric` >= `target`.

    `metric` is any accuracy column of the records, e.g. ``client_accuracy_worst`` for the
    worst client. Runs that never reach it stay, with ``reached`` False and NaN costs; their
    ``censored_at_*`` columns give what they spent without reaching it (a lower bound).
    Columns that are constant within a run (swept fields, seed, its `STATUS`) are carried along.

    `interpolate`: seconds, joules and bits to target are read where the straight line between
    the last evaluation below the target and the first at or above it crosses the target (the
    first evaluation's own costs when none lies below); the two evaluations' costs bracket it
    (``*_to_target_low``, ``*_to_target_high``) and ``evaluations_apart`` says how many rounds
    apart they are. Rounds to target stay the first evaluation's round.

    A run whose ``status`` (`with_status`) is not completed is refused: ``reached`` False even
    if an evaluation before it diverged (or failed) passed the target, since the method's result
    is then no model at all; a cost to target would rank a diverging setting as a success. Its
    ``censored_at_*`` give what it spent up to its last evaluation.
    """
    if metric not in records:
        raise FlnetError(
            f"no column {metric!r} in the records; accuracy columns: "
            f"{', '.join(c for c in records.columns if 'accuracy' in c)}"
        )
    if not 0 < target <= 1:
        raise FlnetError(f"target must be in (0, 1], got {target}")
    keys = keys or _run_keys(records)
    rows = []
    for _, run in records.groupby(keys, sort=False, dropna=False):  # in the sweep's order
        run = run.sort_values("round", kind="stable")
        carried = {
            c: run[c].iloc[0]
            for c in run.columns
            if c in keys or c == "seed" or "." in c or c in STATUS
        }
        hit = run[run[metric] >= target]
        first = hit.iloc[0] if len(hit) and _ok(run) else None
        last = run.iloc[-1]
        row = {**carried, "reached": first is not None}
        costs = _costs(first)
        if interpolate:
            before = _before(run, first, metric)
            low = _costs(before if first is not None else None)
            if before is not None and first is not None:
                share = (target - before[metric]) / (first[metric] - before[metric])
                costs.update({k: low[k] + share * (costs[k] - low[k]) for k in INTERPOLATED})
            elif first is not None:
                low = dict(costs)
            for k in INTERPOLATED[:3]:
                row[f"{k}_to_target_low"] = low[k]
                row[f"{k}_to_target_high"] = _costs(first)[k]
            row["evaluations_apart"] = (
                first["round"] - before["round"]
                if first is not None and before is not None
                else 0.0
                if first is not None
                else math.nan
            )
        for name, value in costs.items():
            row[f"{name}_to_target"] = value
        for name, value in _costs(None if first is not None else last).items():
            row[f"censored_at_{name}"] = value
        row[f"best_{metric}"] = run[metric].max()
        row[f"final_{metric}"] = last[metric]
        rows.append(row)
    return pd.DataFrame(rows)


# the costs read between two evaluations (rounds stay whole: the first evaluation's)
INTERPOLATED = ("seconds", "joules", "bits", "joules_compute", "joules_radio")


def _before(run: pd.DataFrame, first: pd.Series | None, metric: str) -> pd.Series | None:
    """The evaluation just before `first` (the first at or above the target), if any."""
    if first is None:
        return None
    earlier = run[run["round"] < first["round"]].dropna(subset=[metric])
    return earlier.iloc[-1] if len(earlier) else None


def _ok(run: pd.DataFrame) -> bool:
    """Whether one run's records (without a status column: as given) ended completed."""
    return "status" not in run or (len(run) > 0 and run["status"].iloc[0] == OK)


def _costs(row: pd.Series | None) -> dict:
    """Cumulative costs at one evaluation (NaN for none)."""
    if row is None:
        return dict.fromkeys(
            ("rounds", "seconds", "joules", "joules_compute", "joules_radio", "bits"), math.nan
        )
    radio = sum(row.get(c, 0.0) for c in ("energy_uplink_j", "energy_downlink_j", "energy_d2d_j"))
    bits = sum(row.get(c, 0.0) for c in ("bits_up", "bits_down", "bits_d2d"))
    return {
        "rounds": row["round"],
        "seconds": row["sim_time_s"],
        "joules": row["energy_j"],
        "joules_compute": row.get("energy_compute_j", math.nan),
        "joules_radio": radio,
        "bits": bits,
    }


def best_tau(
    per_run: pd.DataFrame,
    cost: str = "joules",
    tau: str | list[str] = TAU,
    cell: list[str] | None = None,
    seed: str = "seed",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tau (or any swept field, `tau`) that minimises `cost`-to-target (rounds, seconds,
    joules or bits), per seed in each cell of the other swept fields; not reached counts as
    infinity.

    `tau` may name several fields (a list, or one string with commas, e.g. local steps, CPU
    frequency and transmit power): the choice is then among their combinations tried, each as
    one value (`joint_choice`), the values shown as ``steps=5, cpu_hz=1e+09``; the tables add
    each field's winning value (``best_<field>``, and the per-seed medians and ranges of the
    winners are per field, ``best_<field>_median`` ...); a winner is at the edge when any of
    its fields is at the edge of that field's grid.

    Returns (per_seed, per_cell). per_seed: one row per cell and seed with its best tau and
    cost (``best_tau`` NaN when no tau reached the target; a tie goes to the smaller tau), the
    seed's runner-up, and whether the seed ranks them at all (``decided``: False on a tie, or
    when `to_target`'s brackets of the two overlap while its evaluations lie more than a
    round apart, ``too_sparse``).
    per_cell: the winner, the tau with the smallest median cost over seeds (``best_tau``), with
    its cost's median and range over seeds; the per-seed winners (``best_tau_per_seed``, with
    their median and range); the verdict, compared seed by seed (paired: the same seed's data
    and draws): ``clear`` when every seed picks the same tau and ranks it, else "no clear
    winner" (``within_spread`` is its negation); ``too_sparse`` when a seed cannot rank for
    sparse evaluation; ``edge`` when the winner is the smallest or largest tau tried;
    ``verdict`` says it all in words.
    """
    fields = chosen_fields(tau)
    if len(fields) > 1 or (
        fields[0] in per_run and not _numeric(list(per_run[fields[0]].dropna()))
    ):  # a field of names (a distribution's, a policy's) has no median nor edge: its labels
        return _best_joint(per_run, cost, fields, cell, seed)
    tau = fields[0]
    column = f"{cost}_to_target"
    if column not in per_run:
        raise FlnetError(f"cost must be one of {', '.join(COSTS)}, got {cost!r}")
    if tau not in per_run:
        raise FlnetError(f"no column {tau!r}: the records do not sweep it")
    cell = [c for c in (cell if cell is not None else swept_columns(per_run)) if c != tau]
    df = per_run.assign(_cost=per_run[column].where(per_run.reached, np.inf))
    bracket = f"{column}_low" in df and "evaluations_apart" in df
    seeds = [seed] if seed in df else []

    per_seed = []
    for key, group in df.groupby([*cell, *seeds], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group = group.sort_values([tau, "_cost"], kind="stable")  # a tie: the smaller tau
        ranked = group.sort_values("_cost", kind="stable")
        finite = np.isfinite(ranked._cost.to_numpy())
        best = ranked.iloc[0] if finite.any() else None
        second = ranked.iloc[1] if len(ranked) > 1 else None
        tie = best is not None and second is not None and second._cost == best._cost
        sparse = (
            bracket
            and best is not None
            and second is not None
            and bool(np.isfinite(second._cost))
            and second[f"{column}_low"] <= best[f"{column}_high"]
            and max(best.evaluations_apart, second.evaluations_apart) > 1
        )
        per_seed.append(
            {
                **dict(zip([*cell, *seeds], key)),
                "best_tau": best[tau] if best is not None else math.nan,
                f"best_{column}": best._cost if best is not None else math.inf,
                "runner_up_tau": second[tau] if second is not None else math.nan,
                "decided": best is not None and not tie and not sparse,
                "too_sparse": bool(sparse),
                "taus_tried": len(group),
            }
        )
    per_seed = pd.DataFrame(per_seed)

    per_cell = []
    groups = df.groupby(cell, sort=True, dropna=False) if cell else [((), df)]
    for key, group in groups:
        key = key if isinstance(key, tuple) else (key,)
        by_tau = group.groupby(tau)._cost
        median = by_tau.median().sort_index()
        winner = median.idxmin() if np.isfinite(median).any() else None
        row = dict(zip(cell, key))
        mine = per_seed
        for c, v in row.items():
            mine = mine[mine[c] == v] if not _isnan(v) else mine[mine[c].isna()]
        taus = mine.best_tau.dropna()
        row.update(
            seeds=len(mine),
            best_tau=winner if winner is not None else math.nan,
            **{
                f"{column}_median": median.get(winner, math.inf),
                f"{column}_min": by_tau.min().get(winner, math.inf),
                f"{column}_max": by_tau.max().get(winner, math.inf),
            },
            best_tau_per_seed=", ".join(_fmt(t) for t in mine.best_tau),
            best_tau_median=taus.median() if len(taus) else math.nan,
            best_tau_min=taus.min() if len(taus) else math.nan,
            best_tau_max=taus.max() if len(taus) else math.nan,
        )
        others = median.drop(winner) if winner is not None else median
        row["runner_up_tau"] = (
            others.idxmin() if len(others) and np.isfinite(others).any() else math.nan
        )
        row[f"runner_up_{column}_median"] = others.min() if len(others) else math.inf
        grid = sorted(v for v in group[tau].dropna().unique())
        clear = (
            winner is not None
            and len(mine) > 0
            and bool(mine.decided.all())
            and bool((mine.best_tau == winner).all())
        )
        row["clear"] = clear
        row["within_spread"] = not clear
        row["too_sparse"] = bool(mine.too_sparse.any())
        row["edge"] = winner is not None and len(grid) > 1 and winner in (grid[0], grid[-1])
        row["verdict"] = _verdict(mine, winner, clear, row["edge"], grid, tau, seed)
        per_cell.append(row)
    return per_seed, pd.DataFrame(per_cell)


def chosen_fields(tau: str | list[str]) -> list[str]:
    """The field or fields a choice is among: ``"a,b"`` or ``["a", "b"]`` -> ``["a", "b"]``."""
    fields = tau.split(",") if isinstance(tau, str) else list(tau)
    fields = [f.strip() for f in fields if f.strip()]
    if not fields or len(set(fields)) != len(fields):
        raise FlnetError(f"choose one or more different swept fields, got {tau!r}")
    return fields


JOINT = "_joint_choice"  # the column `joint_choice` adds


def _short(field: str) -> str:
    return "tau" if field == TAU else field.rsplit(".", 1)[-1]


def choice_name(tau: str | list[str]) -> str:
    """What a choice is called: ``tau``, a field (``algorithm.local.epochs``), or several
    (``(tau, cpu_hz, tx_power_dbm)``)."""
    fields = chosen_fields(tau)
    if len(fields) == 1:
        return "tau" if fields[0] == TAU else fields[0]
    return "(" + ", ".join(_short(f) for f in fields) + ")"


def joint_choice(per_run: pd.DataFrame, fields: list[str]) -> tuple[pd.DataFrame, dict]:
    """`per_run` with a column `JOINT` numbering each run's combination of `fields` in the
    order of their values (so a tie goes to the smallest values, first field first), and the
    numbers' labels (``steps=5, cpu_hz=1e+09``)."""
    missing = [f for f in fields if f not in per_run]
    if missing:
        raise FlnetError(f"no column {', '.join(map(repr, missing))}: the records do not sweep it")
    combos = per_run[fields].drop_duplicates().sort_values(fields, kind="stable")
    combos = combos.reset_index(drop=True)
    labels = {
        i: ", ".join(f"{_short(f)}={_value(row[f])}" for f in fields)
        for i, row in combos.iterrows()
    }
    code = per_run[fields].merge(combos.reset_index(), on=fields, how="left")["index"]
    return per_run.assign(**{JOINT: code.to_numpy()}), labels


def _value(v: Any) -> str:
    """A field's value in a label: 5, 0.5, 1e+09, fixed."""
    if isinstance(v, str) or _isnan(v):
        return _fmt(v) if not isinstance(v, str) else v
    return _fmt(v) if abs(float(v)) < 1e6 else f"{v:g}"


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float, np.number)) for v in values)


def _best_joint(
    per_run: pd.DataFrame, cost: str, fields: list[str], cell: list[str] | None, seed: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`best_tau` among the combinations of several `fields` (see there)."""
    coded, labels = joint_choice(per_run, fields)
    cell = [c for c in (cell if cell is not None else swept_columns(per_run)) if c not in fields]
    per_seed, per_cell = best_tau(coded, cost, JOINT, cell=cell, seed=seed)
    values = coded.drop_duplicates(JOINT).set_index(JOINT)[fields]

    def shown(code: Any) -> Any:
        return labels.get(code, math.nan) if not _isnan(code) else math.nan

    def value(code: Any, f: str) -> Any:
        return values.at[code, f] if not _isnan(code) else math.nan

    name = "(" + ", ".join(_short(f) for f in fields) + ")"
    for f in fields:
        per_seed[f"best_{f}"] = [value(c, f) for c in per_seed.best_tau]
    rows = []
    for _, row in per_cell.iterrows():
        mine = per_seed
        for c in cell:
            v = row[c]
            mine = mine[mine[c] == v] if not _isnan(v) else mine[mine[c].isna()]
        grids = {
            f: sorted(coded.loc[_in_cell(coded, cell, row), f].dropna().unique()) for f in fields
        }
        winner = row.best_tau
        at_edge = [
            f
            for f in fields
            if not _isnan(winner)
            and len(grids[f]) > 1
            and _numeric(grids[f])
            and value(winner, f) in (grids[f][0], grids[f][-1])
        ]
        out = row.to_dict()
        out["edge"] = bool(at_edge)
        out["verdict"] = _verdict(
            mine, None if _isnan(winner) else winner, bool(row.clear), False, [], name, seed, shown
        )
        if at_edge:
            out["verdict"] += (
                "; at the edge of the grid of "
                + ", ".join(
                    f"{_short(f)} {{{', '.join(_value(g) for g in grids[f])}}}" for f in at_edge
                )
                + ": try beyond it"
            )
        for f in fields:
            out[f"best_{f}"] = value(winner, f)
            won = mine[f"best_{f}"].dropna()
            spread = len(won) > 0 and _numeric(list(won))  # a policy's name has none
            out[f"best_{f}_median"] = won.median() if spread else math.nan
            out[f"best_{f}_min"] = won.min() if spread else math.nan
            out[f"best_{f}_max"] = won.max() if spread else math.nan
        out["best_tau"] = shown(winner)
        out["runner_up_tau"] = shown(row.runner_up_tau)
        out["best_tau_per_seed"] = "; ".join(
            labels[c] if not _isnan(c) else "none" for c in mine.best_tau
        )
        for k in ("best_tau_median", "best_tau_min", "best_tau_max"):
            out[k] = math.nan  # a combination has no median: see best_<field>_median
        rows.append(out)
    per_seed = per_seed.assign(
        best_tau=[shown(c) for c in per_seed.best_tau],
        runner_up_tau=[shown(c) for c in per_seed.runner_up_tau],
    )
    return per_seed, pd.DataFrame(rows, columns=list(rows[0]) if rows else per_cell.columns)


def _in_cell(df: pd.DataFrame, cell: list[str], row: pd.Series) -> pd.Series:
    """Which rows of `df` lie in `row`'s cell."""
    inside = pd.Series(True, index=df.index)
    for c in cell:
        v = row[c]
        inside &= df[c].isna() if _isnan(v) else df[c] == v
    return inside


def _verdict(
    mine: pd.DataFrame,
    winner: Any,
    clear: bool,
    edge: bool,
    grid: list,
    tau: str,
    seed: str,
    fmt: Any = None,
) -> str:
    """A cell's answer in words, compared seed by seed (`fmt`: how a value is shown)."""
    name = tau if fmt is not None else _short(tau)

    def show(v: Any) -> str:  # a value as chosen: tau=5 (a label of several fields as it is)
        return fmt(v) if fmt is not None else f"{name}={_fmt(v)}"

    n = len(mine)
    if winner is None:
        return f"no {name} reached the target in any of {n} seeds"
    if mine.too_sparse.any():
        bad = mine[mine.too_sparse]
        seeds = ", ".join(_fmt(v) for v in bad[seed]) if seed in bad else "?"
        pairs = "; ".join(
            sorted({f"{show(r.best_tau)} vs {show(r.runner_up_tau)}" for r in bad.itertuples()})
        )
        return (
            f"cannot rank: evaluation too sparse (seed {seeds}: {pairs} reach the target "
            "between the same evaluations); rerun with run.eval_every=1"
        )
    if clear:
        text = f"{show(winner)} in every seed ({n} of {n})"
    else:
        picks = []
        for t, rows in mine.groupby(mine.best_tau.fillna(math.inf), sort=True):
            which = "none reached" if not np.isfinite(t) else show(t)
            ties = ", tied" if not rows.decided.all() and np.isfinite(t) else ""
            seeds = ", ".join(_fmt(v) for v in rows[seed]) if seed in rows else str(len(rows))
            picks.append(f"{which} (seed {seeds}{ties})")
        text = "no clear winner: " + "; ".join(picks)
    if edge:
        text += f"; at the edge of the grid {{{', '.join(_fmt(g) for g in grid)}}}: try beyond it"
    return text


def best_tau_shown(per_cell: pd.DataFrame, cost: str, *, runner_up: bool = False) -> pd.DataFrame:
    """What a reader is shown of `best_tau`'s per-cell table (`cost` as there): the cell, the
    winner and the per-seed winners with their spread, the winner's cost over seeds, whether
    the winner is clear; `runner_up` adds the next best tau."""
    column = f"{cost}_to_target"
    return per_cell[
        [
            *swept_columns(per_cell),
            "best_tau",
            "best_tau_per_seed",
            "best_tau_median",
            "best_tau_min",
            "best_tau_max",
            f"{column}_median",
            f"{column}_min",
            f"{column}_max",
            *(["runner_up_tau"] if runner_up else []),
            "within_spread",
            "verdict",
        ]
    ]


def _isnan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _fmt(v: Any) -> str:
    if _isnan(v):
        return "none"
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def pareto(df: pd.DataFrame, objectives: dict[str, str] | None = None) -> pd.DataFrame:
    """`df` with a column ``on_front``: True for rows no other row beats on every objective
    (at least as good on all, better on one). `objectives` maps columns to "max" or "min";
    the default is final accuracy up, simulated seconds and joules down. Rows with a missing
    objective are never on the front and beat nothing."""
    objectives = objectives or {
        "final_test_accuracy": "max",
        "sim_time_s": "min",
        "energy_j": "min",
    }
    for c, sense in objectives.items():
        if c not in df or sense not in ("max", "min"):
            raise FlnetError(
                f"objective {c!r}: {sense!r}; columns must exist and be 'max' or 'min'"
            )
    values = np.column_stack(
        [df[c].to_numpy(float) * (-1 if s == "max" else 1) for c, s in objectives.items()]
    )  # all to be minimised
    ok = ~np.isnan(values).any(axis=1)
    front = ok.copy()
    for i in np.flatnonzero(ok):
        others = values[ok]
        beaten = (others <= values[i]).all(axis=1) & (others < values[i]).any(axis=1)
        front[i] = not beaten.any()
    return df.assign(on_front=front)


def read_records(path: str | Path) -> pd.DataFrame:
    """A sweep folder's (or a run folder's) records, or a records file; a sweep's records come
    with each run's status from the points.csv beside them (`with_status`), so a diverged run
    is read as one."""
    path = Path(path)
    candidates = [path] if path.is_file() else [path / "records.parquet", path / "records.csv"]
    for p in candidates:
        if p.exists():
            records = read_table(p)
            points = p.parent / "points.csv"
            if "point" in records and points.exists():
                records = with_status(records, read_table(points))
            return records
    raise FlnetError(f"no records in {path} (expected records.parquet or records.csv)")


WORK_KINDS = ("download", "compute", "upload")  # one client's piece of work, in this order


def wasted_energy_j(ledger: pd.DataFrame) -> dict[str, float]:
    """Joules spent on work that came to nothing, by how it ended: every row of a client's
    piece of work (its download, compute and upload) counts under the outcome of the work's
    last row when that is not ``ok`` (dropped, interrupted, deadline, cancelled, lost, battery):
    the compute of a client whose upload was cut is wasted too. A piece of work is a node's
    rows of one pattern step, a new one starting at each download (a stream client may start
    twice at one server version). Evaluation and device-to-device rows are not client work."""
    rows = ledger[ledger.kind.isin(WORK_KINDS)]
    if rows.empty:
        return {}
    order = rows.kind.map({k: i for i, k in enumerate(WORK_KINDS)})
    rows = rows.assign(_order=order).sort_values(
        ["pattern", "round", "node", "start_s", "_order"], kind="stable"
    )
    starts = (rows.kind == "download").to_numpy()
    same = (
        (rows[["pattern", "round", "node"]].shift() == rows[["pattern", "round", "node"]])
        .all(axis=1)
        .to_numpy()
    )
    work = np.cumsum(starts | ~same)  # a new piece of work: a download, or another node/step
    last = rows.groupby(work, sort=False).outcome.transform("last")
    wasted = rows[last.to_numpy() != "ok"]
    by = wasted.groupby(last[last != "ok"].to_numpy()).energy_j.sum()
    return {str(k): float(v) for k, v in by.items()}


def device_costs(ledger: pd.DataFrame) -> pd.DataFrame:
    """Per device (client id, the index; the server is left out), from a run's ledger: bits
    sent (uploads, D2D transmissions) and received (downloads, D2D receptions), seconds
    computing, transmitting and receiving, and joules. Sums over its rows, so a run's totals
    are this frame's column sums."""
    dev = ledger[ledger.node >= 0]
    seconds = dev.end_s - dev.start_s
    by_kind = {k: dev.kind == k for k in ("compute", "upload", "download", "d2d", "d2d_rx")}
    d2d_in = ledger[(ledger.kind == "d2d") & (ledger.peer >= 0)]
    nodes = pd.Index(sorted(set(dev.node) | set(d2d_in.peer)), name="node")

    def per_node(values: pd.Series, where: pd.Series) -> pd.Series:
        return values[where].groupby(dev.node[where]).sum().reindex(nodes, fill_value=0.0)

    received = d2d_in.bits.groupby(d2d_in.peer).sum().reindex(nodes, fill_value=0.0)
    return pd.DataFrame(
        {
            "bits_sent": per_node(dev.bits, by_kind["upload"] | by_kind["d2d"]),
            "bits_received": per_node(dev.bits, by_kind["download"]) + received,
            "compute_s": per_node(seconds, by_kind["compute"]),
            "transmit_s": per_node(seconds, by_kind["upload"] | by_kind["d2d"]),
            "receive_s": per_node(seconds, by_kind["download"] | by_kind["d2d_rx"]),
            "energy_j": per_node(dev.energy_j, dev.kind.notna()),
        },
        index=nodes,
    ).astype(float)


# ---------------------------------------------------------------- how a run ended


def with_status(
    records: pd.DataFrame, ended: dict | pd.DataFrame, on: str | list[str] = "point"
) -> pd.DataFrame:
    """`records` with each run's `STATUS` columns: ``status`` (completed, diverged, failed,
    killed, ...), ``diverged_round``, ``diverged_by`` (the rule of ``run.divergence`` that fired,
    `flnet.divergence`; none in summaries written before rules existed) and ``ended_s``
    (simulated seconds at its end: a diverged run's model stopped being finite then). `ended`
    is one run's summary (`flnet.run`'s ``Result.summary``) or a sweep's points table, matched
    on `on`."""
    if isinstance(ended, dict):
        return records.assign(
            status=ended.get("status"),
            diverged_round=ended.get("diverged_round"),
            diverged_by=ended.get("diverged_by"),
            ended_s=ended.get("sim_time_s", math.nan),
        )
    on = [on] if isinstance(on, str) else on
    missing = [c for c in (*on, "status") if c not in ended]
    if missing:
        raise FlnetError(f"the points table has no column {', '.join(missing)}")
    status = (
        ended[[*on, "status"]]
        .assign(
            diverged_round=ended.get("diverged_round", math.nan),
            diverged_by=ended.get("diverged_by"),
            ended_s=ended.get("sim_time_s", math.nan),
        )
        .drop_duplicates(subset=on)
    )  # a sweep lists a point once per grid cell that names it
    return records.drop(columns=[c for c in STATUS if c in records]).merge(
        status, on=on, how="left", validate="many_to_one"
    )


def ended_as(status: str | None, diverged_round: Any = None, diverged_by: Any = None) -> str:
    """How a run ended, as a reader is shown it: ``completed``, ``diverged at round 37``,
    ``diverged at round 70 (consensus_above)`` (with the rule that fired, where known),
    ``failed``, ``killed``, ..."""
    if status is None or _isnan(status):
        return "unknown"
    if status != "diverged":
        return str(status)
    shown = "diverged"
    if diverged_round is not None and not _isnan(diverged_round):
        shown += f" at round {int(diverged_round)}"
    if diverged_by is not None and not _isnan(diverged_by) and str(diverged_by):
        shown += f" ({diverged_by})"
    return shown


def accuracy_at(
    run: pd.DataFrame,
    *,
    t_s: float | None = None,
    round_: float | None = None,
    metric: str = "test_accuracy",
) -> float:
    """`metric` at the last evaluation at or before simulated time `t_s` (or round `round_`)
    of one run's records; NaN before its first evaluation, and NaN at or after the end of a run
    that did not complete (`with_status`): a diverged run has no model from the step it
    diverged, a failed or killed one none we know of after its last evaluation. The run's last
    finite figure is never its result."""
    if (t_s is None) == (round_ is None):
        raise FlnetError("accuracy_at takes one of t_s or round_")
    column, at = ("sim_time_s", t_s) if t_s is not None else ("round", round_)
    assert at is not None
    if not _ok(run):
        first = run.iloc[0] if len(run) else None
        end = _end(run, column, first)
        if end is None or at >= end:
            return math.nan
    seen = run[run[column] <= at]
    return float(seen[metric].iloc[-1]) if len(seen) else math.nan


def _end(run: pd.DataFrame, column: str, first: pd.Series | None) -> float | None:
    """Where a run that did not complete ended, in `column`'s unit: where it diverged, else
    just after its last evaluation (None: it left no evaluation)."""
    if first is None:
        return None
    if first.get("status") == "diverged":
        key = "diverged_round" if column == "round" else "ended_s"
        value = first.get(key)
        if value is not None and not _isnan(value):
            return float(value)
    return math.nextafter(float(run[column].max()), math.inf)


def median_range(
    values: pd.Series | Sequence[float],
    status: pd.Series | Sequence[Any] | None = None,
    never: str = "never",
    digits: int = 4,
) -> str:
    """``median [min-max]`` of the runs' `values` that are figures, then how many runs have
    none and why (`status`: the same runs in the same order): a run whose status is not
    completed by its status (``1 diverged``), a completed run with NaN as `never` (e.g. never
    reached the target). A run that ended badly but has a figure (its accuracy before it
    diverged) is in the median. An infinite value is no figure either (a -inf that ranked a
    diverged run last is shown as the run's status), so a range is always finite. `values` and
    `status` may be plain lists (one entry per run)."""
    if not isinstance(values, pd.Series):
        values = pd.Series(list(values), dtype=float)
    ok = pd.Series(np.isfinite(values.to_numpy(dtype=float)), index=values.index)
    if status is not None:  # the runs in `values`' order, whatever its index
        status = pd.Series(list(status), index=values.index, dtype=object)
    parts = []
    if ok.any():
        v = values[ok].astype(float)
        parts.append(f"{v.median():.{digits}g} [{v.min():.{digits}g}-{v.max():.{digits}g}]")
    why = (
        status[~ok].where(status[~ok] != OK, never).fillna("unknown")
        if status is not None
        else pd.Series(never, index=values.index[~ok])
    )
    counts = why.value_counts(sort=False)
    if len(counts):
        told = ", ".join(f"{n} {reason}" for reason, n in counts.items())
        parts.append(f"({told})" if ok.any() else f"none: {told}")
    return " ".join(parts)


def censored_median(
    values: pd.Series, censored_at: pd.Series, status: pd.Series | None = None, digits: int = 4
) -> str:
    """Median over runs of a cost to target where a run that never reached it (NaN: censored)
    counts as infinite: the median itself when it is finite, else ``> x`` with the least any
    censored run spent (`censored_at`, `to_target`'s ``censored_at_*``); runs that did not
    complete are named after it (``(1 diverged)``)."""
    costs = pd.Series(values.to_numpy(dtype=float)).fillna(np.inf)
    med = float(np.median(costs)) if len(costs) else np.inf
    told = ""
    if status is not None:
        bad = pd.Series(status.to_numpy())[lambda s: s != OK]
        told = ", ".join(f"{n} {s}" for s, n in bad.value_counts(sort=False).items())
    suffix = f" ({told})" if told else ""
    if np.isfinite(med):
        return f"{med:.{digits}g}{suffix}"
    spent = censored_at.min()
    return (f"> {spent:.{digits}g}" if pd.notna(spent) else "-") + suffix


def final_value(run: pd.DataFrame, metric: str = "test_accuracy") -> float:
    """`metric` at one run's last evaluation (`accuracy_at` at its last round): NaN for a run
    that did not complete, never its last finite figure."""
    return accuracy_at(run, round_=float(run["round"].max()), metric=metric)


def run_ended(run: pd.DataFrame) -> str:
    """How one run ended (`ended_as`), read from its records' `STATUS` columns."""
    first = run.iloc[0]
    return ended_as(first.get("status"), first.get("diverged_round"), first.get("diverged_by"))


def decided(needed: Sequence[bool], holds: bool) -> bool | None:
    """A claim's verdict in one seed: `holds`, or None (undecided) when a run the claim needs
    (`needed`: whether each completed) did not complete. `per_seed` counts the Nones."""
    return bool(holds) if all(needed) else None


def statuses(
    status: pd.Series,
    diverged_round: pd.Series | None = None,
    diverged_by: pd.Series | None = None,
) -> str:
    """The runs' statuses in one cell: ``3 completed``, ``2 completed, 1 diverged at round 40``,
    ``1 diverged at round 70 (consensus_above)``."""
    rounds = [None] * len(status) if diverged_round is None else list(diverged_round)
    rules = [None] * len(status) if diverged_by is None else list(diverged_by)
    shown = [ended_as(s, r, b) for s, r, b in zip(status, rounds, rules)]
    counts = pd.Series(shown, dtype=object).value_counts(sort=False)
    return ", ".join(f"{n} {s}" for s, n in counts.items())


def per_seed(holds: pd.Series) -> tuple[str, str]:
    """A claim decided seed by seed: `holds` is True, False or NaN/None (undecided: a run it
    needs did not complete) per seed. Returns (verdict, detail): ``holds`` when it holds in every
    seed, ``does not hold`` in none, else ``holds in k of n seeds``; the detail adds the
    undecided seeds."""
    n = len(holds)
    decided = holds.dropna().astype(bool)
    k = int(decided.sum())
    undecided = n - len(decided)
    if n and k == n:
        verdict = "holds"
    elif k == 0 and undecided == 0:
        verdict = "does not hold"
    else:
        verdict = f"holds in {k} of {n} seeds"
    detail = f"holds in {k} of {n} seeds" + (f", {undecided} undecided" if undecided else "")
    return verdict, detail


# ---------------------------------------------------------------- a study's points, run here


class Point(NamedTuple):
    """One point of a study, run in this process (`run_point`)."""

    records: pd.DataFrame | None  # with `STATUS` (`with_status`); None: the run raised
    ledger: pd.DataFrame | None
    status: str  # the run's (completed, diverged, ...), or how it raised: invalid, error, failed
    error: str | None  # why it raised; None: it did not


def run_point(scenario: Scenario | dict) -> Point:
    """Run one point of a study (a scenario, or its data to validate) here, nothing written,
    and never let it stop the study: as a sweep records a point (`flnet.workers.run_point`), a
    point that raises is a status with its error: ``invalid`` (a ScenarioError: a bad point),
    ``error`` (any other FlnetError, e.g. data that cannot be read) or ``failed`` (any other
    exception; its traceback goes to stderr). A run that diverged did not raise: its status
    says so and its records are there."""
    from flnet.runner import run
    from flnet.scenario import load_scenario

    try:
        sc = load_scenario(data=scenario) if isinstance(scenario, dict) else scenario
        result = run(sc, write=False)
    except ScenarioError as e:
        return Point(None, None, "invalid", str(e))
    except FlnetError as e:
        return Point(None, None, "error", str(e))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        return Point(None, None, "failed", f"{type(e).__name__}: {e}")
    status = str(result.summary.get("status"))
    return Point(with_status(result.records, result.summary), result.ledger, status, None)


def column(runs: pd.DataFrame, name: str) -> pd.Series:
    """A per-run table's column, NaN for every run when none has it (every run raised)."""
    return runs[name] if name in runs else pd.Series(math.nan, index=runs.index, dtype=float)


def raised_row(point: Point, **keys: Any) -> dict:
    """A per-run table's row for a point that raised: its `keys`, how it ended and why; its
    figures are missing (NaN in the table: `median_range` counts them by this status)."""
    return {**keys, "status": point.status, "ended": point.status, "error": point.error}


def raised_points(per_run: pd.DataFrame, keys: list[str]) -> str:
    """What a study prints of the points of its per-run table that raised (`raised_row`): a
    heading, then one line each with its `keys`, status and error ("" when none raised)."""
    if "error" not in per_run or not per_run["error"].notna().any():
        return ""
    bad = per_run[per_run["error"].notna()]
    lines = [
        ", ".join(f"{k} {row[k]}" for k in keys if pd.notna(row.get(k)))
        + f": {row.status}: {_one_line(str(row.error))}"
        for _, row in bad.iterrows()
    ]
    return "points that raised (no figures; counted by status):\n  " + "\n  ".join(lines)


def _one_line(error: str) -> str:
    """A multi-line error (a scenario's list of problems) on one line."""
    first, *rest = [line.strip() for line in error.splitlines() if line.strip()] or [""]
    return " ".join([first, "; ".join(rest)]) if rest else first
