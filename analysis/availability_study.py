"""Issue 22's study: synchronous rounds against asynchronous servers when clients come and go.

A diurnal population of 200 clients (`clients.availability: diurnal`, a quarter online on
average, one time zone, sessions of an hour on average), stragglers (CPU speeds lognormal
around 0.3 GHz, and 10% of tasks slowed 4x) and dropout (5% of tasks fail at a uniform point
of their work), the digits MLP charged as McMahan et al.'s MNIST CNN (`model.costs_as`, so 10
local steps take about 20 s of compute and a model about 1 s alone on the uplink), for the
same simulated time:

- wait_for_all: FedAvg, K = 10, the server waits for every selected client;
- deadline: FedAvg, K = 10, clients not delivered 30 s after the round starts are dropped;
- over_selection: FedAvg, 13 selected, the first 10 kept;
- partial_work: FedProx (mu 0.01) with partial work under the 30 s deadline (the steps that
  fit, `flnet.algorithms.partial`);
- fedbuff: FedBuff, 10 training at once, K = 5;
- fedasync: FedAsync, 10 training at once, the paper's defaults.

Each runs for `--hours` of simulated time with 3 seeds (`flnet.run`, one at a time: the
machine is shared). Per method it prints the median [min-max] over seeds of the test accuracy
at a quarter, half and all of the time, the seconds and joules to `--target` accuracy, the
joules spent, and the joules wasted on work that came to nothing (`flnet.analysis.
wasted_energy_j`: dropped, interrupted, cut at the deadline, cancelled by over-selection,
lost), and writes the tables as CSV under the folder given. A run that diverged has no
accuracy from where it diverged and never reaches the target: it is counted by its status
(`flnet.analysis.median_range`), never entered at its last finite accuracy. A run that raises
(a bad point, a FlnetError) is a row with its status and error (`flnet.analysis.run_point`),
counted by that status in the table and listed after it; the study goes on.

    python analysis/availability_study.py runs/availability_study
    python analysis/availability_study.py runs/availability_study --smoke   # seconds
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from flnet.analysis import (
    Point,
    accuracy_at,
    column,
    ended_as,
    median_range,
    raised_points,
    raised_row,
    run_point,
    statuses,
    to_target,
    wasted_energy_j,
)

LOCAL = {"steps": 10, "batch_size": 32, "lr": 0.05}
DEADLINE_S = 30.0
VARIANTS: dict[str, dict] = {
    "wait_for_all": {"name": "fedavg", "cohort": {"clients_per_round": 10}},
    "deadline": {"name": "fedavg", "cohort": {"clients_per_round": 10, "deadline_s": DEADLINE_S}},
    "over_selection": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 10, "over_selection": 1.3},
    },
    "partial_work": {
        "name": "fedprox",
        "mu": 0.01,
        "cohort": {"clients_per_round": 10, "deadline_s": DEADLINE_S},
        "partial_work": {"kind": "deadline"},
    },
    "fedbuff": {"name": "fedbuff", "concurrency": 10, "buffer_size": 5},
    "fedasync": {"name": "fedasync", "concurrency": 10},
}
OUTCOMES = ("dropped", "interrupted", "deadline", "cancelled", "lost")


def scenario(variant: str, seed: int, hours: float, smoke: bool) -> dict:
    """The study's scenario for one method and seed (smoke: fewer clients, less time)."""
    asynchronous = VARIANTS[variant]["name"] in ("fedbuff", "fedasync")
    return {
        "name": f"{variant}-seed{seed}",
        "seed": seed,
        "device": "cpu",
        "data": {"dataset": "digits", "partition": {"kind": "iid"}},
        "model": {"kind": "mlp", "hidden": [64], "costs_as": "cnn_mcmahan"},
        "algorithm": {**VARIANTS[variant], "local": LOCAL},
        "clients": {
            "count": 40 if smoke else 200,
            "cpu_hz": {"kind": "lognormal", "median": 3.0e8, "sigma": 0.5},
            "availability": {"kind": "diurnal", "mean_online": 0.25, "session_mean_s": 3600.0},
            "dropout_probability": 0.05,
            "slowdown_probability": 0.1,
            "slowdown_factor": 4.0,
        },
        "run": {
            "rounds": 1_000_000,
            "time_budget_s": hours * 3600.0,
            # about one evaluation a minute of simulated time either way
            "eval_every": 10 if asynchronous else 1,
            "checkpoint_interval_s": None,
        },
    }


def run_one(variant: str, seed: int, hours: float, smoke: bool) -> Point:
    """One run: its records (with `variant` and how the run ended) and ledger, or how it
    raised."""
    point = run_point(scenario(variant, seed, hours, smoke))
    if point.records is None:
        return point
    return point._replace(records=point.records.assign(variant=variant))


def per_run_row(records: pd.DataFrame, wasted: dict, hours: float, target: float) -> dict:
    horizon = hours * 3600.0
    reached = to_target(records, target, keys=["variant", "seed"]).iloc[0]
    spent = float(records.energy_j.iloc[-1])
    row = {
        "variant": records.variant.iloc[0],
        "seed": int(records.seed.iloc[0]),
        "status": records.status.iloc[0],
        "ended": ended_as(records.status.iloc[0], records.diverged_round.iloc[0]),
        "steps": int(records["round"].iloc[-1]),
        "acc_quarter": accuracy_at(records, t_s=horizon / 4),
        "acc_half": accuracy_at(records, t_s=horizon / 2),
        "acc_end": accuracy_at(records, t_s=horizon),
        "seconds_to_target": reached.seconds_to_target,
        "joules_to_target": reached.joules_to_target,
        "joules": spent,
    }
    for outcome in OUTCOMES:
        row[f"wasted_{outcome}_j"] = wasted.get(outcome, 0.0)
    row["wasted_j"] = sum(wasted.values())
    row["wasted_share"] = row["wasted_j"] / spent if spent > 0 else math.nan
    return row


SHOWN = {
    "acc_quarter": "acc@T/4",
    "acc_half": "acc@T/2",
    "acc_end": "acc@T",
    "seconds_to_target": "s to target",
    "joules_to_target": "J to target",
    "joules": "J spent",
    "wasted_j": "J wasted",
    "wasted_share": "wasted share",
}


def summary(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per method: how its runs ended, then median [min-max] over seeds of each figure,
    runs without one counted by why (never reached, diverged, ...)."""
    rows = []
    for variant, runs in per_run.groupby("variant", sort=False):
        row = {"method": variant, "seeds": len(runs), "ended": statuses(runs.status)}
        row.update(
            {label: median_range(column(runs, col), runs.status) for col, label in SHOWN.items()}
        )
        rows.append(row)
    return pd.DataFrame(rows)


def wasted_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """Median joules wasted per method and outcome over seeds."""
    cols = [f"wasted_{o}_j" for o in OUTCOMES]
    per_run = per_run.assign(**{c: column(per_run, c) for c in cols})
    table = per_run.groupby("variant", sort=False)[cols].median()
    return table.rename(columns=lambda c: c.removeprefix("wasted_").removesuffix("_j"))


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder for the tables (CSV)")
    p.add_argument("--smoke", action="store_true", help="1 seed, 40 clients, 5 minutes")
    p.add_argument("--hours", type=float, default=2.0, help="simulated time per run")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--target", type=float, default=0.9, help="test accuracy to reach")
    p.add_argument("--only", nargs="*", choices=list(VARIANTS), help="these methods only")
    args = p.parse_args(argv)
    hours, seeds = (5 / 60, 1) if args.smoke else (args.hours, args.seeds)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for variant in args.only or VARIANTS:
        for seed in range(seeds):
            point = run_one(variant, seed, hours, args.smoke)
            if point.records is None or point.ledger is None:
                rows.append(raised_row(point, variant=variant, seed=seed))
                print(f"  {variant} seed {seed}: {point.status}", flush=True)
                continue
            records = point.records
            curves.append(
                records[["variant", "seed", "round", "sim_time_s", "energy_j", "test_accuracy"]]
            )
            rows.append(per_run_row(records, wasted_energy_j(point.ledger), hours, args.target))
            print(f"  {variant} seed {seed}: {rows[-1]['steps']} steps", flush=True)
    per_run = pd.DataFrame(rows)
    table, wasted = summary(per_run), wasted_table(per_run)
    per_run.to_csv(out / "per_run.csv", index=False)
    table.to_csv(out / "summary.csv", index=False)
    wasted.to_csv(out / "wasted.csv")
    if curves:
        pd.concat(curves).to_csv(out / "curves.csv", index=False)
    print(
        f"{hours:g} h of simulated time, {seeds} seed(s); median [min-max] over seeds; "
        f"target test accuracy {args.target:g}"
    )
    with pd.option_context("display.width", 250, "display.max_columns", 20):
        print(table.to_string(index=False))
        print("\nmedian joules wasted on work that came to nothing, by how it ended:")
        print(wasted.to_string(float_format=lambda v: f"{v:.4g}"))
    failed = raised_points(per_run, ["variant", "seed"])
    if failed:
        print("\n" + failed)
    print(f"\nTables in {out}/")
    return {"per_run": per_run, "summary": table, "wasted": wasted}


if __name__ == "__main__":
    main()
