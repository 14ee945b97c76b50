"""DFL and C-DFL (Liu, Chen, Zhang): tau1 local steps, then tau2 gossip steps a round; C-DFL's
CHOCO gossip on compressed models. The claims are the DFL digest's (section 7.2), judged as the
paper judges, by the final training loss (the averaged model's loss on every training row,
`run.global_train_loss`), from scenarios/papers/dfl/cpu.yaml; the extension (the best tau2
under a time budget moves with the radio) is the gossip study's tau1 x tau2 part
(analysis/gossip_study.py: `dfl_grid`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flnet.analysis import OK, column, final_value, median_range, run_ended, run_point
from flnet.papers.figures import curves
from flnet.papers.report import Claim, PaperReport, checked
from flnet.papers.sources import scenario_data, scenario_path, shown_path, study
from flnet.scenario import merge

TITLE = "Decentralized FL: balancing communication and computing costs (DFL, C-DFL)"
REFERENCE = "Liu, Chen, Zhang (digest: dfl_cdfl.md)"
LOSS = "global_train_loss"
TAU2S = (1, 2, 4, 8, 15)
TAU1S = (1, 2, 4, 10)
LOCAL_STEPS = 600  # B and C: every run takes this many local steps (the digest's pilot)
# C: topologies of 10 nodes by their zeta (the digest's values): edges as MH-weighted graphs
RING = [[i, (i + 1) % 10] for i in range(10)]
TOPOLOGIES: dict[str, tuple[float, dict]] = {
    "full (C = J)": (0.0, {"kind": "full"}),
    "Moebius ladder": (0.655, {"kind": "edges", "edges": RING + [[i, i + 5] for i in range(5)]}),
    "quasi-ring": (0.850, {"kind": "edges", "edges": RING + [[0, 5], [3, 6]]}),
    "ring": (0.873, {"kind": "ring"}),
    "path": (0.951, {"kind": "edges", "edges": RING[:-1]}),
}
COMPRESSED = {  # D: C-DFL at gamma = 1 (the paper's deltas)
    "rand_k 0.89": {"kind": "rand_k", "fraction": 0.89},
    "rand_k 0.67": {"kind": "rand_k", "fraction": 0.67},
    "random_gossip 0.8": {"kind": "random_gossip", "p": 0.8},
    "random_gossip 0.6": {"kind": "random_gossip", "p": 0.6},
}
UNSTABLE = {"rand_k 0.3": {"kind": "rand_k", "fraction": 0.3}}  # D5: must be flagged
D_RADIO = {"d2d": {"bandwidth_hz": 1e6, "snr_db": 10.0, "sharing": "dedicated"}}  # slow links
D_BUDGET_ROUNDS = 25  # D2's budget: half of what DFL(4, 4) spends in 50 rounds
DIVERGENCE = {"loss_above_start": 100.0}


def _base() -> dict:
    return scenario_data("dfl", "cpu")


def _run(name: str, seed: int, **sections: Any) -> dict:
    """One run's row: how it ended, its final training loss and test accuracy (NaN when it
    did not complete), its simulated seconds and rounds; and its records for the figures."""
    sc = merge(merge(_base(), {"name": name, "seed": seed}), sections)
    point = run_point(sc)
    row: dict[str, Any] = {"name": name, "seed": seed, "status": point.status}
    if point.records is None:
        return {**row, "ended": point.status, "error": point.error, "records": None}
    rec = point.records
    last = rec.iloc[-1]
    return {
        **row,
        "ended": run_ended(rec),
        LOSS: final_value(rec, LOSS),
        "test_accuracy": final_value(rec),
        "rounds": last["round"],
        "sim_time_s": last.sim_time_s,
        "records": rec,
    }


def _sweep(label: str, values: dict[Any, dict], seeds: list[int], **run: Any) -> pd.DataFrame:
    """Every value's scenario sections (merged into cpu.yaml) for every seed."""
    rows = []
    for value, sections in values.items():
        sections = merge(sections, {"run": run}) if run else sections
        for seed in seeds:
            rows.append({label: value, **_run(f"dfl_{label}", seed, **sections)})
    return pd.DataFrame(rows)


def _losses(df: pd.DataFrame, key: str, order: list) -> pd.DataFrame:
    """Final training loss per seed (rows) and `key` value (columns, in `order`); NaN for a run
    that did not complete."""
    return df.pivot(index="seed", columns=key, values=LOSS).reindex(columns=order)


def _complete(df: pd.DataFrame, key: str, order: list) -> pd.Series:
    ok = df.assign(ok=df.status == OK).pivot(index="seed", columns=key, values="ok")
    return ok.reindex(columns=order).fillna(False).all(axis=1)


def _shown(df: pd.DataFrame, key: str, order: list) -> str:
    return "; ".join(
        f"{key}={v}: {median_range(column(g, LOSS), g.status, digits=3)}"
        for v in order
        for g in [df[df[key] == v]]
    )


def _monotone(losses: pd.DataFrame, done: pd.Series, rising: bool) -> pd.Series:
    steps = np.diff(losses.to_numpy(dtype=float), axis=1)
    ok = (steps > 0) if rising else (steps < 0)
    return pd.Series(ok.all(axis=1), index=losses.index).where(done, None)


def run(seeds: list[int], smoke: bool, work: Path) -> PaperReport:
    """The reproduction (`work`: a folder for its runs; unused: its runs stay in memory)."""
    rounds = 2 if smoke else int(_base()["run"]["rounds"])
    tau2s = (1, 15) if smoke else TAU2S
    tau1s = (1, 10) if smoke else TAU1S
    steps = 20 if smoke else LOCAL_STEPS
    claims: list[Claim] = []
    cpu = shown_path(scenario_path("dfl", "cpu"))
    figs: list[pd.DataFrame] = []

    # A: tau2 at tau1 = 4
    a = _sweep(
        "tau2",
        {t: {"algorithm": {"gossip_steps": t}} for t in tau2s},
        seeds,
        rounds=rounds,
        eval_every=max(1, rounds // 10),
    )
    figs += [r.assign(series=f"tau2={t}") for t, r in zip(a.tau2, a.records) if r is not None]
    la, done = _losses(a, "tau2", list(tau2s)), _complete(a, "tau2", list(tau2s))
    sets_a = f"{cpu} --set algorithm.gossip_steps={{{', '.join(map(str, tau2s))}}}"
    claims.append(
        checked(
            "A1",
            "a larger tau2 (gossip steps) gives a lower training loss",
            "Fig. 7 (MNIST, ring, tau1 = 4): tau2 = 15 best, tau2 = 1 worst (no numbers)",
            _shown(a, "tau2", list(tau2s)),
            _monotone(la, done, rising=False),
            sets_a,
            seeds,
            "strict monotonicity over five tau2 asks a lot of one seed: adjacent tau2 "
            "(8 and 15) end within noise of each other once the ring is near consensus",
            figure="loss",
        )
    )
    claims.append(
        checked(
            "A2",
            f"tau2 = {tau2s[-1]} beats tau2 = 1 in training loss",
            "Fig. 7: tau2 = 15 converges best, tau2 = 1 (C-SGD) worst",
            _shown(a, "tau2", [1, tau2s[-1]]),
            (la[tau2s[-1]] < la[1]).where(done, None),
            sets_a,
            seeds,
            "smoke: two rounds decide nothing" if smoke else "",
            figure="loss",
        )
    )

    # B: tau1 at tau2 = 4, equal local steps; synchronous SGD (tau1 = 1, C = J)
    b_values: dict[Any, dict] = {
        t: {"algorithm": {"local": {"steps": t}}, "run": {"rounds": max(1, steps // t)}}
        for t in tau1s
    }
    b_values["sync SGD"] = {
        "algorithm": {"local": {"steps": 1}, "topology": {"kind": "full"}, "gossip_steps": 1},
        "run": {"rounds": steps},
    }
    b = _sweep("tau1", b_values, seeds)
    order_b = list(tau1s)
    lb, done_b = _losses(b, "tau1", order_b), _complete(b, "tau1", order_b)
    sets_b = (
        f"{cpu} --set algorithm.local.steps={{{', '.join(map(str, tau1s))}}} "
        f"--set run.rounds={steps}/tau1; sync SGD: --set algorithm.local.steps=1 "
        "--set algorithm.gossip_steps=1 --set algorithm.topology.kind=full"
    )
    claims.append(
        checked(
            "B1",
            "more local steps tau1 between gossip give a worse training loss (equal steps)",
            "Fig. 8 (MNIST, ring, tau2 = 4): the loss gets much worse from tau1 = 1 to 10",
            _shown(b, "tau1", order_b),
            _monotone(lb, done_b, rising=True),
            sets_b,
            seeds,
            "the order holds at the large end (tau1 = 10 worst) but tau1 = 1 and 2 end within "
            "seed noise of each other: one node's few extra local steps on 2 labels cost little "
            "before gossip pulls it back",
        )
    )
    sync = b[b.tau1 == "sync SGD"].set_index("seed")
    others = lb.min(axis=1)
    best = (sync[LOSS].reindex(lb.index) < others).where(
        done_b & (sync.status.reindex(lb.index) == OK), None
    )
    claims.append(
        checked(
            "B2",
            "synchronous SGD (tau1 = 1, exact averaging) is best",
            "Fig. 8: sync SGD has the lowest loss (no numbers)",
            f"sync SGD {median_range(column(sync, LOSS), sync.status, digits=3)}; best DFL "
            f"{median_range(others, None, digits=3)}",
            best,
            sets_b,
            seeds,
            "synchronous SGD averages after every step, so with the same step count and lr it "
            "moves no farther than DFL's nodes: at this budget DFL with a few local steps "
            "(and 4 gossip steps) is ahead; the paper's figure gives no numbers to compare",
        )
    )

    # C: connectivity (zeta) at tau1 = 2, tau2 = 4
    topos = {k: TOPOLOGIES[k] for k in ("full (C = J)", "ring")} if smoke else dict(TOPOLOGIES)
    c = _sweep(
        "topology",
        {k: {"algorithm": {"topology": t, "local": {"steps": 2}}} for k, (_, t) in topos.items()},
        seeds,
        rounds=steps // 2,
    )
    order_c = list(topos)
    lc, done_c = _losses(c, "topology", order_c), _complete(c, "topology", order_c)
    claims.append(
        checked(
            "C",
            "a larger zeta (worse connected graph) gives a worse training loss",
            "Fig. 9 (MNIST, tau1 = 2, tau2 = 4): C = J best, a larger zeta worse",
            "; ".join(
                f"{k} (zeta {topos[k][0]:g}): {median_range(column(g, LOSS), g.status, digits=3)}"
                for k in order_c
                for g in [c[c.topology == k]]
            ),
            _monotone(lc, done_c, rising=True),
            f"{cpu} --set algorithm.local.steps=2 --set run.rounds={steps // 2} "
            "--set algorithm.topology=<each: full, edges (Moebius ladder, quasi-ring, path), "
            "ring>",
            seeds,
            "the medians rise with zeta as the paper says, but the graphs end within a few "
            "hundredths of each other and close zetas (quasi-ring 0.85, ring 0.87) swap in a "
            "seed: with 4 gossip steps a round even the path mixes most disagreement away",
        )
    )

    # D: C-DFL at gamma = 1; at a fixed simulated time on slow links
    budget_point = run_point(
        merge(merge(_base(), {"name": "budget"}), {"radio": D_RADIO, "run": {"rounds": rounds}})
    )
    budget_s = (
        float(budget_point.records.sim_time_s.iloc[-1]) / 2
        if budget_point.records is not None
        else float("nan")
    )
    comp = {"DFL": {"algorithm": {"name": "dfl"}}} | {
        k: {"algorithm": {"name": "cdfl", "consensus_step": 1.0, "compression": v}}
        for k, v in (COMPRESSED if not smoke else dict(list(COMPRESSED.items())[1:3])).items()
    }
    d = _sweep(
        "variant",
        {k: merge(v, {"radio": D_RADIO}) for k, v in comp.items()},
        seeds,
        rounds=100_000,
        eval_every=100_000,
        time_budget_s=budget_s,
    )
    order_d = list(comp)
    ld, done_d = _losses(d, "variant", order_d), _complete(d, "variant", order_d)
    sets_d = (
        f"{cpu} --set algorithm.name=cdfl --set algorithm.consensus_step=1 "
        "--set algorithm.compression=<rand_k 0.89, 0.67; random_gossip 0.8, 0.6> "
        f"--set radio.d2d='{{bandwidth_hz: 1e6, snr_db: 10}}' --set run.time_budget_s="
        f"{budget_s:.4g}"
    )
    claims.append(
        checked(
            "D1",
            "C-DFL converges at the paper's deltas with gamma = 1",
            "Fig. 10: every C-DFL run converges (sparsification 0.89, 0.67; randomized "
            "gossip 0.8, 0.6)",
            ", ".join(f"{k}: {g.ended.iloc[0]}" for k, g in d.groupby("variant", sort=False)),
            done_d,
            sets_d,
            seeds,
            "a run was flagged diverged: its loss passed 100x its start",
        )
    )
    shown_d = "; ".join(
        f"{k}: {median_range(column(g, LOSS), g.status, digits=3)} "
        f"({median_range(column(g, 'rounds'), None, digits=3)} rounds)"
        for k in order_d
        for g in [d[d.variant == k]]
    )
    wins = [k for k in ("rand_k 0.67", "random_gossip 0.8") if k in ld]
    claims.append(
        checked(
            "D2",
            "at a fixed wall-clock time C-DFL (rand_k 0.67, random gossip 0.8) reaches a lower "
            "training loss than DFL",
            "Fig. 10a at time 4: +74.6 % (sparsification 0.67), +50.7 % (randomized gossip "
            "0.8), +16.9 % (0.89) faster convergence than DFL",
            shown_d,
            (ld[wins].lt(ld["DFL"], axis=0).all(axis=1)).where(done_d, None),
            sets_d,
            seeds,
            "rand_k 0.67 wins as the paper says, but randomized gossip 0.8 does not: it fits "
            "no more rounds into the budget than DFL (a gossip step waits for its slowest "
            "link, which the draw rarely skips on every node), so it saves bits, not time; the "
            "paper has no cost model (its wall-clock is undefined)",
            figure="budget",
        )
    )
    figs_d = [r.assign(series=k) for k, r in zip(d.variant, d.records) if r is not None]
    unstable = _sweep(
        "variant",
        {
            k: {
                "algorithm": {"name": "cdfl", "consensus_step": 1.0, "compression": v},
                "run": {"divergence": DIVERGENCE, "eval_every": 5},
            }
            for k, v in UNSTABLE.items()
        },
        seeds,
        rounds=rounds,
    )
    claims.append(
        checked(
            "D5",
            "too strong a compression at gamma = 1 diverges, and the run says so",
            "section 8 and Prop. 2: theory needs gamma ~ 1e-3; gamma = 1 works only for "
            "delta >~ 0.5 (the digest's pilot: rand_k 0.3 reached loss 1e50)",
            ", ".join(unstable.ended),
            (unstable.status == "diverged").reset_index(drop=True),
            f"{cpu} --set algorithm.name=cdfl --set algorithm.consensus_step=1 "
            "--set algorithm.compression='{kind: rand_k, fraction: 0.3}' "
            "--set run.divergence.loss_above_start=100",
            seeds,
            "the loss grew but stayed under the rule's 100x its start within the rounds run",
        )
    )

    # E (not in the paper): the best tau2 under a time budget moves with the radio
    gossip = study("gossip_study")
    regimes = [("fast", "orthogonal"), ("slow", "tdma")]
    grid = gossip.dfl_grid(
        seeds, regimes, (4,), (1, 4) if smoke else (1, 4, 16), 2 if smoke else 25
    )
    claims.append(_extension(grid, seeds, cpu))

    figures = {}
    if figs:
        figures["loss"] = (
            curves(
                pd.concat(figs, ignore_index=True), LOSS, "series", log=True, ylabel="training loss"
            ),
            "A: training loss of the averaged model against rounds for each tau2 (tau1 = 4): "
            "median over seeds, band min-max.",
        )
    if figs_d:
        rec = pd.concat(figs_d, ignore_index=True)
        figures["budget"] = (
            curves(rec, "test_accuracy", "series", x="sim_time_s", ylabel="test accuracy"),
            "D2: test accuracy against simulated seconds on 1 MHz links, up to the budget "
            "(each run is evaluated at its end only).",
        )
    per_run = pd.concat(
        [
            x.drop(columns=["records"]).assign(part=p)
            for p, x in (("A", a), ("B", b), ("C", c), ("D", d), ("D5", unstable))
        ],
        ignore_index=True,
    )
    return PaperReport(
        paper="dfl",
        title=TITLE,
        reference=REFERENCE,
        command="",
        setup=SETUP.format(rounds=rounds, steps=steps, seeds=", ".join(map(str, seeds))),
        claims=claims,
        tables={"dfl_best": gossip.dfl_best(grid)},
        data={"runs": per_run, "dfl_grid": grid},
        figures=figures,
        notes=NOTES,
        smoke=smoke,
    )


def _extension(grid: pd.DataFrame, seeds: list[int], cpu: str) -> Claim:
    """E, per seed: DFL's best tau2 at the budget is larger on fast orthogonal links than on
    slow shared ones (a tie on the slow link counts for the smaller tau2)."""
    dfl = grid[grid.algorithm == "dfl"].assign(
        acc=lambda g: column(g, "test_accuracy").fillna(-np.inf)
    )
    best: dict[tuple, Any] = {}
    for (link, seed), g in dfl.groupby(["link", "seed"]):
        g = g.sort_values("tau2")
        best[(link, seed)] = int(g.tau2.loc[g.acc.idxmax()]) if np.isfinite(g.acc.max()) else None
    holds = [
        None
        if best.get(("fast", s)) is None or best.get(("slow", s)) is None
        else bool(best[("fast", s)] > best[("slow", s)])
        for s in seeds
    ]
    shown = "; ".join(
        f"{link}: best tau2 per seed {[best.get((link, s)) for s in seeds]}"
        for link in ("fast", "slow")
    )
    return checked(
        "E",
        "(extension, not in the paper) under a time budget the best tau2 is larger when "
        "gossip is cheap than when it is expensive",
        "none: the paper has no cost model (digest 3.4 proposes it)",
        shown,
        pd.Series(holds, dtype=object),
        f"{cpu} --set algorithm.gossip_steps={{1, 4, 16}} --set radio.d2d=<fast orthogonal: "
        "20 MHz 20 dB dedicated; slow shared: 1 MHz 10 dB tdma> --set run.time_budget_s="
        "<DFL(4, 4)'s 25 rounds>",
        seeds,
        "with a 25-round budget the fast radio's run is compute-bound, and accuracy at the "
        "budget differs by less than seed noise between tau2 = 4 and 16",
    )


SETUP = """
| | paper | ours (CPU scale) |
|---|---|---|
| data | MNIST (and CIFAR-10), non-iid (method not given) | digits, 2 label shards a node |
| model | Table II's CNN | MLP 64-32-10, charged as the MNIST CNN |
| nodes | 10, ring (zeta 0.87) and quasi-ring | 10, ring (weights 1/3); C: five graphs |
| local work | tau1 = 4 steps, lr 0.002, batch not given | tau1 = 4 steps of batch 16, lr 0.05 |
| length | epochs not given | A: {rounds} rounds; B, C: {steps} local steps for every run |

Scenarios: `scenarios/papers/dfl/paper.yaml` (the paper's setup, documented; needs MNIST) and
`scenarios/papers/dfl/cpu.yaml` (what runs here). Seeds: {seeds}. The claims are judged by the
final training loss of the averaged model over every training row (`global_train_loss`), as the
paper plots training loss; a run that did not complete has none. D runs C-DFL (CHOCO gossip,
gamma = 1) on 1 MHz, 10 dB D2D links for half the simulated time DFL(4, 4) takes for the rounds
of A. E is the gossip study's tau1 x tau2 grid at tau1 = 4.
"""
NOTES = [
    "The paper's '+74.6 %' of Fig. 10a is undefined in the text (the digest reads it as "
    "relative training-loss improvement); D2 checks only the direction.",
    "The digest's D3 (C-DFL worse than DFL per local step) did not hold in its pilot and is "
    "not a row here; D4 (consensus-only) is a unit check in the test suite.",
]
