"""The gossip study: serverless methods against each other and against FedAvg, in seconds and
joules as well as rounds.

1. **Ole** (OledFL digest, claims C1-C3): OledFL-SGD and OledFL-SAM against their bases DFedAvg
   and DFedSAM, on a ring (Metropolis-Hastings, lambda_min = -1/3) and an Erdos-Renyi graph,
   and the paper's time-varying topology (each node hears 3 fresh random others every round,
   weights 1/4), MNIST-1D with Dirichlet(0.3) labels over 16 nodes. beta is 0.8 of the
   largest stable beta of a static W ((1 + lambda_min) / (1 - lambda_min), capped at 0.9):
   0.4 on the ring; 0.99 on the time-varying graph, as the paper and the digest's pilot. Final
   accuracy of the averaged model, per-node accuracy, consensus distance, and rounds, seconds
   and joules to a target. Then OledFL-SGD on the ring across beta, stable or not.
2. **tau1 x tau2** (DFL digest, Section 3.4): DFL and C-DFL (rand-k, delta = 0.67, gamma = 1)
   on a 10-node ring, digits with shards, charged as the paper's MNIST CNN (`costs_as:
   cnn_dfl_mnist`), for every (tau1, tau2) of a grid, under four radios: fast or slow D2D links
   times orthogonal links (`sharing: dedicated`) or one medium (`tdma`). Each radio gets one
   simulated-time budget, what DFL(4, 4) spends in 25 rounds there; a run's figure is the test
   accuracy of the averaged model when the budget runs out. The best (tau1, tau2) per radio
   and seed, then the median over seeds.
3. **GoLF** (gossip against FedAvg at equal bits): DFedAvg on a ring of 16 against FedAvg with
   4 clients a round, MNIST-1D; accuracy at the bits the cheaper run spent in all, with the
   seconds and joules each took to spend them, in all and on its busiest device.

    python analysis/gossip_study.py             # a few minutes: 3 seeds, one process
    python analysis/gossip_study.py --smoke     # seconds: what CI runs

Tables are printed and written under --out (default runs/gossip_study): ole.csv (one row per
run), ole_summary.csv, ole_beta.csv, dfl_grid.csv, dfl_best.csv, golf.csv, golf_summary.csv.
A run that diverged has no final accuracy (NaN, its `ended` column says "diverged at round
r"), never reaches a target and is never the best cell; summaries are medians [min-max] over
seeds with the runs that have no figure counted by why (`flnet.analysis.median_range`), and
claims are decided seed by seed. A run that raises (a bad point, a FlnetError) is a row with its
status and error (`flnet.analysis.run_point`): no figures, counted by that status, never the
best cell, listed at the end; the study goes on.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flnet.algorithms.oledfl import OleWarning
from flnet.analysis import (
    OK,
    Point,
    accuracy_at,
    column,
    device_costs,
    final_value,
    median_range,
    per_seed,
    raised_points,
    raised_row,
    run_ended,
    run_point,
    statuses,
    to_target,
)
from flnet.errors import ScenarioError, TopologyWarning
from flnet.papers.sources import scenario_base, scenario_data
from flnet.runner import build
from flnet.scenario import load_scenario, merge
from flnet.sim import topology

# the CPU-scale OledFL setup (scenarios/papers/oledfl/cpu.yaml); each point names its method
# and topology
OLE_BASE: dict[str, Any] = scenario_data("oledfl", "cpu")
del OLE_BASE["algorithm"]["name"], OLE_BASE["algorithm"]["topology"]
OLE_TOPOLOGIES = {
    "ring": {"kind": "ring"},
    "erdos_renyi": {"kind": "erdos_renyi", "p": 0.3},
    # the paper's kind of topology, fresh neighbours a round, directed as DisPFL's code (the
    # paper's text says bidirectional: directed: false, weights: metropolis_hastings)
    "random_k": {"kind": "random_k", "k": 3},
}
OLE_FIXED_BETA = {"random_k": 0.99}  # the paper's (and the digest pilot's) beta there
OLE_PAIRS = [("dfedavg", "oledfl_sgd"), ("dfedsam", "oledfl_sam")]
SAM_RHO = 0.05  # the OledFL digest's radius for MLPs (the paper's 0.1 is ResNet-18's)
OLE_BETAS = (0.0, 0.2, 0.4, 0.6, 0.9)
OLE_TARGET = 0.4  # MNIST-1D: a level every method reaches within the rounds
# an unstable beta ends at chance with the nodes ~1e8 apart, which is no result: such a run
# counts as diverged (stable runs stay within O(10))
OLE_DIVERGENCE = {"consensus_above": 1e4}

# the CPU-scale DFL setup (scenarios/papers/dfl/cpu.yaml) run to a time budget: each point
# names its method, its tau1 and tau2
DFL_BASE: dict[str, Any] = merge(
    scenario_base(
        "dfl", "cpu", "name", "algorithm.name", "algorithm.gossip_steps", "run.global_train_loss"
    ),
    {"run": {"rounds": 100_000, "eval_every": 100_000}},
)
LINKS = {  # D2D band and SNR: about 133 and 3.5 Mbit/s
    "fast": {"bandwidth_hz": 20e6, "snr_db": 20.0},
    "slow": {"bandwidth_hz": 1e6, "snr_db": 10.0},
}
ACCESS = {"orthogonal": "dedicated", "tdma": "tdma"}
TAU1S, TAU2S = (1, 4, 16), (1, 4, 16)
CDFL = {"compression": {"kind": "rand_k", "fraction": 0.67}, "consensus_step": 1.0}
BUDGET_ROUNDS = 25  # the budget: what DFL(4, 4) spends in this many rounds

GOLF_ROUNDS = 60


def scenario(base: dict, name: str, **sections: Any) -> dict:
    """A point's scenario, as data: validated when it runs (`flnet.analysis.run_point`)."""
    return merge(merge(base, {"name": name}), sections)


def stable_beta(data: dict) -> float:
    """0.8 of the largest beta whose (1 + beta) W - beta I contracts, at most 0.9."""
    sc = load_scenario(data=data)
    world, _ = build(sc)
    from flnet.rng import Stream

    w = topology.from_config(
        sc.algorithm.topology, sc.clients.count, world.generator(Stream.TOPOLOGY)
    )
    lam = float(np.linalg.eigvals(w.dense()).real.min())
    return round(min(0.9, 0.8 * (1 + lam) / (1 - lam)), 3)


# ---------------------------------------------------------------------------- 1. Ole


def ole(
    seeds: list[int],
    rounds: int,
    topologies: list[str],
    run: dict | None = None,
    curves: list[pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """One row per run; `run` adds to each point's run section, `curves` (when given) gets
    each run's records with its topology and algorithm."""
    run = {"rounds": rounds, **(run or {})}
    rows = []
    for topo_name in topologies:
        for seed in seeds:
            for base_name, ole_name in OLE_PAIRS:
                for name in (base_name, ole_name):
                    alg: dict[str, Any] = {"name": name, "topology": OLE_TOPOLOGIES[topo_name]}
                    if "sam" in name:
                        alg["local"] = {"sam_rho": SAM_RHO}
                    sc = scenario(OLE_BASE, name, seed=seed, algorithm=alg, run=run)
                    point = None
                    if name.startswith("oledfl"):
                        try:
                            alg["beta"] = OLE_FIXED_BETA.get(topo_name) or stable_beta(sc)
                        except ScenarioError as e:  # a bad point: no W to take beta from
                            point = Point(None, None, "invalid", str(e))
                        sc = scenario(OLE_BASE, name, seed=seed, algorithm=alg, run=run)
                    with warnings.catch_warnings():  # random_k: not symmetric (reported)
                        warnings.simplefilter("ignore", TopologyWarning)
                        point = point or run_point(sc)
                    keys = {"topology": topo_name, "seed": seed, "algorithm": name}
                    if point.records is None:
                        rows.append(raised_row(point, **keys, beta=alg.get("beta", 0.0)))
                        continue
                    rec = point.records
                    if curves is not None:
                        curves.append(rec.assign(topology=topo_name, algorithm=name))
                    last = rec.iloc[-1]
                    hit = to_target(rec, OLE_TARGET).iloc[0]
                    rows.append(
                        {
                            **keys,
                            "beta": alg.get("beta", 0.0),
                            "status": rec.status.iloc[0],
                            "ended": run_ended(rec),
                            "test_accuracy": final_value(rec),
                            "node_accuracy_mean": final_value(rec, "node_accuracy_mean"),
                            "node_accuracy_worst": final_value(rec, "node_accuracy_worst"),
                            "consensus_distance": final_value(rec, "consensus_distance"),
                            "rounds_to_target": hit.rounds_to_target,
                            "seconds_to_target": hit.seconds_to_target,
                            "joules_to_target": hit.joules_to_target,
                            "sim_time_s": last.sim_time_s,
                            "energy_j": last.energy_j,
                            "bits_d2d": last.bits_d2d,
                        }
                    )
    return pd.DataFrame(rows)


def ole_beta(
    seeds: list[int],
    rounds: int,
    betas: tuple,
    curves: list[pd.DataFrame] | None = None,
    per_run: list[dict] | None = None,
) -> pd.DataFrame:
    """OledFL-SGD on the ring (lambda_min = -1/3: stable for beta < 1/2) across beta;
    `curves` (when given) gets each run's records with its beta, `per_run` each run's row."""
    rows = []
    for beta in betas:
        for seed in seeds:
            alg = {"name": "oledfl_sgd", "topology": OLE_TOPOLOGIES["ring"], "beta": beta}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OleWarning)  # the point of the sweep
                point = run_point(
                    scenario(
                        OLE_BASE,
                        "ole_beta",
                        seed=seed,
                        algorithm=alg,
                        run={"rounds": rounds, "divergence": OLE_DIVERGENCE},
                    )
                )
            if point.records is None:
                rows.append(raised_row(point, beta=beta, seed=seed))
                continue
            rec = point.records
            if curves is not None:
                curves.append(rec.assign(beta=beta))
            rows.append(
                {
                    "beta": beta,
                    "seed": seed,
                    "status": rec.status.iloc[0],
                    "diverged_round": rec.diverged_round.iloc[0],
                    "diverged_by": rec.diverged_by.iloc[0],
                    "test_accuracy": final_value(rec),
                    "consensus_distance": final_value(rec, "consensus_distance"),
                    # the last finite figure before it diverged: how far it had run away
                    "last_consensus_distance": rec.consensus_distance.iloc[-1],
                }
            )
    df = pd.DataFrame(rows)
    if per_run is not None:
        per_run.extend(rows)
    out = []
    for beta, g in df.groupby("beta"):
        out.append(
            {
                "beta": beta,
                "seeds": len(g),
                "ended": statuses(g.status, column(g, "diverged_round"), column(g, "diverged_by")),
                "test_accuracy": median_range(column(g, "test_accuracy"), g.status, digits=3),
                "consensus_distance": median_range(
                    column(g, "consensus_distance"), g.status, digits=3
                ),
                "last_finite_consensus": column(g, "last_consensus_distance").median(),
                "errors": "; ".join(f"seed {r.seed}: {r.error}" for r in raised(g).itertuples()),
            }
        )
    return pd.DataFrame(out)


def ole_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per topology and pair: median [min-max] over seeds, and the claims decided seed by seed
    (paired by seed; a seed where either run diverged is undecided): C1 the Ole method's
    accuracy is higher, C3 its consensus distance lower."""
    rows = []
    for topo_name, per_topo in df.groupby("topology", sort=False):
        for base_name, ole_name in OLE_PAIRS:
            a = per_topo[per_topo.algorithm == base_name].set_index("seed")
            b = per_topo[per_topo.algorithm == ole_name].set_index("seed")
            both = (a.status == OK) & (b.status.reindex(a.index) == OK)
            gain = 100 * (column(b, "test_accuracy") - column(a, "test_accuracy"))
            c1 = (gain > 0).where(both, None)
            c3 = (column(b, "consensus_distance") < column(a, "consensus_distance")).where(
                both, None
            )
            bad = pd.Series("undecided", index=gain.index).where(~both, OK)

            def shown(col: str, runs: pd.DataFrame, digits: int = 3, never: str = "never") -> str:
                return median_range(column(runs, col), runs.status, never=never, digits=digits)

            rows.append(
                {
                    "topology": topo_name,
                    "pair": f"{ole_name} vs {base_name}",
                    "beta": b.beta.iloc[0],
                    "ended_base": statuses(a.status),
                    "ended_ole": statuses(b.status),
                    "acc_base": shown("test_accuracy", a),
                    "acc_ole": shown("test_accuracy", b),
                    "gain_points": median_range(gain, bad, digits=2),
                    "C1_higher_accuracy": per_seed(c1)[1],
                    "worst_node_base": shown("node_accuracy_worst", a),
                    "worst_node_ole": shown("node_accuracy_worst", b),
                    "consensus_base": shown("consensus_distance", a),
                    "consensus_ole": shown("consensus_distance", b),
                    "C3_lower_consensus": per_seed(c3)[1],
                    "rounds_to_target_base": shown("rounds_to_target", a),
                    "rounds_to_target_ole": shown("rounds_to_target", b),
                    "joules_to_target_base": shown("joules_to_target", a),
                    "joules_to_target_ole": shown("joules_to_target", b),
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- 2. tau1 x tau2


def radio(link: str, access: str) -> dict:
    return {"d2d": {**LINKS[link], "sharing": ACCESS[access]}}


def budget_s(link: str, access: str, rounds: int) -> float | Point:
    """What DFL(tau1 = 4, tau2 = 4) spends in `rounds` rounds on this radio (seed 0); the run
    that raised, when it did (the regime then has no budget)."""
    sc = scenario(
        DFL_BASE,
        "budget",
        algorithm={"name": "dfl", "gossip_steps": 4},
        radio=radio(link, access),
        run={"rounds": rounds},
    )
    point = run_point(sc)
    if point.records is None:
        return point._replace(error=f"its budget run raised: {point.error}")
    return float(point.records.sim_time_s.iloc[-1])


def dfl_grid(
    seeds: list[int], regimes: list[tuple[str, str]], tau1s: tuple, tau2s: tuple, rounds: int
) -> pd.DataFrame:
    rows = []
    for link, access in regimes:
        budget = budget_s(link, access, rounds)
        for name in ("dfl", "cdfl"):
            for tau1 in tau1s:
                for tau2 in tau2s:
                    for seed in seeds:
                        alg = {"name": name, "gossip_steps": tau2, "local": {"steps": tau1}}
                        if name == "cdfl":
                            alg.update(CDFL)
                        keys = {"link": link, "access": access}
                        keys |= {"algorithm": name, "tau1": tau1, "tau2": tau2, "seed": seed}
                        if isinstance(budget, Point):
                            rows.append(raised_row(budget, **keys))
                            continue
                        point = run_point(
                            scenario(
                                DFL_BASE,
                                name,
                                seed=seed,
                                algorithm=alg,
                                radio=radio(link, access),
                                run={"time_budget_s": budget},
                            )
                        )
                        if point.records is None:
                            rows.append(raised_row(point, **keys, budget_s=budget))
                            continue
                        rec = point.records
                        last = rec.iloc[-1]
                        rows.append(
                            {
                                **keys,
                                "budget_s": budget,
                                "rounds": last["round"],
                                "status": rec.status.iloc[0],
                                "ended": run_ended(rec),
                                "test_accuracy": final_value(rec),
                                "consensus_distance": final_value(rec, "consensus_distance"),
                                "energy_j": last.energy_j,
                                "bits_d2d": last.bits_d2d,
                            }
                        )
    return pd.DataFrame(rows)


def dfl_best(grid: pd.DataFrame) -> pd.DataFrame:
    """Per radio and algorithm: the (tau1, tau2) with the best accuracy at the budget in each
    seed, and the cell with the best median accuracy over seeds. To choose, a run without an
    accuracy (diverged, or raised) counts as the worst, so it is never the best; to show, a
    cell is median [min-max] over the seeds that have a figure, the others counted by how they
    ended ("(1 diverged)", `flnet.analysis.median_range`), never -inf or NaN in a range."""
    rows = []
    for (link, access, name), g in grid.groupby(["link", "access", "algorithm"], sort=False):
        g = g.assign(rank=column(g, "test_accuracy").fillna(-np.inf))
        best_of_seed = g.loc[g.groupby("seed")["rank"].idxmax()]
        medians = g.groupby(["tau1", "tau2"])["rank"].median()
        best, worst = medians.idxmax(), medians.idxmin()

        def shown(cell: tuple, g: pd.DataFrame = g) -> str:
            runs = g[(g.tau1 == cell[0]) & (g.tau2 == cell[1])]
            return median_range(column(runs, "test_accuracy"), runs.status, digits=3)

        rows.append(
            {
                "link": link,
                "access": access,
                "algorithm": name,
                "budget_s": column(g, "budget_s").max(),
                "ended": statuses(g.status),
                "best_tau1": best[0],
                "best_tau2": best[1],
                "accuracy": shown(best),
                "best_per_seed": " ".join(
                    f"({a},{b})" for a, b in zip(best_of_seed.tau1, best_of_seed.tau2)
                ),
                "worst_cell": f"({worst[0]},{worst[1]}) {shown(worst)}",
            }
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- 3. GoLF


def golf(seeds: list[int], rounds: int) -> pd.DataFrame:
    """DFedAvg runs `rounds` rounds; FedAvg, whose round sends 8 models to the ring's 32, runs
    4x as many, so both end near the same bits; compared at the last evaluation within the
    bits the cheaper of the two spent."""
    rows = []
    runs = {
        "dfedavg (ring of 16)": ({"name": "dfedavg", "topology": {"kind": "ring"}}, rounds),
        "fedavg (4 of 16)": ({"name": "fedavg", "cohort": {"clients_per_round": 4}}, 4 * rounds),
    }
    for seed in seeds:
        recs = {}
        for label, (alg, n) in runs.items():
            sc = scenario(
                OLE_BASE, alg["name"], seed=seed, algorithm=alg, run={"rounds": n, "eval_every": 1}
            )
            point = run_point(sc)
            if point.records is None or point.ledger is None:
                rows.append(raised_row(point, seed=seed, method=label))
                continue
            rec = point.records
            rec["bits"] = rec.bits_up + rec.bits_down + rec.bits_d2d
            recs[label] = (rec, point.ledger)
        # the bits the cheaper run spent (of those that did not raise: alone, its own end)
        equal_bits = min((r.bits.iloc[-1] for r, _ in recs.values()), default=0.0)
        for label, (rec, ledger) in recs.items():
            at = rec[rec.bits <= equal_bits].iloc[-1]  # the last evaluation within the bits
            per_device = device_costs(ledger[ledger["round"] <= at["round"]])
            rows.append(
                {
                    "seed": seed,
                    "method": label,
                    "bits": at.bits,
                    "round": at["round"],
                    "status": rec.status.iloc[0],
                    "test_accuracy": accuracy_at(rec, round_=at["round"]),
                    "seconds": at.sim_time_s,
                    "joules": at.energy_j,
                    "joules_radio": at.energy_uplink_j + at.energy_downlink_j + at.energy_d2d_j,
                    "joules_busiest_device": per_device.energy_j.max(),
                    "bits_sent_busiest_device": per_device.bits_sent.max(),
                }
            )
    return pd.DataFrame(rows)


GOLF_SHOWN = (
    "bits",
    "round",
    "test_accuracy",
    "seconds",
    "joules",
    "joules_radio",
    "joules_busiest_device",
    "bits_sent_busiest_device",
)


def golf_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per method: median [min-max] over seeds of each figure."""
    rows = []
    for method, g in df.groupby("method", sort=False):
        row = {"method": method, "ended": statuses(g.status)}
        row.update({c: median_range(column(g, c), g.status, digits=3) for c in GOLF_SHOWN})
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------- main


def raised(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that raised (`flnet.analysis.raised_row`)."""
    return runs[column(runs, "error").notna()]


def show(title: str, df: pd.DataFrame) -> None:
    print(f"\n## {title}\n")
    print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def main(argv: list[str] | None = None) -> dict[str, pd.DataFrame]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/gossip_study")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--smoke", action="store_true", help="one seed, a few rounds, a few cells")
    p.add_argument("--only", choices=("ole", "ole_beta", "dfl", "golf"), action="append")
    p.add_argument("--topologies", help="Ole topologies (default: all of OLE_TOPOLOGIES)")
    args = p.parse_args(argv)
    parts = args.only or ["ole", "ole_beta", "dfl", "golf"]
    seeds = [0] if args.smoke else [int(s) for s in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tables: dict[str, pd.DataFrame] = {}
    if "ole" in parts:
        rounds = 3 if args.smoke else OLE_BASE["run"]["rounds"]
        topologies = (
            ["ring"]
            if args.smoke
            else args.topologies.split(",")
            if args.topologies
            else list(OLE_TOPOLOGIES)
        )
        tables["ole"] = ole(seeds, rounds, topologies)
        tables["ole_summary"] = ole_summary(tables["ole"])
        show("Ole: OledFL against its base (accuracy of the averaged model)", tables["ole_summary"])
    if "ole_beta" in parts:
        rounds = 3 if args.smoke else OLE_BASE["run"]["rounds"]
        betas = (0.4, 0.9) if args.smoke else OLE_BETAS
        tables["ole_beta"] = ole_beta(seeds, rounds, betas)
        show("OledFL-SGD on the ring (stable for beta < 1/2) across beta", tables["ole_beta"])
    if "dfl" in parts:
        regimes = (
            [("fast", "orthogonal"), ("slow", "tdma")]
            if args.smoke
            else [(link, access) for link in LINKS for access in ACCESS]
        )
        tau1s, tau2s = ((1, 4), (1, 4)) if args.smoke else (TAU1S, TAU2S)
        rounds = 2 if args.smoke else BUDGET_ROUNDS
        tables["dfl_grid"] = dfl_grid(seeds, regimes, tau1s, tau2s, rounds)
        tables["dfl_best"] = dfl_best(tables["dfl_grid"])
        show("DFL and C-DFL: the best (tau1, tau2) at a fixed simulated time", tables["dfl_best"])
    if "golf" in parts:
        tables["golf"] = golf(seeds, 2 if args.smoke else GOLF_ROUNDS)
        tables["golf_summary"] = golf_summary(tables["golf"])
        show("Gossip against FedAvg at equal bits on the wire", tables["golf_summary"])
    for name, df in tables.items():
        df.to_csv(out / f"{name}.csv", index=False)
    keys = ["topology", "link", "access", "algorithm", "method", "beta", "tau1", "tau2", "seed"]
    for name in ("ole", "dfl_grid", "golf"):
        failed = raised_points(tables[name], keys) if name in tables else ""
        if failed:
            print(f"\n{name}: {failed}")
    print(f"\ntables in {out}/")
    return tables


if __name__ == "__main__":
    main()
