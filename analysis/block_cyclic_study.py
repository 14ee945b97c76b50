"""The block-cyclic study: MM-PSGD and MC-PSGD against FedAvg on block-cyclic data and FedAvg on
shuffled data (Ding et al. 2020), checking the digest's claims C1-C5 (block_cyclic.md, section 7)
with its pass criteria, at its scaled-down setting: digits (embedded), 20 clients, a 64-32-10
MLP, B = 8, lr 0.05, I = 10 local steps, M = 2 blocks of E = 50 rounds (label windows 0-5 and
5-9 + 0), all clients every round, 3 seeds paired by seed (every method of a seed sees the same
partition and radio). FedAvg-shuffled is FedAvg on an iid partition without blocks.

Figures are block-averaged accuracies (predictor m, or FedAvg's model, on block m's test rows,
averaged over blocks), over the last cycle (mean, min, max): the paper's Fig. 2 measure. Each
run's simulated seconds and joules stand beside its rounds (MC-PSGD moves twice the models).

- C1: (a) FedAvg-cyclic's last-cycle band >= 5 points and its mean <= shuffled - 5 points;
  (b, must pass) MM and MC (exponential) last-cycle mean >= FedAvg-cyclic's last-cycle max;
  (c) MM, MC >= shuffled - 1 point; (d) MM, MC band <= 1/3 of FedAvg's.
- C2: M in {2, 5, 10} with M * E fixed: FedAvg-cyclic's mean falls strictly from M = 2 to 10;
  MM and MC do not fall by more than 1 point as M grows.
- C3: rounds to a threshold (0.96, eval every 2 rounds) at I = 5 and I = 20: fewer at I = 20
  for MM and MC; FedAvg-cyclic never reaches it.
- C4: 80 registered clients, 25 % and 50 % a round: MM and MC within 1.5 points of full
  participation (20 clients).
- C5: in cycle 1, MM's block-averaged accuracy at round E + 10 >= at round E + 0.15.

    python analysis/block_cyclic_study.py            # minutes: 3 seeds
    python analysis/block_cyclic_study.py --smoke    # seconds: what the test runs

Tables are printed and written under --out (default runs/block_cyclic_study): runs.csv (one
row per run), claims.csv (one row per claim: holds or not, with its numbers).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flnet.runner import run
from flnet.scenario import load_scenario, merge

BASE: dict[str, Any] = {
    "device": "cpu",
    "data": {"dataset": "digits"},
    "model": {"kind": "mlp", "hidden": [32]},
    "algorithm": {
        "cohort": {"clients_per_round": 20},
        "local": {"steps": 10, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 20},
    "radio": {"mode": "physical", "distance_m": {"kind": "uniform", "low": 50, "high": 500}},
    "run": {"eval_every": 5, "checkpoint_every": None, "checkpoint_interval_s": None},
}
METHODS = {  # name -> (algorithm section, block-cyclic data?)
    "fedavg_cyclic": ({"name": "fedavg"}, True),
    "fedavg_shuffled": ({"name": "fedavg"}, False),
    "mm_ema": ({"name": "mm_psgd", "averaging": "exponential"}, True),
    "mc_ema": ({"name": "mc_psgd", "averaging": "exponential"}, True),
    "mm_uniform": ({"name": "mm_psgd", "averaging": "uniform"}, True),
}


def one_run(
    method: str,
    seed: int,
    *,
    blocks: int,
    rounds_per_block: int,
    cycles: int,
    steps: int = 10,
    clients: int = 20,
    per_round: int = 20,
    eval_every: int = 5,
) -> pd.DataFrame:
    """Records of one run, with `block_avg` (the block-averaged accuracy) and labels."""
    algorithm, cyclic = METHODS[method]
    data: dict[str, Any] = {"partition": {"kind": "iid"}}
    if cyclic:
        data["blocks"] = {"num_blocks": blocks, "rounds_per_block": rounds_per_block}
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "name": f"bc_{method}",
                "seed": seed,
                "data": data,
                "algorithm": {
                    **algorithm,
                    "cohort": {"clients_per_round": per_round},
                    "local": {"steps": steps},
                },
                "clients": {"count": clients},
                "run": {"rounds": blocks * rounds_per_block * cycles, "eval_every": eval_every},
            },
        )
    )
    rec = run(sc, write=False).records
    rec["block_avg"] = rec["block_accuracy_mean"] if cyclic else rec["test_accuracy"]
    return rec.assign(method=method, seed=seed, blocks=blocks, steps=steps, clients=clients)


def last_cycle(rec: pd.DataFrame, cycle_rounds: int) -> dict[str, float]:
    end = int(rec["round"].max())
    tail = rec[rec["round"] > end - cycle_rounds]["block_avg"]
    last = rec.iloc[-1]
    per_predictor = [c for c in rec.columns if c.startswith("predictor_")]
    # block-agnostic: each predictor (FedAvg: its model) on the whole test set, mean over them
    agnostic = last[per_predictor].mean() if per_predictor else last.test_accuracy
    return {
        "full_test_accuracy": float(agnostic),
        "mean": float(tail.mean()),
        "min": float(tail.min()),
        "max": float(tail.max()),
        "rounds": end,
        "sim_time_s": float(last.sim_time_s),
        "energy_j": float(last.energy_j),
        "bits_up": float(last.bits_up),
    }


def first_round_at(rec: pd.DataFrame, threshold: float) -> tuple[float, float, float]:
    """(round, seconds, joules) when the block-averaged accuracy first reaches `threshold`
    (nan: never)."""
    hit = rec[rec["block_avg"] >= threshold]
    if hit.empty:
        return (np.nan, np.nan, np.nan)
    row = hit.iloc[0]
    return (float(row["round"]), float(row.sim_time_s), float(row.energy_j))


def claim(name: str, holds: bool, numbers: str) -> dict[str, Any]:
    return {"claim": name, "holds": "holds" if holds else "does not hold", "numbers": numbers}


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one seed, short cycles (seconds)")
    ap.add_argument("--out", default="runs/block_cyclic_study")
    args = ap.parse_args(argv)
    seeds = [0] if args.smoke else [0, 1, 2]
    e, cycles = (5, 2) if args.smoke else (50, 6)  # E rounds a block (M = 2), C cycles
    cycle_rounds = 2 * e
    rows, claims = [], []

    # C1 (and C5: cycle 1 of the same runs)
    c1 = {
        (m, s): one_run(m, s, blocks=2, rounds_per_block=e, cycles=cycles)
        for m in METHODS
        for s in seeds
    }
    stats = {k: last_cycle(r, cycle_rounds) for k, r in c1.items()}
    rows += [{"study": "C1", "method": m, "seed": s, **v} for (m, s), v in stats.items()]

    def avg(method: str, key: str) -> float:
        return float(np.mean([stats[(method, s)][key] for s in seeds]))

    fa_band = avg("fedavg_cyclic", "max") - avg("fedavg_cyclic", "min")
    shuf = avg("fedavg_shuffled", "mean")
    a = fa_band >= 0.05 and avg("fedavg_cyclic", "mean") <= shuf - 0.05
    b = min(avg("mm_ema", "mean"), avg("mc_ema", "mean")) >= avg("fedavg_cyclic", "max")
    c = min(avg("mm_ema", "mean"), avg("mc_ema", "mean")) >= shuf - 0.01
    bands = [avg(m, "max") - avg(m, "min") for m in ("mm_ema", "mc_ema")]
    d = max(bands) <= fa_band / 3
    nums = (
        f"last-cycle mean [min, max]: FedAvg-cyclic {avg('fedavg_cyclic', 'mean'):.3f} "
        f"[{avg('fedavg_cyclic', 'min'):.3f}, {avg('fedavg_cyclic', 'max'):.3f}], shuffled "
        f"{shuf:.3f}, MM ema {avg('mm_ema', 'mean'):.3f} (band {bands[0]:.3f}), MC ema "
        f"{avg('mc_ema', 'mean'):.3f} (band {bands[1]:.3f}), MM uniform "
        f"{avg('mm_uniform', 'mean'):.3f}; on the whole test set MM "
        f"{avg('mm_ema', 'full_test_accuracy'):.3f}, "
        f"MC {avg('mc_ema', 'full_test_accuracy'):.3f}, "
        f"FedAvg-cyclic {avg('fedavg_cyclic', 'full_test_accuracy'):.3f}; "
        f"seconds MM {avg('mm_ema', 'sim_time_s'):.1f} vs MC "
        f"{avg('mc_ema', 'sim_time_s'):.1f}, joules MM {avg('mm_ema', 'energy_j'):.2f} vs MC "
        f"{avg('mc_ema', 'energy_j'):.2f}, uplink bits MC/MM "
        f"{avg('mc_ema', 'bits_up') / avg('mm_ema', 'bits_up'):.3f}"
    )
    claims += [
        claim("C1a FedAvg-cyclic oscillates, below shuffled", a, nums),
        claim("C1b MM, MC mean >= FedAvg-cyclic max (must pass)", b, nums),
        claim("C1c MM, MC >= shuffled - 1 point", c, nums),
        claim("C1d MM, MC band <= FedAvg band / 3", d, nums),
    ]
    at = {
        r: float(np.mean([c1[("mm_ema", s)].set_index("round").block_avg[r] for s in seeds]))
        for r in (e, e + 10 if not args.smoke else e + 5)
    }
    (r0, r1), (v0, v1) = at.keys(), at.values()
    claims.append(
        claim(
            "C5 MM jumps at block 2's first visit",
            v1 >= v0 + 0.15,
            f"{r0}: {v0:.3f}, {r1}: {v1:.3f}",
        )
    )

    # C2: M * E fixed
    m_values = [2, 5] if args.smoke else [2, 5, 10]
    c2: dict[tuple[str, int], float] = {}
    for m_blocks in m_values:
        for method in ("fedavg_cyclic", "mm_ema", "mc_ema"):
            vals = []
            for s in seeds:
                rec = one_run(
                    method, s, blocks=m_blocks, rounds_per_block=2 * e // m_blocks, cycles=cycles
                )
                st = last_cycle(rec, cycle_rounds)
                rows.append({"study": "C2", "method": method, "seed": s, "blocks": m_blocks, **st})
                vals.append(st["mean"])
            c2[(method, m_blocks)] = float(np.mean(vals))
    fa = [c2[("fedavg_cyclic", m)] for m in m_values]
    ok = all(x > y for x, y in zip(fa, fa[1:])) and all(
        c2[(meth, m)] >= c2[(meth, m_values[0])] - 0.01
        for meth in ("mm_ema", "mc_ema")
        for m in m_values
    )
    claims.append(
        claim(
            "C2 FedAvg-cyclic degrades with M, MM and MC do not",
            ok,
            ", ".join(f"{k[0]} M={k[1]}: {v:.3f}" for k, v in c2.items()),
        )
    )

    # C3: rounds (seconds, joules) to a threshold at I = 5 and I = 20
    threshold = 0.96
    c3: dict[tuple[str, int], list] = {}
    for steps in (5, 20):
        for method in ("fedavg_cyclic", "mm_ema", "mc_ema"):
            hits = []
            for s in seeds:
                rec = one_run(
                    method,
                    s,
                    blocks=2,
                    rounds_per_block=e,
                    cycles=cycles,
                    steps=steps,
                    eval_every=2,
                )
                hit = first_round_at(rec, threshold)
                rows.append(
                    {
                        "study": "C3",
                        "method": method,
                        "seed": s,
                        "steps": steps,
                        "rounds_to_threshold": hit[0],
                        "seconds_to_threshold": hit[1],
                        "joules_to_threshold": hit[2],
                    }
                )
                hits.append(hit)
            c3[(method, steps)] = list(np.mean(np.array(hits), axis=0))
    ok = all(c3[(m, 20)][0] < c3[(m, 5)][0] for m in ("mm_ema", "mc_ema")) and all(
        np.isnan(c3[("fedavg_cyclic", i)][0]) for i in (5, 20)
    )
    claims.append(
        claim(
            f"C3 fewer rounds to {threshold} at I=20 than I=5; FedAvg-cyclic never",
            ok,
            ", ".join(
                f"{k[0]} I={k[1]}: {v[0]:.0f} rounds / {v[1]:.2f} s / {v[2]:.3f} J"
                for k, v in c3.items()
            ),
        )
    )

    # C4: partial participation from a pool of 80
    c4 = {}
    for method in ("mm_ema", "mc_ema"):
        full = avg(method, "mean")
        for frac in (0.25, 0.5):
            vals = []
            for s in seeds:
                rec = one_run(
                    method,
                    s,
                    blocks=2,
                    rounds_per_block=e,
                    cycles=cycles,
                    clients=80,
                    per_round=int(80 * frac),
                )
                st = last_cycle(rec, cycle_rounds)
                rows.append({"study": "C4", "method": method, "seed": s, "fraction": frac, **st})
                vals.append(st["mean"])
            c4[(method, frac)] = (float(np.mean(vals)), full)
    claims.append(
        claim(
            "C4 partial participation within 1.5 points",
            all(abs(v - f) <= 0.015 for v, f in c4.values()),
            ", ".join(f"{k[0]} {k[1]}: {v:.3f} (full {f:.3f})" for k, (v, f) in c4.items()),
        )
    )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables = {"runs": pd.DataFrame(rows), "claims": pd.DataFrame(claims)}
    for name, table in tables.items():
        table.to_csv(out / f"{name}.csv", index=False)
    with pd.option_context("display.max_colwidth", None, "display.width", 200):
        print(tables["claims"].to_string(index=False))
    return tables


if __name__ == "__main__":
    main()
