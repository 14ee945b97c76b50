"""Issue 23, part A: which central algorithm serves the worst client best, and what does it
cost to get there? FedAvg, FedProx, SCAFFOLD, FedDyn, MOON, DRFA and DRDM in the DRDM paper's
setting (Krouka et al. 2025, Sec. 4.1; digest drdm.md): N = 30 clients, m = 20 a round, tau = 10
local steps of batch 32, Zipf sigma = 0.3 client sizes with Dirichlet alpha = 0.1 class mixtures,
a local test split per client in its own label mix, 3 seeds.

    python analysis/central_study.py --out runs/central_study          # the full study
    python analysis/central_study.py --smoke --out runs/central_smoke  # seconds; what CI runs

Data: the embedded digits (1437 training rows) with local_test_fraction 1.0, so client i has as
many local test rows as training rows (the smallest client under Zipf 0.3 holds 35; the script
checks >= 10). Model: an MLP (64 hidden), charged as the paper's KMNIST CNN
(`model.costs_as: cnn_kmnist`) with the energy study's radio and compute model
(scenarios/sweeps/energy_study.yaml; SNR 10 dB, 1 MHz dedicated uplink), so seconds and joules
are Eq. 18's. Every algorithm runs plain SGD at lr 0.1 (the energy study's) and its own config
defaults: nothing is tuned here, and nothing is ever chosen on test accuracy.

It prints, per algorithm, how its runs ended, the final worst-client and mean-client accuracy
(median [min-max] over seeds; worst_last10: the worst-client accuracy averaged over the last 10
evaluations, less noisy than one round's) and the rounds, simulated seconds and joules to a
worst-client target (median over seeds; a seed that never reaches it is censored: "> R" with
what it spent), then each seed's numbers. A run that diverged, failed or was killed has no
final accuracy (it is counted by its status, never entered at its last finite figure or as
chance) and never reaches the target, even if it passed it before it diverged
(`flnet.analysis.to_target`); failed points stay in the tables (the points table is the list
of runs, the records are joined to it). An algorithm
not in this flnet (`flnet.algorithms.records.CONFIGS`) is listed as not available. Each
algorithm's runs go to --out/<algorithm>/ (a sweep: finished runs are reused when the script
runs again), the tables to --out as CSV: summary.csv, per_seed.csv.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from flnet.algorithms.records import CONFIGS
from flnet.analysis import (
    OK,
    censored_median,
    ended_as,
    median_range,
    statuses,
    to_target,
    with_status,
)
from flnet.learn.data import load
from flnet.papers.sources import scenario_base
from flnet.scenario import Scenario, merge
from flnet.sweeps import run_sweep, spec_from

ALGORITHMS = ("fedavg", "fedprox", "scaffold", "feddyn", "moon", "drfa", "drdm")
METRIC = "client_accuracy_worst"
MIN_LOCAL_TEST_ROWS = 10


def algorithm(name: str, per_round: int) -> dict:
    """The algorithm section: SGD at lr 0.1, tau = 10, batch 32, m clients a round (DRFA and
    DRDM draw their m from lambda: their own `clients_per_round`), the rest its defaults."""
    local = {"steps": 10, "batch_size": 32, "lr": 0.1}
    if "cohort" in CONFIGS[name].model_fields:
        return {"name": name, "cohort": {"clients_per_round": per_round}, "local": local}
    return {"name": name, "clients_per_round": per_round, "local": local}


def scenario(name: str, num_clients: int, per_round: int, rounds: int) -> dict:
    """The study's scenario for algorithm `name`: scenarios/papers/drdm/cpu.yaml with this
    algorithm section, client count and rounds."""
    base = scenario_base("drdm", "cpu", "seed", "algorithm")
    base["name"] = "central_study"
    sections = {"algorithm": algorithm(name, per_round), "run": {"rounds": rounds}}
    return merge(base, {**sections, "clients": {"count": num_clients}})


def check_local_tests(base: dict, seeds: list[int]) -> int:
    """The fewest local test rows any client has over the seeds (>= MIN_LOCAL_TEST_ROWS)."""
    fewest = []
    for seed in seeds:
        sc = Scenario.model_validate({**base, "seed": seed})
        data = load(sc.data, sc.clients.count, seed, torch_cpu())
        fewest.append(int(data.label_histogram().num_test_samples.min()))
    if min(fewest) < MIN_LOCAL_TEST_ROWS:
        raise SystemExit(f"a client has only {min(fewest)} local test rows")
    return min(fewest)


def torch_cpu():
    import torch

    return torch.device("cpu")


def _cost(run: pd.DataFrame, cost: str) -> str:
    """Median over seeds of the cost to target, censored seeds counted as infinite ('> x' with
    the least any censored seed spent when the median is censored; `censored_median`)."""
    return censored_median(
        run[f"{cost}_to_target"], run[f"censored_at_{cost}"], run.get("status"), digits=4
    )


def _shown(runs: pd.DataFrame, col: str) -> str:
    return median_range(runs[col], runs.status, digits=3)


def summary(per_run: pd.DataFrame, final: pd.DataFrame, available: list[str]) -> pd.DataFrame:
    rows = []
    for name in ALGORITHMS:
        if name not in available:
            rows.append({"algorithm": name, "available": False})
            continue
        f, r = final[final.algorithm == name], per_run[per_run.algorithm == name]
        rows.append(
            {
                "algorithm": name,
                "available": True,
                "ended": statuses(f.status, f.diverged_round),
                "worst_client_acc": _shown(f, METRIC),
                "worst_last10": _shown(f, "worst_last10"),
                "mean_client_acc": _shown(f, "client_accuracy_mean"),
                "test_acc": _shown(f, "test_accuracy"),
                "worst_median": f[METRIC].median(),
                "reached": f"{int(r.reached.sum())}/{len(f)}",
                "rounds_to_target": _cost(r, "rounds"),
                "seconds_to_target": _cost(r, "seconds"),
                "joules_to_target": _cost(r, "joules"),
            }
        )
    return pd.DataFrame(rows)


def outcomes(
    points: pd.DataFrame, records: pd.DataFrame, target: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per_run: each point's cost to the worst-client `target`, refused for runs that did not
    complete; final: each point's final accuracies, NaN for those runs). Both hold every point of
    the points table, with or without records (a failed point has none)."""
    points = points[["algorithm", "seed", "point", "status", "diverged_round", "sim_time_s"]]
    records = with_status(records, points.drop(columns=["algorithm", "seed"]))
    per_run = to_target(records, target, METRIC, keys=["algorithm", "seed"])
    last = records.sort_values("round").groupby(["algorithm", "seed"], sort=False).tail(1)
    tail = records.sort_values("round").groupby(["algorithm", "seed"], sort=False).tail(10)
    smooth = tail.groupby(["algorithm", "seed"])[METRIC].mean().rename("worst_last10")
    final = (
        points[["algorithm", "seed", "status", "diverged_round"]]
        .merge(
            last[["algorithm", "seed", "round", METRIC, "client_accuracy_mean", "test_accuracy"]],
            on=["algorithm", "seed"],
            how="left",
        )
        .merge(smooth.reset_index(), on=["algorithm", "seed"], how="left")
    )
    unfinished = final.status != OK  # its last finite figures are not its result
    accuracies = [METRIC, "worst_last10", "client_accuracy_mean", "test_accuracy"]
    final.loc[unfinished, accuracies] = np.nan
    final.insert(3, "ended", [ended_as(s, r) for s, r in zip(final.status, final.diverged_round)])
    per_run = final[["algorithm", "seed", "status"]].merge(
        per_run.drop(
            columns=["status", "diverged_round", "diverged_by", "ended_s"], errors="ignore"
        ),
        on=["algorithm", "seed"],
        how="left",
    )
    per_run["reached"] = per_run.reached.astype("boolean").fillna(False).astype(bool)
    return per_run, final


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/central_study", help="folder for runs and tables")
    p.add_argument("--target", type=float, default=0.8, help="worst-client accuracy target")
    p.add_argument("--rounds", type=int, default=150)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="10 clients, 5 a round, 3 rounds, 1 seed")
    args = p.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    clients, per_round, rounds = 30, 20, args.rounds
    if args.smoke:
        clients, per_round, rounds, seeds, args.target = 10, 5, 3, [0], 0.05
        args.workers = 0  # in this process: no worker to start per point
    missing = [a for a in ALGORITHMS if a not in CONFIGS]
    fewest = check_local_tests(scenario("fedavg", clients, per_round, rounds), seeds)
    out = Path(args.out)
    tables = study(out, seeds, clients, per_round, rounds, args.target, args.workers)
    table, per_seed, points = tables["summary"], tables["per_seed"], tables["points"]
    table.to_csv(out / "summary.csv", index=False)
    per_seed.to_csv(out / "per_seed.csv", index=False)

    print(
        f"N = {clients}, m = {per_round}, {rounds} rounds, seeds {seeds}; digits, Zipf 0.3 + "
        f"Dir 0.1; >= {fewest} local test rows per client. Final accuracy: median [min-max] over "
        f"seeds (runs that did not complete counted by status). To worst-client >= "
        f"{args.target:g}: median over seeds (censored: '> spent')."
    )
    shown = table.drop(columns=["worst_median"], errors="ignore")
    print(shown.fillna("-").to_string(index=False))
    if missing:
        print(f"not available in this flnet: {', '.join(missing)}")
    print("\nper seed:")
    print(per_seed.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    bad = points[points.status != "completed"]
    if len(bad):
        print(f"\n{len(bad)} runs did not complete:\n{bad.to_string(index=False)}")
    print(
        f"\nsweeps' wall time {tables['wall_s']:.1f} s; runs under {out}/<algorithm>/, "
        f"tables in {out}/"
    )
    return {"summary": table, "per_seed": per_seed, "per_run": tables["per_run"]}


def study(
    out: Path,
    seeds: list[int],
    clients: int,
    per_round: int,
    rounds: int,
    target: float,
    workers: int,
    algorithms: tuple[str, ...] = ALGORITHMS,
) -> dict:
    """Every available algorithm's sweep over `seeds` (runs under `out`/<algorithm>/) and its
    tables: summary (per algorithm), per_seed, per_run (cost to the worst-client `target`),
    points (every run and how it ended), records (every run's records with its algorithm),
    wall_s."""
    available = [a for a in algorithms if a in CONFIGS]
    results = [
        run_sweep(
            scenario(name, clients, per_round, rounds),
            spec_from(seeds=seeds),
            workers=workers,
            out_dir=out / name,
        )
        for name in available
    ]
    points = pd.concat([r.table.assign(algorithm=n) for n, r in zip(available, results)])
    records = pd.concat([r.records for r in results], ignore_index=True)
    per_run, final = outcomes(points, records, target)
    table = summary(per_run, final, available)
    per_seed = final.merge(
        per_run[
            ["algorithm", "seed", "reached"]
            + [f"{c}_to_target" for c in ("rounds", "seconds", "joules")]
            + [f"censored_at_{c}" for c in ("rounds", "seconds", "joules")]
        ],
        on=["algorithm", "seed"],
        how="left",
    ).sort_values(["algorithm", "seed"])
    return {
        "summary": table,
        "per_seed": per_seed,
        "per_run": per_run,
        "points": points,
        "records": records,
        "wall_s": sum(r.wall_s for r in results),
    }


if __name__ == "__main__":
    main()
