"""Delta-SGD (Kim et al.): the client step size that needs no tuning, against SGD whose rate is
tuned per task (on a validation split) or once and carried over. The runs and the per-task
verdicts are the Delta-SGD study's (analysis/delta_sgd_study.py: `study`), from
scenarios/papers/delta_sgd/cpu.yaml."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flnet.analysis import median_range
from flnet.papers.figures import curves
from flnet.papers.report import Claim, PaperReport, checked
from flnet.papers.sources import scenario_path, shown_path, study

TITLE = "Adaptive federated learning with auto-tuned clients (Delta-SGD)"
REFERENCE = "Kim et al. (digest: delta_sgd.md)"
WHY = {  # task -> why we think the claim fails there, where it does
    "digits_raw_mlp": "unnormalised features (0-16): Delta-SGD's first step eta0 = 0.2 is reset "
    "every round and is far too large for raw pixels; the paper's tasks are all normalised",
    "digits_raw_logistic": "unnormalised features: as digits_raw_mlp",
    "synthetic_logistic": "unnormalised features whose means differ between the users that "
    "generated them: the step-size estimate overshoots early in every round",
}
DEFAULT_WHY = (
    "at 200 rounds of 5 clients SGD at its tuned rate converges further than Delta-SGD's "
    "per-round reset allows"
)


def run(seeds: list[int], smoke: bool, work: Path) -> PaperReport:
    ds = study("delta_sgd_study")
    if smoke:
        tasks, lrs, sizes, eta0s = (
            ["digits_mlp", "digits_raw_mlp"],
            [0.01, 0.1, 3.0],
            (10, 3, 2),
            [],
        )
    else:
        tasks, lrs, sizes, eta0s = list(ds.TASKS), list(ds.LRS), (20, 5, 200), [0.02, 1.0]
    tables = ds.study(work, tasks, lrs, seeds, sizes, eta0s, workers=0)
    runs, summary = tables["runs"], tables["summary"]
    cpu = shown_path(scenario_path("delta_sgd", "cpu"))
    grid = "{" + ", ".join(f"{v:g}" for v in lrs) + "}"
    claims: list[Claim] = []
    for row in summary.itertuples(index=False):
        task = str(row.task)
        claims.append(
            Claim(
                id=f"C1 {task}",
                claim=f"Delta-SGD untuned is within {ds.COMPETITIVE_POINTS:g} points of SGD "
                f"tuned on this task ({task})",
                paper="Table 1: Delta-SGD within 0.5 points of the best in 14 of 15 columns; "
                "its worst gap 2.3 (CIFAR-10, alpha 0.01)",
                ours=f"SGD at {row.sgd_lr:g}: {row.sgd_test:.3f}, Delta-SGD {row.delta_test:.3f} "
                f"(means); gap {row.gap_range} points",
                holds=str(row.claim),
                seeds_detail=str(row.claim_seeds),
                scenario=f"{cpu} --set algorithm.local.optimizer.name={{sgd, delta_sgd}} "
                f"--set algorithm.local.lr={grid} (task {task}: its data and model, "
                "analysis/delta_sgd_study.py TASKS)",
                seeds=list(seeds),
                why="" if row.claim == "holds" else WHY.get(task, DEFAULT_WHY),
                figure="",
            )
        )
    claims.append(_transfer(runs, summary, seeds, cpu))
    figures = {}
    grid_table = tables["grid"]
    if len(grid_table):
        sgd = grid_table[grid_table.optimizer == "sgd"].assign(seed=0)  # one mean curve
        figures["lr_grid"] = (
            curves(sgd, "test_accuracy", "task", x="lr", ylabel="test accuracy", logx=True),
            "SGD's final test accuracy against its learning rate per task (mean over seeds; "
            "a diverged run counts as chance): the best rate moves across tasks, the tuning "
            "Delta-SGD saves.",
        )
    return PaperReport(
        paper="delta_sgd",
        title=TITLE,
        reference=REFERENCE,
        command="",
        setup=SETUP.format(
            clients=sizes[0],
            per_round=sizes[1],
            rounds=sizes[2],
            grid=grid,
            tasks=", ".join(tasks),
            seeds=", ".join(map(str, seeds)),
        ),
        claims=claims,
        tables={
            "summary": summary[
                ["task", "sgd_lr", "sgd_test", "delta_test", "gap_range", "claim_seeds"]
            ],
            **({"eta0": tables["eta0"]} if len(tables["eta0"]) else {}),
        },
        data={"runs": runs, "grid": grid_table},
        figures=figures,
        notes=NOTES,
        smoke=smoke,
    )


def _transfer(runs: pd.DataFrame, summary: pd.DataFrame, seeds: list[int], cpu: str) -> Claim:
    """Per seed: on every task but the first, Delta-SGD is within the margin of (or above) SGD
    at the rate chosen on the first task, the paper's tune-once-and-transfer protocol."""
    first = str(summary.task.iloc[0])
    lr = float(summary.sgd_lr.iloc[0])
    others = [str(t) for t in summary.task.iloc[1:]]
    holds: list[bool | None] = []
    gaps: list[float] = []
    for seed in seeds:
        verdicts: list[bool | None] = []
        for task in others:
            mine = runs[(runs.task == task) & (runs.seed == seed)]
            sgd = mine[(mine.optimizer == "sgd") & (mine.lr == lr)]
            delta = mine[mine.optimizer == "delta_sgd"]
            if sgd.empty or delta.empty or sgd.unfinished.any() or delta.unfinished.any():
                verdicts.append(None)
                continue
            gap = 100 * (float(sgd.test_accuracy.iloc[0]) - float(delta.test_accuracy.iloc[0]))
            gaps.append(gap)
            verdicts.append(gap <= 2.5)
        decided = [v for v in verdicts if v is not None]
        holds.append(None if len(decided) < len(verdicts) or not verdicts else all(decided))
    return checked(
        "C2",
        f"Delta-SGD stays within 2.5 points of SGD tuned once (on {first}) and carried over "
        "to every other task",
        "Table 1: SGD tuned on CIFAR-10 (alpha 0.1) and transferred loses up to 19.9 points "
        "(mean 5.6); Delta-SGD at most 2.3",
        f"SGD at {lr:g} minus Delta-SGD on {', '.join(others) or 'no other task'}: "
        f"{median_range(pd.Series(gaps, dtype=float), None, digits=3)} points (every task "
        "and seed)",
        pd.Series(holds, dtype=object),
        f"{cpu} --set algorithm.local.optimizer.name={{sgd, delta_sgd}} "
        f"--set algorithm.local.lr={lr:g} (every task)",
        seeds,
        "Delta-SGD falls behind the carried-over rate on the unnormalised tasks (C1's "
        "failures): there no rate is safe without tuning, Delta-SGD's included",
    )


SETUP = """
| | paper | ours (CPU scale) |
|---|---|---|
| tasks | MNIST, FMNIST (CNN), CIFAR-10/100 (ResNet-18/50), alpha in {{1, 0.1, 0.01}} | \
{tasks} |
| clients | 100, 10 % a round, one epoch of batch 64 | {clients}, {per_round} a round, 10 steps \
of batch 16 |
| rounds | 500-2000 | {rounds} |
| SGD's rate | tuned on CIFAR-10 / ResNet-18 / alpha 0.1, carried over | chosen per task on a \
10 % validation split, grid {grid}; and carried over from the first task (C2) |
| Delta-SGD | eta0 0.2, theta0 1, gamma 2, delta 0.1 | the same, untuned |

Scenarios: `scenarios/papers/delta_sgd/paper.yaml` (the paper's setup, documented; needs
CIFAR-10) and `scenarios/papers/delta_sgd/cpu.yaml` (what runs here: the first task; the others
swap its data and model, as `analysis/delta_sgd_study.py` lists them). Seeds: {seeds}.
Competitive means within 2.5 points of test accuracy (the paper's worst gap in Table 1 is 2.3),
decided per seed, paired by seed. A diverged run counts as chance accuracy (what that rate
does); test accuracy is never used to choose.
"""
NOTES = [
    "Each task's runs are a sweep under the output folder's delta_sgd/runs/: running the "
    "command again reuses the finished ones (its wall time is then not the runs').",
    "The paper's baselines SGDM, Adam, Adagrad and SPS are in flnet "
    "(algorithm.local.optimizer) but not in this reproduction: its claim is about tuning, "
    "and SGD is the baseline tuned per task here.",
    "The paper's code ran one seed (5821); its tables have no error bars.",
]
