"""The gossip study's smoke version runs end to end and its tables hold what they claim."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def study():
    spec = importlib.util.spec_from_file_location(
        "gossip_study", ROOT / "analysis" / "gossip_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_study_runs_and_writes_its_tables(tmp_path):
    tables = study().main(["--smoke", "--out", str(tmp_path)])
    assert (
        {p.stem for p in tmp_path.glob("*.csv")}
        == set(tables)
        == {
            "ole",
            "ole_summary",
            "ole_beta",
            "dfl_grid",
            "dfl_best",
            "golf",
            "golf_summary",
        }
    )
    ole = tables["ole"]
    assert set(ole.algorithm) == {"dfedavg", "oledfl_sgd", "dfedsam", "oledfl_sam"}
    assert (ole[ole.algorithm.str.startswith("oledfl")].beta == 0.4).all()  # ring: 0.8 * 1/2
    assert tables["ole_beta"].beta.tolist() == [0.4, 0.9]
    grid = tables["dfl_grid"]
    assert len(grid) == 2 * 2 * 2 * 2  # radios x algorithms x tau1 x tau2
    budgets = grid.groupby(["link", "access"]).budget_s.first()
    assert budgets["slow", "tdma"] > 10 * budgets["fast", "orthogonal"]  # the radio matters
    assert (grid.groupby(["link", "access", "algorithm", "tau1"]).rounds.diff().dropna() <= 0).all()
    # at equal bits FedAvg (8 models a round) has run 4x the rounds of the ring (32 a round)
    golf = tables["golf"].set_index("method")
    assert golf.loc["fedavg (4 of 16)", "round"] == 4 * golf.loc["dfedavg (ring of 16)", "round"]
    assert golf.loc["fedavg (4 of 16)", "bits"] == golf.loc["dfedavg (ring of 16)", "bits"]


def test_a_diverged_seed_shows_as_diverged_in_the_best_cell_table():
    """DFL's best cell by median, a diverged seed counting as the worst accuracy: (1, 1) over
    (4, 1); shown as median [min-max] of the seeds with a figure and the diverged one counted,
    never -inf (or NaN) in a range; a cell where every seed diverged is "none: 3 diverged"."""
    acc = {(1, 1): [0.80, 0.82, None], (4, 1): [0.70, 0.75, 0.72], (16, 1): [None] * 3}
    grid = pd.DataFrame(
        [
            {
                "link": "fast",
                "access": "tdma",
                "algorithm": "dfl",
                "budget_s": 2.5,
                "tau1": tau1,
                "tau2": tau2,
                "seed": seed,
                "status": "completed" if a is not None else "diverged",
                "test_accuracy": a if a is not None else np.nan,
            }
            for (tau1, tau2), accs in acc.items()
            for seed, a in enumerate(accs)
        ]
    )
    best = study().dfl_best(grid).iloc[0]
    assert (best.best_tau1, best.best_tau2) == (1, 1)
    assert best.accuracy == "0.81 [0.8-0.82] (1 diverged)"
    assert best.worst_cell == "(16,1) none: 3 diverged"
    assert best.ended == "5 completed, 4 diverged"
    assert best.best_per_seed == "(1,1) (1,1) (4,1)"
    assert not any("inf" in str(v) or "nan" in str(v) for v in best.to_numpy())


def test_points_that_raise_are_rows_and_the_study_goes_on(tmp_path, monkeypatch, capsys):
    """C-DFL at (tau1, tau2) = (4, 4) and FedAvg's GoLF run raise a FlnetError: they are rows
    with their status and error, counted in the summaries, never the best cell, listed at the
    end; every other point ran (GoLF's DFedAvg at its own bits)."""
    import flnet.runner
    from flnet.errors import FlnetError

    run = flnet.runner.run

    def maybe(sc, **kwargs):
        alg = sc.algorithm
        if alg.name == "fedavg" or (
            alg.name == "cdfl" and alg.local.steps == 4 and alg.gossip_steps == 4
        ):
            raise FlnetError(f"{alg.name} cannot run")
        return run(sc, **kwargs)

    monkeypatch.setattr(flnet.runner, "run", maybe)
    tables = study().main(["--smoke", "--out", str(tmp_path), "--only", "dfl", "--only", "golf"])
    grid = tables["dfl_grid"]
    bad = grid[grid.status == "error"]
    assert len(bad) == 2 and set(bad.algorithm) == {"cdfl"} and bad.test_accuracy.isna().all()
    assert (grid[grid.status != "error"].status == "completed").all()
    best = tables["dfl_best"].set_index("algorithm").loc["cdfl"]
    assert (best.ended == "3 completed, 1 error").all()
    assert not ((best.best_tau1 == 4) & (best.best_tau2 == 4)).any()  # no figure: never best
    golf = tables["golf"].set_index("method")
    assert golf.loc["fedavg (4 of 16)", "status"] == "error"
    assert golf.loc["dfedavg (ring of 16)", "test_accuracy"] > 0
    assert tables["golf_summary"].set_index("method").loc["fedavg (4 of 16)", "ended"] == "1 error"
    printed = capsys.readouterr().out
    assert "link fast, access orthogonal, algorithm cdfl, tau1 4, tau2 4, seed 0: error" in printed
    assert "golf: points that raised" in printed and "fedavg cannot run" in printed
