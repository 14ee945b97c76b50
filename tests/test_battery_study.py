"""Issue 26's study, its smoke version end to end: tau against battery-limited participation
and accuracy for FedAvg and FedBuff."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def study():
    spec = importlib.util.spec_from_file_location(
        "battery_study", ROOT / "analysis" / "battery_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_study_runs_and_batteries_limit_participation(tmp_path, capsys):
    result = study().main([str(tmp_path), "--smoke"])
    per_run = result["per_run"].set_index(["method", "tau"])
    assert sorted(per_run.index) == [("fedavg", 1), ("fedavg", 20), ("fedbuff", 1), ("fedbuff", 20)]
    assert (per_run.limited > 0).any()  # someone's battery ran low
    assert ((per_run.soc_mean > 0) & (per_run.soc_mean < 1)).all()
    # in half an hour, 20 local steps a task learn the digits; 1 step has barely started
    assert (per_run.xs(20, level="tau").acc_day1 > 0.5).all()
    assert (per_run.acc_day1 > 0.1).all()
    printed = capsys.readouterr().out
    assert "battery-limited" in printed and "fedbuff" in printed
    for name in ("per_run.csv", "summary.csv", "curves.csv"):
        assert (tmp_path / name).exists()


def test_points_that_raise_are_rows_and_the_study_goes_on(tmp_path, monkeypatch, capsys):
    """Every run raises (here at once: no simulation): each is a row with its status and
    error, the table counts them by status, they are listed, and the tables are written."""
    import flnet.runner
    from flnet.errors import FlnetError

    def raising(scenario, **kwargs):
        raise FlnetError(f"cannot run {scenario.algorithm.name}")

    monkeypatch.setattr(flnet.runner, "run", raising)
    result = study().main([str(tmp_path), "--smoke"])
    assert (result["per_run"].status == "error").all() and len(result["per_run"]) == 4
    assert result["summary"].ended.tolist() == ["1 error"] * 4
    assert "method fedbuff, tau 20, seed 0: error: cannot run fedbuff" in capsys.readouterr().out
    assert (tmp_path / "summary.csv").exists()
