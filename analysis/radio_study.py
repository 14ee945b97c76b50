"""Issue 43's study: joules and simulated seconds to a target accuracy under the per-round
resource policies (`resources:`) and several cells with interference (`radio.cells`), for
FedAvg and for gossip (D-PSGD) on a D2D radio.

Three parts, each run with several seeds (`flnet.run`, one at a time, a seed at a time):

- ``policies``: FedAvg, 50 clients at 50-700 m of one access point, a 10 MHz shared uplink,
  the digits MLP charged as McMahan et al.'s MNIST CNN (`model.costs_as`, so a model's upload
  and a local work cost what they would on a phone), a 30 s round deadline. Each policy of
  `POLICIES` (scheduling, bandwidth split, CPU frequency and transmit power; the baseline is
  today's uniform / equal / fixed) at each cohort size of `COHORTS` (the cell's load: members
  sharing the uplink at once).
- ``cells``: the same FedAvg (cohorts of `CELLS_COHORTS`), 50 clients dropped in a 1 km
  square, each scheduler of `SCHEDULERS` in each layout of `LAYOUTS`: one station, four
  co-channel stations (reuse 1) with and without their interference, four stations each on a
  quarter of the band (reuse 4).
  Bandwidth and CPU/power policies are refused with cells (the planner does not model a cell's
  band under interference), and policies are refused for gossip, so these are the parts'
  only axes.
- ``gossip``: D-PSGD on 16 devices of `scenarios/gossip_radio.yaml`'s D2D radio (random
  geometric graph, log-distance path loss), its access `D2D_SHARING` (dedicated: orthogonal
  links; spatial_reuse: one band, concurrent transmissions interfering; tdma: one at a time)
  at two densities (`GOSSIP_SIDES_M`: the square the devices are dropped in).

Per run the costs to the target are read with `flnet.analysis.to_target` (interpolated between
the evaluations around the crossing; a run that never reaches it is kept, censored); per
(part, load, policy) the table gives how many seeds reached it and the median [min-max] over
seeds of the rounds, simulated seconds and joules to target, and, paired seed by seed with the
part's baseline at the same load, the median ratio of joules and seconds to the baseline's
(below 1: the policy costs less). Tables are written as CSV under the folder given.

    python analysis/radio_study.py runs/radio_study             # 3 seeds, 171 runs, ~6 min
    python analysis/radio_study.py runs/radio_study --smoke     # seconds: what CI runs
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import pandas as pd

from flnet.analysis import (
    column,
    median_range,
    raised_points,
    raised_row,
    run_point,
    to_target,
)

TARGET = 0.8
BASELINE = "uniform/equal/fixed"
POLICIES: dict[str, dict[str, Any]] = {
    BASELINE: {},
    "best_channel": {"scheduling": {"kind": "best_channel", "candidates": 2}},
    "proportional_fair": {"scheduling": {"kind": "proportional_fair", "candidates": 2}},
    "min_max": {"bandwidth": "min_max"},
    "min_max+deadline_feasible": {
        "scheduling": {"kind": "uniform", "candidates": 2, "deadline_feasible": True},
        "bandwidth": "min_max",
    },
    "need_proportional": {"bandwidth": "need_proportional"},
    "just_in_time": {"compute_power": "just_in_time"},
    "min_energy": {"compute_power": "min_energy"},
    "best_channel+min_max+min_energy": {
        "scheduling": {"kind": "best_channel", "candidates": 2},
        "bandwidth": "min_max",
        "compute_power": "min_energy",
    },
}
COHORTS = (5, 10, 20)
CELLS_COHORTS = (10, 20)
SCHEDULERS = ("uniform", "best_channel", "proportional_fair")
FOUR = [[250.0, 250.0], [750.0, 250.0], [250.0, 750.0], [750.0, 750.0]]
LAYOUTS: dict[str, dict[str, Any]] = {
    "1 station": {"stations_xy_m": [[500.0, 500.0]]},
    "4 stations, reuse 1": {"stations_xy_m": FOUR, "reuse_factor": 1},
    "4 stations, reuse 1, no interference": {
        "stations_xy_m": FOUR,
        "reuse_factor": 1,
        "interference": False,
    },
    "4 stations, reuse 4": {"stations_xy_m": FOUR, "reuse_factor": 4},
}
D2D_SHARING = ("dedicated", "spatial_reuse", "tdma")
GOSSIP_SIDES_M = (100.0, 50.0)
DEADLINE_S = 30.0
SHOWN = ("rounds", "seconds", "joules")


def fedavg(seed: int, cohort: int, rounds: int, clients: int = 50) -> dict:
    """The FedAvg scenario both FedAvg parts start from (one access point)."""
    return {
        "name": f"radio-fedavg-seed{seed}",
        "seed": seed,
        "device": "cpu",
        "data": {"dataset": "digits", "partition": {"kind": "iid"}},
        "model": {"kind": "mlp", "hidden": [32], "costs_as": "cnn_mcmahan"},
        "algorithm": {
            "name": "fedavg",
            "cohort": {"clients_per_round": cohort, "deadline_s": DEADLINE_S},
            "local": {"steps": 5, "batch_size": 16, "lr": 0.1},
        },
        "clients": {
            "count": clients,
            "cpu_hz": {"kind": "lognormal", "median": 1.0e9, "sigma": 0.5},
            "flops_per_cycle": 4,
            "kappa": 1.0e-28,
        },
        "radio": {
            "mode": "physical",
            "distance_m": {"kind": "uniform", "low": 50.0, "high": 700.0},
            "shadowing_std_db": 8.0,
            "tx_power_dbm": 20.0,
            "tx_circuit_power_w": 0.05,
            "uplink": {"bandwidth_hz": 10.0e6, "sharing": "shared"},
            "downlink": {"bandwidth_hz": 20.0e6, "sharing": "dedicated"},
        },
        "run": {"rounds": rounds, "eval_every": 1, "checkpoint_interval_s": None},
    }


def policy_scenario(policy: str, cohort: int, seed: int, rounds: int) -> dict:
    sc = fedavg(seed, cohort, rounds)
    if POLICIES[policy]:
        sc["resources"] = POLICIES[policy]
    return sc


def cells_scenario(scheduler: str, layout: str, cohort: int, seed: int, rounds: int) -> dict:
    sc = fedavg(seed, cohort, rounds)
    sc["clients"]["positions"] = {"kind": "uniform", "side_m": 1000.0}
    del sc["radio"]["distance_m"]
    sc["radio"]["cells"] = LAYOUTS[layout]
    if scheduler != "uniform":
        sc["resources"] = {"scheduling": {"kind": scheduler, "candidates": 2}}
    return sc


def gossip_scenario(sharing: str, side_m: float, seed: int, rounds: int) -> dict:
    """scenarios/gossip_radio.yaml's D-PSGD with its D2D access and square's side set."""
    return {
        "name": f"radio-gossip-seed{seed}",
        "seed": seed,
        "device": "cpu",
        "data": {"dataset": "digits", "partition": {"kind": "iid"}},
        "model": {"kind": "mlp", "hidden": [64]},
        "algorithm": {
            "name": "dpsgd",
            "topology": {
                "kind": "random_geometric",
                "radius_m": 0.45 * side_m,
                "weights": "metropolis_hastings",
            },
            "local": {"steps": 1, "batch_size": 32, "lr": 0.1},
        },
        "clients": {
            "count": 16,
            "cpu_hz": {"kind": "lognormal", "median": 1.0e9, "sigma": 0.3},
            "positions": {"kind": "uniform", "side_m": side_m},
        },
        "radio": {
            "mode": "direct",
            "tx_power_dbm": 20.0,
            "tx_circuit_power_w": 0.1,
            "rx_power_w": 0.1,
            "d2d": {
                "bandwidth_hz": 1.0e6,
                "sharing": sharing,
                "transmission": "broadcast",
                "loss_probability": 0.05,
                "path_loss": {
                    "kind": "log_distance",
                    "exponent": 3.0,
                    "shadowing_std_db": 4.0,
                    "carrier_hz": 2.4e9,
                },
            },
        },
        "run": {"rounds": rounds, "eval_every": 5, "checkpoint_interval_s": None},
    }


def points(smoke: bool, seeds: int) -> list[dict]:
    """Every point of the study, a seed at a time: (part, load, policy, seed, scenario)."""
    rounds, gossip_rounds = (8, 20) if smoke else (60, 100)
    policies = (
        [BASELINE, "best_channel", "min_max", "min_energy", "just_in_time"]
        if smoke
        else list(POLICIES)
    )
    cohorts = (10,) if smoke else COHORTS
    cells_cohorts = (10,) if smoke else CELLS_COHORTS
    layouts = ["4 stations, reuse 1", "4 stations, reuse 1, no interference"]
    layouts = layouts if smoke else list(LAYOUTS)
    schedulers = SCHEDULERS[:2] if smoke else SCHEDULERS
    sides = GOSSIP_SIDES_M[:1] if smoke else GOSSIP_SIDES_M
    sharing = D2D_SHARING[:2] if smoke else D2D_SHARING
    out = []
    for seed in range(seeds):
        for cohort in cohorts:
            for policy in policies:
                sc = policy_scenario(policy, cohort, seed, rounds)
                out.append(
                    dict(part="policies", load=f"m={cohort}", policy=policy, seed=seed, sc=sc)
                )
        for cohort in cells_cohorts:
            for layout in layouts:
                for scheduler in schedulers:
                    sc = cells_scenario(scheduler, layout, cohort, seed, rounds)
                    load = f"{layout}, m={cohort}"
                    out.append(dict(part="cells", load=load, policy=scheduler, seed=seed, sc=sc))
        for side in sides:
            for access in sharing:
                sc = gossip_scenario(access, side, seed, gossip_rounds)
                load = f"16 devices, {side:g} m square"
                out.append(dict(part="gossip", load=load, policy=access, seed=seed, sc=sc))
    return out


def per_run_row(records: pd.DataFrame, target: float, keys: dict) -> dict:
    """One run's costs to target (`to_target`, interpolated) and its cost per round."""
    row = to_target(records, target, interpolate=True).iloc[0].to_dict()
    last = records.iloc[-1]
    rounds = float(last["round"])
    out = {**keys, "status": row.get("status"), "ended": row.get("status"), "error": None}
    out["reached"] = bool(row["reached"])
    for c in SHOWN:
        out[f"{c}_to_target"] = row[f"{c}_to_target"]
    out.update(
        final_accuracy=float(row["final_test_accuracy"]),
        rounds_run=rounds,
        seconds_per_round=float(last.sim_time_s) / rounds,
        joules_per_round=float(last.energy_j) / rounds,
        compute_j_per_round=float(last.get("energy_compute_j", math.nan)) / rounds,
        sched_rate_bps=float(last.get("scheduled_up_rate_bps_mean", math.nan)),
    )
    return out


def with_ratios(per_run: pd.DataFrame) -> pd.DataFrame:
    """Each run's joules and seconds to target over its part's baseline's (same load and
    seed; the baseline: uniform/equal/fixed, uniform scheduling, dedicated D2D links)."""
    base = {"policies": BASELINE, "cells": "uniform", "gossip": "dedicated"}
    ref = per_run[per_run.policy == per_run.part.map(base)]
    ref = ref.set_index(["part", "load", "seed"])
    out = per_run.copy()
    index = pd.MultiIndex.from_frame(out[["part", "load", "seed"]])
    for c in ("joules", "seconds"):
        column = f"{c}_to_target"
        if column not in ref:
            out[f"{c}_vs_baseline"] = math.nan
            continue
        out[f"{c}_vs_baseline"] = out[column].to_numpy() / ref[column].reindex(index).to_numpy()
    return out


def summary(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per (part, load, policy): seeds reaching the target, then the median [min-max]
    over seeds of each cost to target and of the ratio to the baseline."""
    rows = []
    status = per_run.status if "status" in per_run else None
    for (part, load, policy), runs in per_run.groupby(["part", "load", "policy"], sort=False):
        st = status.loc[runs.index] if status is not None else None
        reached = int(runs.reached.fillna(False).astype(bool).sum())
        row = {"part": part, "load": load, "policy": policy, "reached": f"{reached}/{len(runs)}"}
        shown = [f"{c}_to_target" for c in SHOWN] + ["joules_vs_baseline", "seconds_vs_baseline"]
        for c in [*shown, "joules_per_round", "seconds_per_round"]:
            row[c] = median_range(column(runs, c), st, digits=3)
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder for the tables (CSV)")
    p.add_argument("--smoke", action="store_true", help="1 seed, few points and rounds")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--target", type=float, default=TARGET, help="test accuracy to reach")
    args = p.parse_args(argv)
    target = 0.3 if args.smoke and args.target == TARGET else args.target
    seeds = 1 if args.smoke else args.seeds
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for pt in points(args.smoke, seeds):
        keys = {k: pt[k] for k in ("part", "load", "policy", "seed")}
        point = run_point(pt["sc"])
        if point.records is None:
            rows.append({**raised_row(point, **keys), "reached": False})
        else:
            rows.append(per_run_row(point.records, target, keys))
        r = rows[-1]
        print(
            f"  {r['part']} | {r['load']} | {r['policy']} | seed {r['seed']}: {r['status']}, "
            f"joules to target {r.get('joules_to_target', math.nan):.4g}",
            flush=True,
        )
    per_run = with_ratios(pd.DataFrame(rows))
    table = summary(per_run)
    per_run.to_csv(out / "per_run.csv", index=False)
    table.to_csv(out / "summary.csv", index=False)
    print(
        f"\ntest accuracy >= {target:g}; median [min-max] over {seeds} seed(s); *_vs_baseline: "
        "paired by seed with the part's baseline at the same load (uniform/equal/fixed, "
        "uniform, dedicated)"
    )
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(table.to_string(index=False))
    failed = raised_points(per_run, ["part", "load", "policy", "seed"])
    if failed:
        print("\n" + failed)
    print(f"\nTables in {out}/")
    return {"per_run": per_run, "summary": table}


if __name__ == "__main__":
    main()
