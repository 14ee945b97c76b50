"""DRDM (Krouka et al.): which central algorithm serves the worst client best, and in how many
rounds. The runs are the central study's (analysis/central_study.py: `study`), from
scenarios/papers/drdm/cpu.yaml: FedAvg, FedProx, SCAFFOLD, FedDyn, MOON, DRFA and DRDM, each at
its defaults, nothing tuned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from flnet.analysis import OK, censored_median, median_range
from flnet.papers.figures import curves
from flnet.papers.report import Claim, PaperReport, checked
from flnet.papers.sources import scenario_path, shown_path, study

TITLE = "Distributionally robust FL with client drift minimization (DRDM)"
REFERENCE = "Krouka et al. (digest: drdm.md)"
TARGET = 0.8  # worst-client accuracy
WORST = "worst_last10"  # the worst-client accuracy over the last 10 evaluations (less noisy)


def run(seeds: list[int], smoke: bool, work: Path) -> PaperReport:
    central = study("central_study")
    clients, per_round, rounds, target = (10, 5, 3, 0.05) if smoke else (30, 20, 150, TARGET)
    tables = central.study(work, seeds, clients, per_round, rounds, target, workers=0)
    per_seed, records = tables["per_seed"], tables["records"]
    std = (
        records.sort_values("round")
        .groupby(["algorithm", "seed"])
        .client_accuracy_std.last()
        .rename("client_accuracy_std")
    )
    runs = per_seed.merge(std.reset_index(), on=["algorithm", "seed"], how="left")
    runs.loc[runs.status != OK, "client_accuracy_std"] = np.nan
    methods = list(dict.fromkeys(runs.algorithm))
    by = {m: runs[runs.algorithm == m].set_index("seed").reindex(seeds) for m in methods}
    drdm = by["drdm"]
    base = shown_path(scenario_path("drdm", "cpu"))
    every = f"{base} --set algorithm.name={{{', '.join(methods)}}}"
    if smoke:
        every += f" --set clients.count={clients} --set algorithm.clients_per_round={per_round}"

    def ok(*names: str) -> pd.Series:
        return pd.concat([by[n].status == OK for n in names], axis=1).all(axis=1)

    def shown(col: str, names: list[str]) -> str:
        return "; ".join(f"{n} {median_range(by[n][col], by[n].status, digits=3)}" for n in names)

    others = [m for m in methods if m != "drdm"]
    claims: list[Claim] = [
        checked(
            "C1",
            "DRDM's worst-client accuracy beats FedAvg's",
            "Table 2 (KMNIST, alpha 0.1, sigma 0.3): worst client 89.87 vs 64.07 (+25.8)",
            shown(WORST, ["drdm", "fedavg"]),
            (drdm[WORST] > by["fedavg"][WORST]).where(ok("drdm", "fedavg"), None),
            f"{base} --set algorithm.name={{drdm, fedavg}}",
            seeds,
            "FedAvg's worst client swings with the seed's partition (see its range): in the "
            "seed where it wins, every method's worst client ends high; the digest's pilot "
            "saw DRDM ahead of FedAvg in 4 of 5 seeds",
            figure="worst_client",
        ),
        checked(
            "C1b",
            "DRDM's worst-client accuracy is the best of all methods",
            "Table 2: 89.87 vs SCAFF-PD 75.23, SCAFFOLD 67.62, DRFA 64.46, FedAvg 64.07",
            shown(WORST, methods),
            (drdm[WORST] >= pd.concat([by[m][WORST] for m in others], axis=1).max(axis=1)).where(
                ok(*methods), None
            ),
            every,
            seeds,
            "SCAFFOLD, untuned like every method here, serves the worst client best; the "
            "paper's SCAFFOLD trails DRDM by 22 points, a gap the digest (6.1) suspects comes "
            "from untuned baselines; DRDM runs its defaults (gamma, mu) here, untuned too",
            figure="worst_client",
        ),
        checked(
            "C1c",
            "DRDM's average client accuracy is the best",
            "Table 2: 95.42 vs SCAFFOLD 86.03, SCAFF-PD 84.63",
            shown("client_accuracy_mean", methods),
            (
                drdm.client_accuracy_mean
                >= pd.concat([by[m].client_accuracy_mean for m in others], axis=1).max(axis=1)
            ).where(ok(*methods), None),
            every,
            seeds,
            "every method's average lies within about 2 points (0.94-0.97) on digits, where "
            "the seed decides the order; SCAFFOLD's is highest",
        ),
        checked(
            "C1d",
            "DRDM's spread of accuracy across clients (std) is the lowest",
            "Table 2: std 1.92 vs SCAFF-PD 3.88, SCAFFOLD 5.71",
            shown("client_accuracy_std", methods),
            (
                drdm.client_accuracy_std
                <= pd.concat([by[m].client_accuracy_std for m in others], axis=1).min(axis=1)
            ).where(ok(*methods), None),
            every,
            seeds,
            "as C1b: SCAFFOLD (and DRFA) spread the clients' accuracies less; the paper's own "
            "appendix tables have such exceptions (digest 6.1)",
        ),
        _rounds(by, seeds, target, f"{base} --set algorithm.name={{drdm, drfa, fedavg}}"),
        Claim(
            id="C3",
            claim="the energy-optimal tau moves down as the uplink SNR and bandwidth grow",
            paper="Fig. 4 (80 % worst-client target): large tau at low SNR and 1 MHz, small at "
            "20 dB (text only)",
            ours="not run by this command: a 432-point sweep (SNR x bandwidth x tau x 3 seeds)",
            holds="not run here",
            seeds_detail="not run here",
            scenario="scenarios/sweeps/energy_study.yaml",
            seeds=list(seeds),
            why="not run by this command (432 points); the Studies page gives the energy "
            "study's result",
            command="flnet sweep scenarios/sweeps/energy_study.yaml --out runs/energy_study; "
            "python analysis/energy_study.py runs/energy_study",
        ),
    ]
    figures = {}
    if len(records):
        figures["worst_client"] = (
            curves(
                records,
                "client_accuracy_worst",
                "algorithm",
                ylabel="worst-client accuracy",
            ),
            "Worst client's accuracy (on its own local test rows) against rounds: median over "
            "seeds, band min-max.",
        )
    return PaperReport(
        paper="drdm",
        title=TITLE,
        reference=REFERENCE,
        command="",
        setup=SETUP.format(
            clients=clients,
            per_round=per_round,
            rounds=rounds,
            target=target,
            seeds=", ".join(map(str, seeds)),
        ),
        claims=claims,
        tables={"summary": tables["summary"].drop(columns=["worst_median"], errors="ignore")},
        data={"per_seed": runs},
        figures=figures,
        notes=NOTES,
        smoke=smoke,
    )


def _rounds(by: dict[str, pd.DataFrame], seeds: list[int], target: float, sets: str) -> Claim:
    """Per seed: DRDM reaches the worst-client target in fewer rounds than DRFA and FedAvg (a
    run that never reaches it counts as infinitely many; none reaching it: undecided)."""
    names = [n for n in ("drdm", "drfa", "fedavg") if n in by]
    rounds = {n: by[n].rounds_to_target.astype(float).fillna(np.inf) for n in names}
    completed = pd.concat([by[n].status == OK for n in names], axis=1).all(axis=1)
    reached = np.isfinite(rounds["drdm"])
    others = pd.concat([rounds[n] for n in names if n != "drdm"], axis=1).min(axis=1)
    holds = (rounds["drdm"] < others).where(completed & (reached | np.isfinite(others)), None)
    shown = "; ".join(
        f"{n} {censored_median(by[n].rounds_to_target, by[n].censored_at_rounds, by[n].status)}"
        for n in names
    )
    return checked(
        "C2",
        f"DRDM reaches a worst-client accuracy of {target:g} in fewer rounds than DRFA and FedAvg",
        "abstract and Fig. 1: 'fewer communication rounds'; Fig. 3: 85 % in 41 rounds at tau = "
        "10 (no baseline figures)",
        f"rounds to {target:g} (median over seeds; '> x': censored): {shown}",
        holds,
        sets,
        seeds,
        "the worst client's accuracy is noisy round to round; the first round it passes the "
        "target is decided by that noise as much as by the method",
        figure="worst_client",
    )


SETUP = """
| | paper | ours (CPU scale) |
|---|---|---|
| data | KMNIST, Zipf sigma 0.3 sizes, Dirichlet alpha 0.1 classes | digits, the same partition |
| model | CNN (conv16-conv32-FC500) | MLP 64, charged as the CNN |
| clients | N = 30, m = 20 a round | N = {clients}, m = {per_round} |
| local work | tau = 10 steps of batch 32; lr, gamma, mu not given | tau = 10 steps of batch 32, \
lr 0.1, every method at its defaults |
| rounds | not given | {rounds}, evaluated every round |
| baselines | DRFA, SCAFFOLD, SCAFF-PD, FedAvg | FedAvg, FedProx, SCAFFOLD, FedDyn, MOON, DRFA |

Scenarios: `scenarios/papers/drdm/paper.yaml` (the paper's setup, documented; needs KMNIST) and
`scenarios/papers/drdm/cpu.yaml` (what runs here). Seeds: {seeds}. Each client has a local test
split in its own label mix (as many rows as its training rows); the worst client's accuracy is
the minimum over clients, read as the mean over the last 10 evaluations (`worst_last10`, the
final round alone is noisy). Target for rounds-to-target: worst client at {target:g}. Nothing
is tuned and nothing is chosen on test accuracy.
"""
NOTES = [
    "Each algorithm's runs are a sweep under the output folder's drdm/runs/: running the "
    "command again reuses the finished ones (its wall time is then not the runs').",
    "SCAFF-PD is not in flnet; FedProx, FedDyn and MOON are extra baselines the paper does not "
    "run (FedDyn is the drift half of DRDM).",
    "The paper averages 10 Monte Carlo runs and gives no per-run spread.",
]
