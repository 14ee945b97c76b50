"""Issue 26's study: local steps (tau) against battery-limited participation and accuracy over
simulated days, for FedAvg and FedBuff.

A diurnal population of 100 clients (time zone +12 h, so the run starts at local noon; a
quarter online on average, most at night, sessions of an hour) whose phones give FL a small
energy budget per charge (`clients.battery`: 3 to 9 J, 30 to 100 % charged at the start,
opting out below 20 % until back at 50 %, recharged 22:00-07:00 local at 1 mW: a full budget
per night). The digits MLP is charged as McMahan et al.'s MNIST CNN (`model.costs_as`) on slow
devices (0.1 GHz median, kappa 1e-27) with a narrow shared uplink (2 MHz), so a task's
joules grow with tau while rounds stay in seconds to minutes. For tau in `TAUS`:

- fedavg: K = 10 a round, a 300 s deadline;
- fedbuff: 10 training at once, K = 5.

Each runs for `--hours` of simulated time (default 24: afternoon, night and morning) with 3
seeds (`flnet.run`, one at a time, a seed at a time). Per method and tau it prints how its runs
ended (a run that diverged has no accuracy from where it diverged: it is counted by its status,
never entered at its last finite accuracy) and the median [min-max] over seeds of the test
accuracy at the end of each simulated day (the last: at the run's end), the clients limited
by their battery (taken below their threshold by their work, or stopped empty), opt-outs,
work stopped empty, the participants' final mean state of charge, the share of the joules
spent on the rows an empty battery stopped and the joules spent; and writes the tables as CSV
under the folder given. A run that raises (a bad point, a FlnetError) is a row with its status
and error (`flnet.analysis.run_point`), counted by that status and listed after the table; the
study goes on.

    python analysis/battery_study.py runs/battery_study
    python analysis/battery_study.py runs/battery_study --smoke   # seconds
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from flnet.analysis import (
    Point,
    accuracy_at,
    ended_as,
    median_range,
    raised_points,
    raised_row,
    run_point,
    statuses,
)

TAUS = (1, 5, 20)
METHODS: dict[str, dict] = {
    "fedavg": {"name": "fedavg", "cohort": {"clients_per_round": 10, "deadline_s": 300.0}},
    "fedbuff": {"name": "fedbuff", "concurrency": 10, "buffer_size": 5},
}
DAY_S = 86_400.0


def scenario(method: str, tau: int, seed: int, hours: float, smoke: bool) -> dict:
    """The study's scenario for one method, tau and seed (smoke: fewer clients)."""
    return {
        "name": f"{method}-tau{tau}-seed{seed}",
        "seed": seed,
        "device": "cpu",
        "data": {"dataset": "digits", "partition": {"kind": "iid"}},
        "model": {"kind": "mlp", "hidden": [32], "costs_as": "cnn_mcmahan"},
        "algorithm": {**METHODS[method], "local": {"steps": tau, "batch_size": 16, "lr": 0.05}},
        "clients": {
            "count": 30 if smoke else 100,
            "cpu_hz": {"kind": "lognormal", "median": 1.0e8, "sigma": 0.5},
            "kappa": 1.0e-27,
            "availability": {  # zone +12 h: the run starts at local noon, batteries unplugged
                "kind": "diurnal",
                "mean_online": 0.25,
                "session_mean_s": 3600.0,
                "time_zones_h": [12.0],
            },
            "battery": {
                "capacity_j": {"kind": "uniform", "low": 3.0, "high": 9.0},
                "initial_soc": {"kind": "uniform", "low": 0.3, "high": 1.0},
                "threshold_soc": 0.2,
                "resume_margin_soc": 0.3,
                "charging_power_w": 1.0e-3,
            },
        },
        "radio": {"uplink": {"bandwidth_hz": 2.0e6, "sharing": "shared"}},
        "run": {
            "rounds": 1_000_000,
            "time_budget_s": hours * 3600.0,
            "eval_every": 20 if method == "fedavg" else 40,
            "checkpoint_interval_s": None,
        },
    }


def run_one(method: str, tau: int, seed: int, hours: float, smoke: bool) -> Point:
    """One run: its records, with `method`, `tau`, how it ended and the joules of work stopped
    empty, or how it raised."""
    point = run_point(scenario(method, tau, seed, hours, smoke))
    if point.records is None or point.ledger is None:
        return point
    led = point.ledger
    empty_j = float(led.energy_j[led.outcome == "battery"].sum())
    return point._replace(records=point.records.assign(method=method, tau=tau, empty_j=empty_j))


def per_run_row(records: pd.DataFrame, hours: float) -> dict:
    last = records.iloc[-1]
    row = {
        "method": last.method,
        "tau": int(last.tau),
        "seed": int(last.seed),
        "status": last.status,
        "ended": ended_as(last.status, last.diverged_round),
        "steps": int(last["round"]),
        "events": int(last.events),
    }
    days = max(1, math.ceil(hours * 3600.0 / DAY_S - 1e-9))
    for d in range(1, days + 1):  # the last: the run's end
        row[f"acc_day{d}"] = accuracy_at(records, t_s=d * DAY_S if d < days else math.inf)
    row.update(
        limited=float(last.battery_limited_clients),
        optouts=float(last.battery_optouts),
        empty_stops=float(last.battery_empty_stops),
        soc_mean=float(last.soc_mean),
        empty_share=float(last.empty_j / last.energy_j) if last.energy_j > 0 else math.nan,
        joules=float(last.energy_j),
    )
    return row


def summary(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per (method, tau): how its runs ended, then median [min-max] over seeds of each
    figure (a run without one counted by why)."""
    keys = ("method", "tau", "seed", "status", "ended", "error")
    shown = [c for c in per_run.columns if c not in keys]
    rows = []
    for (method, tau), runs in per_run.groupby(["method", "tau"], sort=False):
        row = {"method": method, "tau": tau, "seeds": len(runs), "ended": statuses(runs.status)}
        row.update({c: median_range(runs[c], runs.status, digits=3) for c in shown})
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder for the tables (CSV)")
    p.add_argument("--smoke", action="store_true", help="1 seed, 30 clients, 30 minutes, 2 taus")
    p.add_argument("--hours", type=float, default=24.0, help="simulated time per run")
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args(argv)
    hours, seeds = (0.5, 1) if args.smoke else (args.hours, args.seeds)
    taus = (TAUS[0], TAUS[-1]) if args.smoke else TAUS
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], []
    for seed in range(seeds):  # a seed at a time: an interrupted study has every method
        for method in METHODS:
            for tau in taus:
                point = run_one(method, tau, seed, hours, args.smoke)
                if point.records is None:
                    rows.append(raised_row(point, method=method, tau=tau, seed=seed))
                    print(f"  {method} tau {tau} seed {seed}: {point.status}", flush=True)
                    continue
                records = point.records
                keep = ["method", "tau", "seed", "round", "sim_time_s", "energy_j"]
                keep += ["test_accuracy", "battery_opted_out", "soc_mean", "soc_min"]
                curves.append(records[keep])
                rows.append(per_run_row(records, hours))
                r = rows[-1]
                print(
                    f"  {method} tau {tau} seed {seed}: {r['steps']} steps, {r['events']} "
                    f"results, {r['ended']}, "
                    f"accuracy {accuracy_at(records, t_s=math.inf):.3f}, "
                    f"{r['limited']:.0f} clients battery-limited, {r['optouts']:.0f} opt-outs",
                    flush=True,
                )
    per_run = pd.DataFrame(rows)
    table = summary(per_run)
    per_run.to_csv(out / "per_run.csv", index=False)
    table.to_csv(out / "summary.csv", index=False)
    if curves:
        pd.concat(curves).to_csv(out / "curves.csv", index=False)
    print(f"{hours:g} h of simulated time, {seeds} seed(s); median [min-max] over seeds")
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string(index=False))
    failed = raised_points(per_run, ["method", "tau", "seed"])
    if failed:
        print("\n" + failed)
    print(f"\nTables in {out}/")
    return {"per_run": per_run, "summary": table}


if __name__ == "__main__":
    main()
