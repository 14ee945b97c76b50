"""How many local steps (tau) minimise the joules (and the seconds) to reach a target accuracy?

Per-round energy grows linearly in tau (compute) on top of a fixed radio cost per round, while
the rounds needed to reach the target fall with tau, then flatten: the energy to target has an
interior optimum whose place depends on the radio/compute cost ratio (Luo et al., INFOCOM 2021;
Li et al., ICLR 2020, Fig. 1a). This script sweeps tau on a scenario and reports, per tau, the
rounds, simulated seconds and joules (compute and radio) to the target.

    python analysis/tau_energy.py                       # the full study on the quickstart
    python analysis/tau_energy.py --smoke               # the seconds-long version CI runs
    python analysis/tau_energy.py --scenario my.yaml --taus 1,2,5,10 --target 0.9 --workers 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

import flnet


def to_target(records: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per tau: the first evaluation at or above `target` (NaN columns when never reached)."""
    rows = []
    for tau, rec in records.groupby("algorithm.local.steps"):
        hit = rec[rec.test_accuracy >= target]
        first = hit.iloc[0] if len(hit) else None
        rows.append({
            "tau": tau,
            "reached": first is not None,
            "rounds": first["round"] if first is not None else float("nan"),
            "sim_time_s": first.sim_time_s if first is not None else float("nan"),
            "energy_j": first.energy_j if first is not None else float("nan"),
            "energy_compute_j": first.energy_compute_j if first is not None else float("nan"),
            "energy_radio_j": (first.energy_uplink_j + first.energy_downlink_j)
            if first is not None else float("nan"),
            "best_accuracy": rec.test_accuracy.max(),
        })
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="scenarios/quickstart.yaml")
    p.add_argument("--taus", default="1,2,5,10,20,50")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="runs/tau_energy")
    p.add_argument("--smoke", action="store_true", help="two taus, few rounds: seconds")
    args = p.parse_args(argv)
    taus = [int(t) for t in args.taus.split(",")]
    rounds, workers = args.rounds, args.workers
    if args.smoke:
        taus, rounds, workers, args.target = [1, 10], 20, 1, 0.5
    base = flnet.load_scenario(args.scenario, [f"run.rounds={rounds}", "run.eval_every=1",
                                               f"run.target_accuracy={args.target}"])
    points, records = flnet.sweep(base.model_dump(mode="json"), {"algorithm.local.steps": taus},
                                  workers=workers, out_dir=args.out)
    table = to_target(records, args.target)
    out = Path(args.out)
    table.to_csv(out / "tau_to_target.csv", index=False)
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    reached = table[table.reached]
    if len(reached):
        best_e = reached.loc[reached.energy_j.idxmin()]
        best_t = reached.loc[reached.sim_time_s.idxmin()]
        print(f"\nfewest joules to {args.target:.0%}: tau = {best_e.tau} "
              f"({best_e.energy_j:.4g} J); "
              f"fewest seconds: tau = {best_t.tau} ({best_t.sim_time_s:.4g} s)")
    print(f"written to {out}/tau_to_target.csv")
    return table


if __name__ == "__main__":
    main()
