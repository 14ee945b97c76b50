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
    from flnet.algorithms.records import CONFIGS

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
    summary = study.summary_table(study.grid_table(runs), runs)
    row = summary.iloc[0]
    assert row.sgd_lr == 0.01 and row.sgd_test == 0.5
    assert row.delta_test == 0.6 and abs(row.gap_points - (-10.0)) < 1e-9 and row.claim_holds
    assert row.delta_energy_ratio == 2.0


def test_delta_sgd_claim_per_seed_and_failed_runs_are_not_diverged():
    """Two seeds: SGD at 0.1 (chosen) against Delta-SGD. Seed 0: gap 1 point (holds); seed 1:
    gap 5 points (does not). A failed SGD run at 1.0 has no accuracy, not chance: its rate is
    judged on the seed it finished. A killed Delta-SGD run leaves its seed undecided."""
    study = load("delta_sgd_study")

    def points(statuses):
        return pd.DataFrame(
            {
                "point": [f"{o}{s}" for o in "abc" for s in (0, 1)],
                "algorithm.local.optimizer.name": ["sgd"] * 4 + ["delta_sgd"] * 2,
                "algorithm.local.lr": [0.1, 0.1, 1.0, 1.0, np.nan, np.nan],
                "seed": [0, 1] * 3,
                "status": statuses,
                "energy_j": 1.0,
            }
        )

    records = pd.DataFrame(
        {
            "point": ["a0", "a1", "b0", "c0", "c1"],  # b1 failed: no records
            "round": 5,
            "validation_accuracy": [0.8, 0.8, 0.7, 0.5, 0.5],
            "test_accuracy": [0.8, 0.9, 0.7, 0.79, 0.85],
        }
    )
    ok = ["completed"] * 3 + ["failed"] + ["completed"] * 2
    runs = study.outcomes(points(ok), records, "t")
    failed = runs[runs.point == "b1"].iloc[0]
    assert np.isnan(failed.test_accuracy) and failed.unfinished and not failed.diverged
    grid = study.grid_table(runs)
    at_one = grid[grid.lr == 1.0].iloc[0]
    assert at_one.validation_accuracy == 0.7 and at_one.unfinished == 1 and at_one.diverged == 0
    row = study.summary_table(grid, runs).iloc[0]
    assert row.sgd_lr == 0.1
    # the mean gap (3 points) would fail the claim; per seed it holds in one of two
    assert row.claim == "holds in 1 of 2 seeds" and not row.claim_holds
    assert row.gap_range == "3 [1-5]"
    killed = study.outcomes(points(ok[:5] + ["killed"]), records, "t")
    row = study.summary_table(study.grid_table(killed), killed).iloc[0]
    assert row.claim_seeds == "holds in 1 of 2 seeds, 1 undecided"
    assert row.gap_range == "1 [1-1] (1 unfinished)"


def test_central_outcomes_keep_failed_points_and_refuse_diverged_costs():
    """Three fedavg seeds: 0 completes and reaches 0.8 at round 2; 1 passes 0.8 at round 1 and
    then diverges (refused: no cost to target, no final accuracy, not chance); 2 failed before
    any record (kept, not dropped by a join)."""
    study = load("central_study")
    points = pd.DataFrame(
        {
            "algorithm": "fedavg",
            "seed": [0, 1, 2],
            "point": ["p0", "p1", "p2"],
            "status": ["completed", "diverged", "failed"],
            "diverged_round": [None, 3, None],
            "sim_time_s": [20.0, 30.0, None],
        }
    )
    records = pd.DataFrame(
        {
            "algorithm": "fedavg",
            "point": ["p0", "p0", "p1", "p1"],
            "seed": [0, 0, 1, 1],
            "round": [1, 2, 1, 2],
            "sim_time_s": [10.0, 20.0, 10.0, 20.0],
            "energy_j": [1.0, 2.0, 1.0, 2.0],
            study.METRIC: [0.5, 0.85, 0.9, 0.95],
            "client_accuracy_mean": [0.6, 0.9, 0.9, 0.95],
            "test_accuracy": [0.6, 0.9, 0.9, 0.95],
        }
    )
    per_run, final = study.outcomes(points, records, 0.8)
    assert list(per_run.seed) == list(final.seed) == [0, 1, 2]
    assert list(per_run.reached) == [True, False, False]
    assert per_run.rounds_to_target.iloc[0] == 2 and per_run.rounds_to_target.iloc[1:].isna().all()
    assert final[study.METRIC].iloc[0] == 0.85 and final[study.METRIC].iloc[1:].isna().all()
    assert list(final.ended) == ["completed", "diverged at round 3", "failed"]
    row = study.summary(per_run, final, ["fedavg"]).set_index("algorithm").loc["fedavg"]
    assert row.worst_client_acc == "0.85 [0.85-0.85] (1 diverged, 1 failed)"
    assert row.reached == "1/3" and row.rounds_to_target == "> 2 (1 diverged, 1 failed)"
