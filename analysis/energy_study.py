"""The DRDM energy study, read from its sweep: the tau with the fewest joules to a target
worst-client accuracy in each (uplink SNR, bandwidth) cell, per seed, with the median and range
over seeds (the paper's Fig. 4; scenarios/sweeps/energy_study.yaml says how it is set up).

    flnet sweep scenarios/sweeps/energy_study.yaml --workers 2 --out runs/energy_study
    python analysis/energy_study.py runs/energy_study            # target 0.8, worst client
    python analysis/energy_study.py runs/energy_study --target 0.85 --cost seconds

It prints, per cell, the winner (the tau with the smallest median cost over seeds), each
seed's own best tau, their median and [min-max], the winner's cost over seeds, and whether
another tau's median lies within the winner's spread over seeds (then the winner is not clear).
Then the winners as an SNR x bandwidth table, and the rounds each tau took to the target per
seed (the learning is the same in every radio cell). A run that never reaches the target costs
infinitely much; none is dropped. Tables are written as CSV under --out (default
RESULTS/energy_study/, next to the sweep, never inside the repository unless the sweep is).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from flnet.analysis import TAU, best_tau, read_records, to_target

SNR = "radio.uplink_snr_db"
BANDWIDTH = "radio.uplink.bandwidth_hz"


def _tau(v: float) -> str:
    return "none" if v != v else f"{v:g}"


def _range(lo: float, hi: float) -> str:
    return "never" if math.isinf(lo) else f"[{lo:.4g}-{hi:.4g}]"


def cell_table(per_cell: pd.DataFrame, cost: str) -> pd.DataFrame:
    """One readable row per (SNR, bandwidth) cell."""
    c = f"{cost}_to_target"
    return pd.DataFrame(
        {
            "snr_db": per_cell[SNR],
            "bandwidth_mhz": per_cell[BANDWIDTH] / 1e6,
            "best_tau": per_cell.best_tau.map(_tau),
            "per_seed": per_cell.best_tau_per_seed,
            "seed_median": per_cell.best_tau_median.map(_tau),
            "seed_range": [
                f"[{_tau(a)}-{_tau(b)}]"
                for a, b in zip(per_cell.best_tau_min, per_cell.best_tau_max)
            ],
            f"{cost}_median": per_cell[f"{c}_median"].map(lambda v: f"{v:.4g}"),
            f"{cost}_range": [
                _range(a, b) for a, b in zip(per_cell[f"{c}_min"], per_cell[f"{c}_max"])
            ],
            "runner_up": per_cell.runner_up_tau.map(_tau),
            "unclear": per_cell.within_spread,
        }
    )


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="the sweep's folder (or its records file)")
    p.add_argument("--target", type=float, default=0.8, help="accuracy to reach (Fig. 4: 0.8)")
    p.add_argument("--metric", default="client_accuracy_worst", help="accuracy column")
    p.add_argument("--cost", default="joules", choices=("joules", "seconds", "rounds", "bits"))
    p.add_argument("--out", help="folder for the CSV tables (default RESULTS/energy_study)")
    args = p.parse_args(argv)
    records = read_records(args.results)
    per_run = to_target(records, args.target, args.metric)
    per_seed, per_cell = best_tau(per_run, args.cost, cell=[SNR, BANDWIDTH])
    table = cell_table(per_cell, args.cost)
    grid = per_cell.pivot(index=SNR, columns=BANDWIDTH, values="best_tau")
    grid = grid.rename(columns=lambda b: f"{b / 1e6:g} MHz").map(_tau)
    rounds = per_run.drop_duplicates([TAU, "seed"]).pivot(
        index=TAU, columns="seed", values="rounds_to_target"
    )
    rounds = rounds.rename(columns=lambda s: f"seed {s}").map(_tau)

    out = Path(args.out) if args.out else Path(args.results) / "energy_study"
    if Path(args.results).is_file() and not args.out:
        out = Path(args.results).parent / "energy_study"
    out.mkdir(parents=True, exist_ok=True)
    per_run.to_csv(out / "to_target.csv", index=False)
    per_seed.to_csv(out / "best_tau_per_seed.csv", index=False)
    per_cell.to_csv(out / "best_tau.csv", index=False)

    print(
        f"best tau per cell: fewest {args.cost} to {args.metric} >= {args.target:g}, chosen "
        f"per seed (not reached = infinite); {per_cell.seeds.max()} seeds"
    )
    print(table.to_string(index=False))
    print("\nbest tau (SNR dB down, uplink bandwidth across):")
    print(grid.rename_axis(index="snr_db", columns=None).to_string())
    print(f"\nrounds to {args.metric} >= {args.target:g} per tau and seed (none: not reached):")
    print(rounds.rename_axis(index="tau", columns=None).to_string())
    print(
        "\nunclear: another tau's median cost lies within the winner's range over seeds. "
        f"Tables in {out}/"
    )
    return {"per_run": per_run, "per_seed": per_seed, "per_cell": per_cell, "table": table}


if __name__ == "__main__":
    main()
