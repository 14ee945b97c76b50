"""Issue 22's study: the joules wasted on work that came to nothing, by hand, and the study's
smoke version end to end."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from flnet.analysis import wasted_energy_j
from flnet.errors import FlnetError

ROOT = Path(__file__).resolve().parent.parent


def study():
    spec = importlib.util.spec_from_file_location(
        "availability_study", ROOT / "analysis" / "availability_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COLUMNS = ["round", "pattern", "node", "kind", "start_s", "end_s", "energy_j", "outcome"]


def test_wasted_energy_counts_every_row_of_a_failed_work_by_hand():
    ledger = pd.DataFrame(
        [
            # round 1: client 0 delivers; client 1 is cut at the deadline during its upload
            (1, "round_trip", 0, "download", 0, 1, 0.1, "ok"),
            (1, "round_trip", 0, "compute", 1, 2, 1.0, "ok"),
            (1, "round_trip", 0, "upload", 2, 3, 0.5, "ok"),
            (1, "round_trip", 1, "download", 0, 1, 0.2, "ok"),
            (1, "round_trip", 1, "compute", 1, 2, 2.0, "ok"),
            (1, "round_trip", 1, "upload", 2, 3, 0.7, "deadline"),
            # stream, server version 0: client 2 drops out while computing, then starts
            # again at the same version and delivers; client 3's session ends mid-download
            (0, "stream", 2, "download", 0, 1, 0.3, "ok"),
            (0, "stream", 2, "compute", 1, 1.5, 4.0, "dropped"),
            (0, "stream", 2, "download", 5, 6, 0.01, "ok"),
            (0, "stream", 2, "compute", 6, 7, 0.02, "ok"),
            (0, "stream", 2, "upload", 7, 8, 0.04, "ok"),
            (0, "stream", 3, "download", 0, 1, 8.0, "interrupted"),
            (1, "round_trip", -2, "evaluate", 3, 3, 100.0, "ok"),
        ],
        columns=COLUMNS,
    )
    wasted = wasted_energy_j(ledger)
    assert wasted == pytest.approx(
        {"deadline": 0.2 + 2.0 + 0.7, "dropped": 4.3, "interrupted": 8.0}
    )
    assert wasted_energy_j(ledger[ledger.outcome == "ok"]) == {}


def test_the_smoke_study_runs_and_accounts_for_the_waste(tmp_path, capsys):
    result = study().main([str(tmp_path), "--smoke"])
    per_run = result["per_run"].set_index("variant")
    assert list(per_run.index) == list(study().VARIANTS)
    assert (per_run.wasted_j <= per_run.joules).all() and (per_run.wasted_j > 0).all()
    # each policy wastes in its own way: cut at the deadline, cancelled by over-selection
    assert per_run.loc["deadline", "wasted_deadline_j"] > 0
    assert per_run.loc["over_selection", "wasted_cancelled_j"] > 0
    assert per_run.loc["wait_for_all", "wasted_deadline_j"] == 0
    assert per_run.loc["fedasync", ["wasted_deadline_j", "wasted_cancelled_j"]].sum() == 0
    assert (per_run.acc_end > 0.2).all()  # every method learned something
    printed = capsys.readouterr().out
    assert "joules wasted" in printed and "fedasync" in printed
    for name in ("per_run.csv", "summary.csv", "wasted.csv", "curves.csv"):
        assert (tmp_path / name).exists()


def raise_for(monkeypatch, algorithm, error):
    """Runs of `algorithm` raise `error` (a point that raises); the others run."""
    import flnet.runner

    run = flnet.runner.run

    def maybe(scenario, **kwargs):
        if scenario.algorithm.name == algorithm:
            raise error
        return run(scenario, **kwargs)

    monkeypatch.setattr(flnet.runner, "run", maybe)


def test_a_point_that_raises_is_a_row_and_the_study_goes_on(tmp_path, monkeypatch, capsys):
    """FedBuff's run raises a FlnetError: its row has the status and error and no figures, the
    table counts it, it is listed after the tables, and every other method ran."""
    raise_for(monkeypatch, "fedbuff", FlnetError("the trace cannot be read"))
    result = study().main([str(tmp_path), "--smoke", "--only", "deadline", "fedbuff"])
    per_run = result["per_run"].set_index("variant")
    assert per_run.loc["fedbuff", "status"] == "error"
    assert per_run.loc["fedbuff", "error"] == "the trace cannot be read"
    assert per_run.loc["fedbuff", ["acc_end", "joules"]].isna().all()
    assert (
        per_run.loc["deadline", "status"] == "completed" and per_run.loc["deadline", "acc_end"] > 0
    )
    table = result["summary"].set_index("method")
    assert (
        table.loc["fedbuff", "ended"] == "1 error"
        and table.loc["fedbuff", "acc@T"] == "none: 1 error"
    )
    assert "variant fedbuff, seed 0: error: the trace cannot be read" in capsys.readouterr().out


def test_a_study_whose_every_point_raises_still_writes_its_tables(tmp_path, monkeypatch):
    raise_for(monkeypatch, "fedavg", FlnetError("no"))
    result = study().main([str(tmp_path), "--smoke", "--only", "deadline"])
    assert result["summary"].ended.tolist() == ["1 error"]
    assert (tmp_path / "summary.csv").exists()
