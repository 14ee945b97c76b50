"""How many local steps (tau) minimise the joules (or the seconds) to reach a target accuracy?

Per-round energy grows linearly in tau (compute) on top of a fixed radio cost per round, while
the rounds needed to reach the target fall with tau, then flatten: the energy to target has an
interior optimum whose place depends on the radio/compute cost ratio (Luo et al., INFOCOM 2021;
Li et al., ICLR 2020, Fig. 1a; DRDM Eq. 18 and Fig. 4). This script sweeps tau and seeds (and
whatever else the scenario's `sweep:` section sweeps, e.g. SNR x bandwidth), then, in each cell
of the other swept fields, picks the tau with the least cost to target per seed, and prints the
winner with its per-seed values, median and range, and a verdict decided seed by seed (no clear
winner when the seeds disagree; a winner at the edge of the grid; taus that evaluation too
sparse cannot rank). Runs that never reach the target count as infinitely costly; none is
dropped. The analysis is `flnet analyze`'s (flnet.comparison.compare): `flnet analyze OUT
--target T` prints the same on the same sweep.

    python analysis/tau_energy.py                       # the quickstart, 6 taus x 3 seeds
    python analysis/tau_energy.py --smoke               # the seconds-long version CI runs
    python analysis/tau_energy.py --scenario my.yaml --taus 1,2,5,10 --target 0.9 --workers 2

Everything is written under --out (default runs/tau_energy, which git ignores): the sweep
(one folder per point, points.csv, records.parquet), to_target.csv (one row per run),
best_tau_per_seed.csv and best_tau.csv (one row per cell), series.csv (one row per tau and cell).
"""

from __future__ import annotations

import argparse

import pandas as pd

from flnet.analysis import TAU
from flnet.comparison import compare
from flnet.sweeps import load_base, run_sweep, spec_from


def show(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}")


def main(argv=None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="scenarios/quickstart.yaml")
    p.add_argument("--taus", help="default 1,2,5,10,20,50, or the scenario's sweep: section")
    p.add_argument("--seeds", help="default 0,1,2, or the scenario's sweep: section")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument(
        "--metric",
        default="test_accuracy",
        help="accuracy column the target applies to, e.g. client_accuracy_worst",
    )
    p.add_argument("--cost", default="joules", choices=("joules", "seconds", "rounds", "bits"))
    p.add_argument("--rounds", type=int, help="run.rounds (default: the scenario's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run the points on Ray (a local instance, or the cluster at ADDRESS)",
    )
    p.add_argument(
        "--eval-every",
        type=int,
        default=1,
        help="run.eval_every for every point (default 1: the cost to target is read between "
        "consecutive rounds; a coarser grid may leave taus that cannot be ranked)",
    )
    p.add_argument("--out", default="runs/tau_energy")
    p.add_argument("--smoke", action="store_true", help="two taus, two seeds, few rounds")
    args = p.parse_args(argv)
    _, in_file = load_base(args.scenario)
    taus = (
        None
        if TAU in in_file.grid and not args.taus
        else [int(t) for t in (args.taus or "1,2,5,10,20,50").split(",")]
    )
    seeds = (
        None
        if in_file.seeds and not args.seeds
        else [int(s) for s in (args.seeds or "0,1,2").split(",")]
    )
    fixed = [f"run.eval_every={args.eval_every}"]
    if args.rounds:
        fixed.append(f"run.rounds={args.rounds}")
    if args.smoke:
        taus, seeds, args.workers, args.target = [1, 10], [0, 1], 1, 0.5
        fixed.append("run.rounds=20")
    if args.metric == "test_accuracy":  # the run can stop there; later rounds change nothing
        fixed.append(f"run.target_accuracy={args.target}")
    spec = spec_from({TAU: taus} if taus else None, seeds=seeds, fixed=fixed)
    result = run_sweep(
        args.scenario,
        spec,
        workers=args.workers,
        out_dir=args.out,
        backend="ray" if args.ray else "local",
        address=None if args.ray in (None, "local") else args.ray,
    )
    bad = result.table[~result.table.status.isin(("completed", "diverged"))]
    if len(bad):
        print(f"{len(bad)} points did not finish:\n{show(bad)}\n")
    # the one implementation: what `flnet analyze OUT --target T` prints on this sweep
    cmp = compare(args.out, target=args.target, metric=args.metric, cost=args.cost, choose=TAU)
    cmp.write(args.out)
    print(cmp.text(), end="")
    print(
        f"\nsweep wall time {result.wall_s:.1f} s ({len(result.ran)} points run, "
        f"{len(result.skipped)} reused from {args.out}/); evaluated every "
        f"{args.eval_every} round(s); tables in {args.out}/"
    )
    return {
        "per_run": cmp.per_run,
        "per_seed": cmp.per_seed,
        "per_cell": cmp.per_cell,
        "points": result.table,
        "text": cmp.text(),
    }


if __name__ == "__main__":
    main()
