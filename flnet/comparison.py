"""Any runs side by side, and which setting reaches a target for the least cost: the one
implementation behind `flnet analyze`, analysis/tau_energy.py and `flnet.compare`.

    import flnet
    cmp = flnet.compare("runs/fedavg", "runs/scaffold", "runs/tau-sweep", target=0.8)
    cmp.series        # one row per series: final accuracy, worst client, costs to target
    cmp.per_run       # one row per run: cost to target, interpolated between evaluations
    cmp.per_cell      # where a field (tau) is swept: its best value, seed by seed
    cmp.figures()     # {figure name: the tidy table it draws}
    print(cmp.text())

Runs are read as `flnet.plot.load_results` reads them (run folders, sweep folders, globs),
grouped over seeds into series and labelled by the fewest fields that tell them apart.
Costs to target are interpolated between the evaluations around the crossing
(`flnet.analysis.to_target`); a ranking that rests on evaluations too far apart is refused,
seed by seed (`flnet.analysis.best_tau`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flnet.analysis import OK, TAU, best_tau, choice_name, chosen_fields, pareto, to_target
from flnet.plot import (
    Results,
    ResultsError,
    ResultsLike,
    _run_configs,
    as_results,
    figure_tables,
    load_results,
    name_series,
    readable_column,
)
from flnet.result_files import read_table

COSTS = ("seconds", "joules", "bits")
LOCAL_WORK = (TAU, "algorithm.local.epochs")  # the fields "which local work" chooses among


@dataclass
class Comparison:
    """The tables behind a comparison (`compare`)."""

    results: Results
    target: float
    metric: str
    cost: str
    choose: str
    per_run: pd.DataFrame
    series: pd.DataFrame
    per_seed: pd.DataFrame | None = None
    per_cell: pd.DataFrame | None = None
    pareto: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, pd.DataFrame]:
        """The tidy table behind each figure, by the figure's file stem."""
        return figure_tables(self.results, self.target)

    def tables(self) -> dict[str, pd.DataFrame]:
        out = {"to_target": self.per_run, "series": self.series}
        if self.per_cell is not None and self.per_seed is not None:
            out.update(best_per_seed=self.per_seed, best=self.per_cell)
        if self.pareto is not None:
            out["pareto"] = self.pareto
        return out

    def write(self, out_dir: str | Path) -> list[Path]:
        """Every table as CSV under `out_dir`."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        names = {"best_per_seed": "best_tau_per_seed", "best": "best_tau"}
        written = []
        for name, table in self.tables().items():
            path = out / f"{names.get(name, name)}.csv"
            table.to_csv(path, index=False)
            written.append(path)
        return written

    def text(self) -> str:
        """What `flnet analyze` prints."""
        return comparison_text(self)


def compare(
    *results: ResultsLike,
    target: float | None = None,
    metric: str = "test_accuracy",
    cost: str = "joules",
    choose: str | None = None,
    labels: dict[str, str] | None = None,
    by: list[str] | None = None,
) -> Comparison:
    """Compare runs: any mix of run folders, sweep folders and globs (or one `Results`).

    `target`: the accuracy to reach (default: the scenario's run.target_accuracy, else 0.9);
    `metric`: the accuracy column it applies to; `cost`: what the best `choose` (a swept field;
    by default the first local-work field that varies, `LOCAL_WORK`) minimises: rounds,
    seconds, joules or bits; `choose` may name several fields with commas (e.g.
    ``algorithm.local.steps,clients.cpu_hz,radio.tx_power_dbm``): the best combination of
    their values tried is chosen (`flnet.analysis.best_tau`); `labels`, `by`: as in
    `flnet.plot.load_results`.
    """
    if len(results) == 1 and isinstance(results[0], (Results, pd.DataFrame)):
        res = as_results(results[0])
    else:
        paths = [p for r in results for p in (r if isinstance(r, (list, tuple)) else [r])]
        res = load_results(*paths, labels=labels, by=by)  # type: ignore[arg-type]
    if cost not in ("rounds", *COSTS):
        raise ResultsError(f"cost must be one of rounds, {', '.join(COSTS)}; got {cost!r}")
    target = res.target() if target is None else target
    if not 0 < target <= 1:
        raise ResultsError(f"target accuracy is a fraction in (0, 1]; got {target:g}")
    _check_metric(res, metric)
    if choose is None:
        varies = [f for f in LOCAL_WORK if f in res.records and res.records[f].nunique() > 1]
        choose = varies[0] if varies else TAU
    per_run = _per_run(res, target, metric)
    cmp = Comparison(res, target, metric, cost, choose, per_run, _series(res, per_run, metric))
    fields = chosen_fields(choose)  # one field, or several chosen together: "a,b,c"
    if set(fields) <= set(res.records) and len(res.records[fields].drop_duplicates()) > 1:
        per_run["cell"] = _cells(res, fields).reindex(per_run.run_id).to_numpy()
        first = res.records.groupby("run_id")[fields].first()
        for f in fields:
            per_run[f] = per_run.run_id.map(first[f])
        combos = per_run[fields].astype(str).agg("|".join, axis=1)
        tried = combos.groupby(per_run.cell).nunique()
        several = per_run[per_run.cell.map(tried) > 1]  # cells where the fields take values
        if len(several):
            cmp.per_seed, cmp.per_cell = best_tau(several, cost, fields, cell=["cell"])
    points = res.sources[0] / "points.csv" if res.kind == "sweep" else None
    if points is not None and points.exists():
        table = read_table(points)
        done = table[table.status == OK] if "status" in table else table
        if len(done) > 1 and {"final_test_accuracy", "sim_time_s", "energy_j"} <= set(done):
            front = pareto(done)
            cmp.pareto = front[front.on_front].copy()
            for f in (c for c in cmp.pareto.columns if "." in c):  # swept fields
                cmp.pareto[f] = readable_column(cmp.pareto[f])
    return cmp


def _check_metric(res: Results, metric: str) -> None:
    """Every run must have evaluated `metric`: name those that did not."""
    if metric not in res.records:
        have = [c for c in res.records.columns if "accuracy" in c]
        raise ResultsError(
            f"no run has {metric!r}; accuracy columns these runs have: {', '.join(have)}"
        )
    has = res.records.groupby("run_id")[metric].apply(lambda v: v.notna().any())
    lacking = has[~has].index
    if len(lacking):
        names = res.runs.set_index("run_id").reindex(lacking)
        where = [
            f"{lab} ({f})" if isinstance(f, str) else str(lab)
            for lab, f in zip(names.label, names.folder)
        ]
        raise ResultsError(
            f"cannot compare on {metric}: these runs never evaluated it: {'; '.join(where)}; "
            "choose a metric every run has (test_accuracy), or leave them out"
        )


def _per_run(res: Results, target: float, metric: str) -> pd.DataFrame:
    """One row per run with its series, seed and status: costs to target interpolated."""
    runs = res.runs.set_index("run_id")
    status = runs.status.where(~runs.status.isin(("unknown",)) & runs.status.notna(), OK)
    records = res.records.assign(status=res.records.run_id.map(status))
    records = records.drop(columns=[c for c in ("seed",) if c in records])
    per_run = to_target(records, target, metric, keys=["run_id"], interpolate=True)
    per_run.insert(1, "series", per_run.run_id.map(runs.group))
    per_run.insert(2, "label", per_run.run_id.map(runs.label))
    per_run.insert(3, "seed", per_run.run_id.map(runs.seed))
    worst = res.records.groupby("run_id").tail(1).set_index("run_id")
    if "client_accuracy_worst" in worst:
        per_run["final_client_accuracy_worst"] = per_run.run_id.map(worst.client_accuracy_worst)
    return per_run


def _series(res: Results, per_run: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per series: seeds, how they ended, and the median, min and max over seeds of the final
    accuracy, the worst client's and the costs to target (over the seeds that reached it)."""
    rows = []
    for name, runs in per_run.groupby("series", sort=False):
        row: dict[str, Any] = {
            "series": name,
            "seeds": len(runs),
            "reached": f"{int(runs.reached.sum())}/{len(runs)}",
        }
        columns = [f"final_{metric}", "final_client_accuracy_worst"]
        columns += [f"{c}_to_target" for c in ("rounds", *COSTS)]
        for c in columns:
            if c not in runs:
                continue
            values = runs[c].astype(float)
            ok = values[np.isfinite(values)]
            row[f"{c}_median"] = ok.median() if len(ok) else math.nan
            row[f"{c}_min"] = ok.min() if len(ok) else math.nan
            row[f"{c}_max"] = ok.max() if len(ok) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def _cells(res: Results, choose: list[str]) -> pd.Series:
    """Each run's cell: what its series is called once the `choose` fields are left out."""

    def chosen(key: str) -> bool:  # a chosen field, or a leaf of a section chosen whole
        return any(key == f or key.startswith(f"{f}.") for f in choose)

    configs = [{k: v for k, v in c.items() if not chosen(k)} for c in _run_configs(res)]
    runs = res.runs[["run_id", "seed"]].copy()
    name_series(runs, configs, order=[f for f in res.fields if not chosen(f)])
    return runs.set_index("run_id").group


def _text(df: pd.DataFrame) -> str:
    return df.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}")


def spread_text(series: pd.DataFrame, column: str) -> list[str]:
    """`median [min-max]` per series row for a column summarised by `_series`."""
    out = []
    for _, row in series.iterrows():
        med = row.get(f"{column}_median", math.nan)
        if med is None or not np.isfinite(med):
            out.append("-")
            continue
        lo, hi = row[f"{column}_min"], row[f"{column}_max"]
        out.append(f"{med:.4g}" if lo == hi else f"{med:.4g} [{lo:.4g}-{hi:.4g}]")
    return out


def comparison_text(cmp: Comparison) -> str:
    """The comparison as plain text: per series first, then per run, then the best choice."""
    lines = [
        f"series over seeds (median [min-max]); target {cmp.metric} >= {cmp.target:g}; costs to "
        "target read between the evaluations around it"
    ]
    shown = pd.DataFrame({"series": cmp.series.series, "seeds": cmp.series.seeds})
    shown["reached"] = cmp.series.reached
    shown[f"final {cmp.metric}"] = spread_text(cmp.series, f"final_{cmp.metric}")
    if "final_client_accuracy_worst_median" in cmp.series:
        shown["worst client"] = spread_text(cmp.series, "final_client_accuracy_worst")
    for c, unit in (("seconds", "s"), ("joules", "J"), ("bits", "bits")):
        shown[f"{unit} to target"] = spread_text(cmp.series, f"{c}_to_target")
    lines += [_text(shown), ""]
    per_run = cmp.per_run[
        [
            "label",
            "reached",
            "rounds_to_target",
            "seconds_to_target",
            "joules_to_target",
            "bits_to_target",
            "evaluations_apart",
        ]
    ]
    lines += ["per run ('-': not reached; evaluations_apart: rounds between the two read)"]
    lines += [_text(per_run), ""]
    if cmp.per_cell is not None:
        name = choice_name(cmp.choose)
        column = f"{cmp.cost}_to_target"
        cells = cmp.per_cell
        best = pd.DataFrame(
            {
                "cell": cells.cell,
                f"best {name}": cells.best_tau,
                "per seed": cells.best_tau_per_seed,
                f"{cmp.cost} to target": [
                    "-" if not np.isfinite(m) else f"{m:.4g} [{lo:.4g}-{hi:.4g}]"
                    for m, lo, hi in zip(
                        cells[f"{column}_median"], cells[f"{column}_min"], cells[f"{column}_max"]
                    )
                ],
            }
        )
        lines += [
            f"best {name} per cell: fewest {cmp.cost} to target, chosen seed by seed "
            "(not reached = infinite); the winner's cost median [min-max] over seeds"
        ]
        lines += [_text(best)]
        lines += [f"  {c}: {v}" for c, v in zip(cells.cell, cells.verdict)]
        lines += [""]
    if cmp.pareto is not None:
        cols = [c for c in cmp.pareto.columns if c == "point" or "." in c or c == "seed"]
        lines += ["Pareto front (final accuracy up, simulated seconds and joules down)"]
        lines += [_text(cmp.pareto[[*cols, "final_test_accuracy", "sim_time_s", "energy_j"]])]
        lines += [""]
    lines += cmp.notes
    return "\n".join(lines).rstrip() + "\n"
