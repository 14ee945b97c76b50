"""The block-cyclic study: MM-PSGD and MC-PSGD against FedAvg on block-cyclic data and FedAvg on
shuffled data (Ding et al. 2020), checking the digest's claims C1-C5 (block_cyclic.md, section 7)
with its pass criteria, at its scaled-down setting: digits (embedded), 20 clients, a 64-32-10
MLP, B = 8, lr 0.05, I = 10 local steps, M = 2 blocks of E = 50 rounds (label windows 0-5 and
5-9 + 0), all clients every round, 3 seeds paired by seed (every method of a seed sees the same
partition and radio). FedAvg-shuffled is FedAvg on an iid partition without blocks.

Figures are block-averaged accuracies (predictor m, or FedAvg's model, on block m's test rows,
averaged over blocks), over the last cycle (mean, min, max): the paper's Fig. 2 measure. Each
run's simulated seconds and joules stand beside its rounds (MC-PSGD moves twice the models).

Every claim is decided in each seed on that seed's runs, then reported as "holds in k of n
seeds" (`flnet.analysis.per_seed`; "holds" only when it holds in all); a seed where a run the
claim needs did not complete (diverged) is undecided, never a pass, and a diverged run has no
figures (never its last finite accuracy). The numbers are medians [min-max] over seeds.

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
row per run), claims.csv (one row per claim: holds or not, with its numbers). A run that raises
(a bad point, a FlnetError) is a row with its status and error (`flnet.analysis.run_point`):
it has no figures, the claims that need it are undecided for its seed, it is listed after the
claims, and the study goes on.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flnet.analysis import (
    OK,
    decided,
    ended_as,
    median_range,
    per_seed,
    raised_points,
    run_point,
    to_target,
)
from flnet.papers.sources import scenario_base
from flnet.scenario import merge

# the CPU-scale setting (scenarios/papers/block_cyclic/cpu.yaml); each run sets its method, its
# blocks (none for FedAvg-shuffled), its seed and its rounds
BASE: dict[str, Any] = scenario_base(
    "block_cyclic",
    "cpu",
    "name",
    "seed",
    "algorithm.name",
    "algorithm.averaging",
    "data.blocks",
    "run.rounds",
)
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
    """Records of one run, with `block_avg` (the block-averaged accuracy) and labels; a run
    that raised: one row with its status and `error`, every figure NaN."""
    algorithm, cyclic = METHODS[method]
    data: dict[str, Any] = {"partition": {"kind": "iid"}}
    if cyclic:
        data["blocks"] = {"num_blocks": blocks, "rounds_per_block": rounds_per_block}
    point = run_point(
        merge(
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
    if point.records is None:
        rec = pd.DataFrame([{"status": point.status, "error": point.error}])
        rec = rec.assign(**dict.fromkeys(RAISED_NAN, np.nan))
    else:
        rec = point.records
        rec["block_avg"] = rec["block_accuracy_mean"] if cyclic else rec["test_accuracy"]
    return rec.assign(method=method, seed=seed, blocks=blocks, steps=steps, clients=clients)


# what the figures below read of a run's records: NaN for a run that raised
RAISED_NAN = ("round", "block_avg", "diverged_round", "test_accuracy", "sim_time_s")
RAISED_NAN += ("energy_j", "bits_up")


def ok(rec: pd.DataFrame) -> bool:
    return bool(rec.status.iloc[0] == OK)


def last_cycle(rec: pd.DataFrame, cycle_rounds: int) -> dict[str, Any]:
    """The last cycle's block-averaged accuracy (mean, min, max) and the run's costs; a run that
    did not complete has no accuracy figures (NaN), never its last finite ones."""
    end = rec["round"].max()  # NaN: the run raised
    tail = rec[rec["round"] > end - cycle_rounds]["block_avg"]
    last = rec.iloc[-1]
    per_predictor = [c for c in rec.columns if c.startswith("predictor_")]
    # block-agnostic: each predictor (FedAvg: its model) on the whole test set, mean over them
    agnostic = last[per_predictor].mean() if per_predictor else last.test_accuracy
    good = ok(rec)
    return {
        "status": last.status,
        "ended": ended_as(last.status, last.diverged_round),
        "full_test_accuracy": float(agnostic) if good else np.nan,
        "mean": float(tail.mean()) if good else np.nan,
        "min": float(tail.min()) if good else np.nan,
        "max": float(tail.max()) if good else np.nan,
        "rounds": int(end) if pd.notna(end) else end,
        "error": last.get("error"),
        "sim_time_s": float(last.sim_time_s),
        "energy_j": float(last.energy_j),
        "bits_up": float(last.bits_up),
    }


def first_round_at(rec: pd.DataFrame, threshold: float) -> tuple[float, float, float]:
    """(round, seconds, joules) when the block-averaged accuracy first reaches `threshold`
    (nan: never, or the run did not complete: refused by `flnet.analysis.to_target`)."""
    hit = to_target(rec, threshold, "block_avg", keys=["seed"]).iloc[0]
    return (hit.rounds_to_target, hit.seconds_to_target, hit.joules_to_target)


def claim(name: str, holds: pd.Series, numbers: str) -> dict[str, Any]:
    """One claim decided per seed (`holds`: True, False or None per seed)."""
    verdict, detail = per_seed(holds)
    return {"claim": name, "holds": verdict, "seeds": detail, "numbers": numbers}


def med(values: Any, status: Any = None, digits: int = 3) -> str:
    """median [min-max] over seeds, runs without a figure counted by why."""
    return median_range(values, status, digits=digits)


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="one seed, short cycles (seconds)")
    ap.add_argument("--out", default="runs/block_cyclic_study")
    args = ap.parse_args(argv)
    seeds = [0] if args.smoke else [0, 1, 2]
    e, cycles = (5, 2) if args.smoke else (50, 6)  # E rounds a block (M = 2), C cycles
    tables = study(seeds, e, cycles, args.smoke)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("runs", "claims"):
        tables[name].to_csv(out / f"{name}.csv", index=False)
    with pd.option_context("display.max_colwidth", None, "display.width", 200):
        print(tables["claims"].to_string(index=False))
    failed = raised_points(tables["runs"], ["study", "method", "seed", "blocks", "steps"])
    if failed:
        print("\n" + failed)
    return {name: tables[name] for name in ("runs", "claims")}


def study(seeds: list[int], e: int, cycles: int, smoke: bool) -> dict[str, pd.DataFrame]:
    """Every claim's runs and verdicts: E rounds a block at M = 2, `cycles` cycles. Returns
    the tables runs (one row per run), claims (one row per claim) and curves (C1's records,
    every method and seed)."""
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

    def fig(method: str, key: str) -> list[float]:
        return [stats[(method, s)][key] for s in seeds]

    def done(*methods: str) -> dict[int, bool]:
        return {s: all(stats[(m, s)]["status"] == OK for m in methods) for s in seeds}

    def band(method: str) -> list[float]:
        return [hi - lo for hi, lo in zip(fig(method, "max"), fig(method, "min"))]

    def shown(method: str, key: str = "mean") -> str:
        return med(fig(method, key), fig(method, "status"))

    fa_band, mm_band, mc_band = band("fedavg_cyclic"), band("mm_ema"), band("mc_ema")
    one = done("fedavg_cyclic", "fedavg_shuffled", "mm_ema", "mc_ema")
    a, b, c, d = [], [], [], []
    for i, s in enumerate(seeds):
        fa, sh = stats[("fedavg_cyclic", s)], stats[("fedavg_shuffled", s)]
        mm, mc = stats[("mm_ema", s)], stats[("mc_ema", s)]
        lowest = min(mm["mean"], mc["mean"])
        a.append(decided([one[s]], fa_band[i] >= 0.05 and fa["mean"] <= sh["mean"] - 0.05))
        b.append(decided([one[s]], lowest >= fa["max"]))
        c.append(decided([one[s]], lowest >= sh["mean"] - 0.01))
        d.append(decided([one[s]], max(mm_band[i], mc_band[i]) <= fa_band[i] / 3))
    ratio = [x / y for x, y in zip(fig("mc_ema", "bits_up"), fig("mm_ema", "bits_up"))]
    nums = (
        f"last-cycle mean: FedAvg-cyclic {shown('fedavg_cyclic')}, its min "
        f"{shown('fedavg_cyclic', 'min')}, max {shown('fedavg_cyclic', 'max')}, band "
        f"{med(fa_band)}; shuffled {shown('fedavg_shuffled')}; MM ema {shown('mm_ema')} (band "
        f"{med(mm_band)}); MC ema {shown('mc_ema')} (band {med(mc_band)}); MM uniform "
        f"{shown('mm_uniform')}; on the whole test set MM {shown('mm_ema', 'full_test_accuracy')}"
        f", MC {shown('mc_ema', 'full_test_accuracy')}, FedAvg-cyclic "
        f"{shown('fedavg_cyclic', 'full_test_accuracy')}; seconds MM "
        f"{med(fig('mm_ema', 'sim_time_s'), digits=4)} vs MC "
        f"{med(fig('mc_ema', 'sim_time_s'), digits=4)}, joules MM "
        f"{med(fig('mm_ema', 'energy_j'))} vs MC {med(fig('mc_ema', 'energy_j'))}, uplink bits "
        f"MC/MM {med(ratio, digits=4)}"
    )
    claims += [
        claim("C1a FedAvg-cyclic oscillates, below shuffled", pd.Series(a), nums),
        claim("C1b MM, MC mean >= FedAvg-cyclic max (must pass)", pd.Series(b), nums),
        claim("C1c MM, MC >= shuffled - 1 point", pd.Series(c), nums),
        claim("C1d MM, MC band <= FedAvg band / 3", pd.Series(d), nums),
    ]
    r0, r1 = e, e + 10 if not smoke else e + 5
    jump = {}
    for s in seeds:
        by_round = c1[("mm_ema", s)].set_index("round").block_avg
        jump[s] = (by_round.get(r0, np.nan), by_round.get(r1, np.nan))
    mm_ok = done("mm_ema")
    claims.append(
        claim(
            "C5 MM jumps at block 2's first visit",
            pd.Series([decided([mm_ok[s]], v1 >= v0 + 0.15) for s, (v0, v1) in jump.items()]),
            f"{r0}: {med([v[0] for v in jump.values()])}, "
            f"{r1}: {med([v[1] for v in jump.values()])}",
        )
    )

    # C2: M * E fixed
    m_values = [2, 5] if smoke else [2, 5, 10]
    c2: dict[tuple[str, int, int], dict] = {}
    for m_blocks in m_values:
        for method in ("fedavg_cyclic", "mm_ema", "mc_ema"):
            for s in seeds:
                rec = one_run(
                    method, s, blocks=m_blocks, rounds_per_block=2 * e // m_blocks, cycles=cycles
                )
                st = last_cycle(rec, cycle_rounds)
                rows.append({"study": "C2", "method": method, "seed": s, "blocks": m_blocks, **st})
                c2[(method, m_blocks, s)] = st
    holds2 = []
    for s in seeds:
        fa = [c2[("fedavg_cyclic", m, s)]["mean"] for m in m_values]
        steady = all(
            c2[(meth, m, s)]["mean"] >= c2[(meth, m_values[0], s)]["mean"] - 0.01
            for meth in ("mm_ema", "mc_ema")
            for m in m_values
        )
        needed = [st["status"] == OK for (_, _, seed), st in c2.items() if seed == s]
        holds2.append(decided(needed, all(x > y for x, y in zip(fa, fa[1:])) and steady))
    claims.append(
        claim(
            "C2 FedAvg-cyclic degrades with M, MM and MC do not",
            pd.Series(holds2),
            ", ".join(
                f"{meth} M={m}: "
                + med(
                    [c2[(meth, m, s)]["mean"] for s in seeds],
                    [c2[(meth, m, s)]["status"] for s in seeds],
                )
                for meth in ("fedavg_cyclic", "mm_ema", "mc_ema")
                for m in m_values
            ),
        )
    )

    # C3: rounds (seconds, joules) to a threshold at I = 5 and I = 20
    threshold = 0.96
    c3: dict[tuple[str, int, int], tuple] = {}
    for steps in (5, 20):
        for method in ("fedavg_cyclic", "mm_ema", "mc_ema"):
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
                        "status": rec.status.iloc[0],
                        "ended": ended_as(rec.status.iloc[0], rec.diverged_round.iloc[0]),
                        "error": rec.iloc[0].get("error"),
                        "rounds_to_threshold": hit[0],
                        "seconds_to_threshold": hit[1],
                        "joules_to_threshold": hit[2],
                    }
                )
                c3[(method, steps, s)] = (*hit, rec.status.iloc[0])

    def fewer(method: str, s: int) -> bool:
        """Reaches the threshold at I = 20, in fewer rounds than at I = 5 (never = infinity)."""
        r5, r20 = c3[(method, 5, s)][0], c3[(method, 20, s)][0]
        return bool(np.isfinite(r20) and (np.isnan(r5) or r20 < r5))

    holds3 = [
        decided(
            [c3[k][3] == OK for k in c3 if k[2] == s],
            fewer("mm_ema", s)
            and fewer("mc_ema", s)
            and all(np.isnan(c3[("fedavg_cyclic", i, s)][0]) for i in (5, 20)),
        )
        for s in seeds
    ]

    def cost(method: str, steps: int, j: int, digits: int = 3) -> str:
        values = [c3[(method, steps, s)][j] for s in seeds]
        return med(values, [c3[(method, steps, s)][3] for s in seeds], digits=digits)

    claims.append(
        claim(
            f"C3 fewer rounds to {threshold} at I=20 than I=5; FedAvg-cyclic never",
            pd.Series(holds3),
            ", ".join(
                f"{m} I={i}: {cost(m, i, 0)} rounds / {cost(m, i, 1)} s / {cost(m, i, 2)} J"
                for i in (5, 20)
                for m in ("fedavg_cyclic", "mm_ema", "mc_ema")
            ),
        )
    )

    # C4: partial participation from a pool of 80
    c4: dict[tuple[str, float, int], dict] = {}
    for method in ("mm_ema", "mc_ema"):
        for frac in (0.25, 0.5):
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
                c4[(method, frac, s)] = st
    holds4 = [
        decided(
            [st["status"] == OK for k, st in c4.items() if k[2] == s]
            + [stats[(m, s)]["status"] == OK for m in ("mm_ema", "mc_ema")],
            all(
                abs(st["mean"] - stats[(k[0], s)]["mean"]) <= 0.015
                for k, st in c4.items()
                if k[2] == s
            ),
        )
        for s in seeds
    ]
    claims.append(
        claim(
            "C4 partial participation within 1.5 points",
            pd.Series(holds4),
            ", ".join(
                f"{m} {f}: "
                + med(
                    [c4[(m, f, s)]["mean"] for s in seeds], [c4[(m, f, s)]["status"] for s in seeds]
                )
                + f" (full {shown(m)})"
                for m in ("mm_ema", "mc_ema")
                for f in (0.25, 0.5)
            ),
        )
    )

    curves = pd.concat(c1.values(), ignore_index=True)
    return {"runs": pd.DataFrame(rows), "claims": pd.DataFrame(claims), "curves": curves}


if __name__ == "__main__":
    main()
