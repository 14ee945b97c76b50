"""The issue-23 studies' smoke versions (analysis/central_study.py, analysis/delta_sgd_study.py)
run end to end, and their choices follow the rules: an algorithm not in flnet is listed, not
dropped; SGD's rate is chosen on validation accuracy, a diverged run counts as chance."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "analysis" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_central_study_smoke(tmp_path):
    study = load("central_study")
    out = study.main(["--smoke", "--out", str(tmp_path)])
    summary = out["summary"]
    from flnet.algorithms.configs import CONFIGS

    assert list(summary.algorithm) == list(study.ALGORITHMS)
    assert list(summary.available) == [a in CONFIGS for a in study.ALGORITHMS]
    ran = summary[summary.available]
    assert len(ran) >= 3  # fedavg, fedprox, scaffold at least
    per_run = out["per_run"]
    # a censored run keeps what it spent; a reached one has its costs and no censoring
    done = per_run[per_run.reached]
    assert (done.rounds_to_target <= 3).all() and done.censored_at_rounds.isna().all()
    open_ = per_run[~per_run.reached]
    assert open_.rounds_to_target.isna().all() and (open_.censored_at_rounds == 3).all()
    for name in ("summary.csv", "per_seed.csv", "fedavg/points.csv"):
        assert (tmp_path / name).exists()


def test_cost_median_reads_censored_seeds_as_infinite():
    study = load("central_study")
    run = pd.DataFrame(
        {
            "rounds_to_target": [10.0, np.nan, np.nan],
            "censored_at_rounds": [np.nan, 150.0, 150.0],
        }
    )
    assert study._cost(run, "rounds") == "> 150"  # two of three never reached it
    assert study._cost(run.iloc[:2].assign(rounds_to_target=[10.0, 30.0]), "rounds") == "20"


def test_delta_sgd_study_smoke(tmp_path):
    out = load("delta_sgd_study").main(["--smoke", "--out", str(tmp_path)])
    grid, summary = out["grid"], out["summary"]
    assert set(grid.task) == {"digits_mlp", "digits_raw_mlp"}
    assert sorted(grid[grid.optimizer == "sgd"].lr.unique()) == [0.01, 0.1, 3.0]
    for _, row in summary.iterrows():
        sgd = grid[(grid.task == row.task) & (grid.optimizer == "sgd")]
        assert row.sgd_val == sgd.validation_accuracy.max()  # chosen on validation
    eta0 = out["eta0"]
    assert set(eta0.task) == {"digits_mlp", "digits_raw_mlp"} and set(eta0.eta0) == {1.0}
    for name in ("grid.csv", "summary.csv", "runs.csv", "eta0.csv"):
        assert (tmp_path / name).exists()


def test_rate_chosen_on_validation_never_test_and_diverged_is_chance():
    study = load("delta_sgd_study")
    points = pd.DataFrame(
        {
            "point": ["a", "b", "c", "d"],
            "algorithm.local.optimizer.name": ["sgd", "sgd", "sgd", "delta_sgd"],
            "algorithm.local.lr": [0.01, 0.1, 1.0, np.nan],
            "seed": 0,
            "status": ["completed", "completed", "diverged", "completed"],
            "energy_j": [1.0, 1.0, 1.0, 2.0],
        }
    )
    records = pd.DataFrame(
        {
            "point": ["a", "b", "c", "d"],
            "round": 5,
            "validation_accuracy": [0.9, 0.8, 0.99, 0.7],  # c's last finite row looks best
            "test_accuracy": [0.5, 0.95, 0.99, 0.6],  # b is best on test: never chosen
        }
    )
    runs = study.outcomes(points, records, "t")
    assert (
        runs.loc[runs.point == "c", ["validation_accuracy", "test_accuracy"]].eq(0.1).all(axis=None)
    )
    summary = study.summary_table(study.grid_table(runs))
    row = summary.iloc[0]
    assert row.sgd_lr == 0.01 and row.sgd_test == 0.5
    assert row.delta_test == 0.6 and abs(row.gap_points - (-10.0)) < 1e-9 and row.claim_holds
    assert row.delta_energy_ratio == 2.0
