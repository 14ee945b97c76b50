"""Issue 43's study, its smoke version end to end: joules and seconds to target under the
resource policies, with cells and interference, and gossip on a D2D radio."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def study():
    spec = importlib.util.spec_from_file_location(
        "radio_study", ROOT / "analysis" / "radio_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_study_runs_and_the_radio_claims_hold(tmp_path, capsys):
    module = study()
    result = module.main([str(tmp_path), "--smoke"])
    per_run = result["per_run"]
    assert (per_run.status == "completed").all()
    expected = {(pt["part"], pt["load"], pt["policy"]) for pt in module.points(True, 1)}
    table = result["summary"]
    assert set(zip(table.part, table.load, table.policy)) == expected
    assert len(table) == len(expected) == len(per_run)
    run = per_run.set_index(["part", "policy", "load"])
    pol = run.xs("policies").xs("m=10", level="load")
    base = pol.loc[module.BASELINE]
    # DVFS: the compute joules fall (f below f_max, E = kappa c f^2), and with power control
    # so do the round's joules; the rounds stretch towards the deadline the policies plan for
    for policy in ("min_energy", "just_in_time"):
        assert pol.loc[policy].compute_j_per_round < 0.2 * base.compute_j_per_round
        assert base.seconds_per_round < pol.loc[policy].seconds_per_round
        assert pol.loc[policy].seconds_per_round <= module.DEADLINE_S * 1.001
    assert pol.loc["min_energy"].joules_per_round < base.joules_per_round
    # the best channels upload faster than a uniform draw of the same load
    assert pol.loc["best_channel"].seconds_per_round < base.seconds_per_round
    # co-channel interference only slows the uplinks down
    cells = run.xs("cells")
    for scheduler in ("uniform", "best_channel"):
        with_i = cells.loc[(scheduler, "4 stations, reuse 1, m=10")]
        without = cells.loc[(scheduler, "4 stations, reuse 1, no interference, m=10")]
        assert with_i.seconds_per_round > without.seconds_per_round
    # D2D: one band shared by interfering neighbours is slower than orthogonal links
    gossip = run.xs("gossip").droplevel("load")
    assert gossip.loc["spatial_reuse"].seconds_per_round > gossip.loc["dedicated"].seconds_per_round
    # each part's baseline is its own reference
    reached = per_run[per_run.reached & per_run.policy.isin([module.BASELINE, "uniform"])]
    assert (reached.joules_vs_baseline == 1).all()
    printed = capsys.readouterr().out
    assert "joules_to_target" in printed and "spatial_reuse" in printed
    for name in ("per_run.csv", "summary.csv"):
        assert (tmp_path / name).exists()


def test_points_that_raise_are_rows_and_the_study_goes_on(tmp_path, monkeypatch, capsys):
    import flnet.runner
    from flnet.errors import FlnetError

    def raising(scenario, **kwargs):
        raise FlnetError(f"cannot run {scenario.algorithm.name}")

    monkeypatch.setattr(flnet.runner, "run", raising)
    result = study().main([str(tmp_path), "--smoke"])
    assert (result["per_run"].status == "error").all()
    assert result["summary"].reached.str.startswith("0/").all()
    assert "cannot run dpsgd" in capsys.readouterr().out
    assert (tmp_path / "summary.csv").exists()


@pytest.mark.parametrize("part", ["policies", "cells", "gossip"])
def test_every_point_of_the_full_study_is_a_valid_scenario(part):
    """The full study's scenarios validate (a typo would only show after minutes)."""
    from flnet.scenario import load_scenario

    module = study()
    full = [pt for pt in module.points(False, 1) if pt["part"] == part]
    assert full
    for pt in full:
        load_scenario(data=pt["sc"])
