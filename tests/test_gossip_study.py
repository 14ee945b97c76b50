"""The gossip study's smoke version runs end to end and its tables hold what they claim."""

import importlib.util
from pathlib import Path

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
    assert not ((best.best_tau1 == 4) & (best.best_tau2 == 4)).any()  # no figure: never best
    golf = tables["golf"].set_index("method")
    assert golf.loc["fedavg (4 of 16)", "status"] == "error"
    assert golf.loc["dfedavg (ring of 16)", "test_accuracy"] > 0
    assert tables["golf_summary"].set_index("method").loc["fedavg (4 of 16)", "ended"] == "1 error"
    printed = capsys.readouterr().out
    assert "link fast, access orthogonal, algorithm cdfl, tau1 4, tau2 4, seed 0: error" in printed
    assert "golf: points that raised" in printed and "fedavg cannot run" in printed
