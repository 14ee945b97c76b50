"""The block-cyclic study's smoke version runs end to end and reports every claim."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def study():
    spec = importlib.util.spec_from_file_location(
        "block_cyclic_study", ROOT / "analysis" / "block_cyclic_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_smoke_study_reports_every_claim_with_seconds_and_joules(tmp_path):
    tables = study().main(["--smoke", "--out", str(tmp_path)])
    assert {p.stem for p in tmp_path.glob("*.csv")} == set(tables) == {"runs", "claims"}
    claims = tables["claims"]
    assert [c.split()[0] for c in claims.claim] == [
        "C1a",
        "C1b",
        "C1c",
        "C1d",
        "C5",
        "C2",
        "C3",
        "C4",
    ]
    assert set(claims.holds) <= {"holds", "does not hold"}  # one seed: all or nothing
    assert claims.seeds.str.fullmatch(r"holds in [01] of 1 seeds").all()
    runs = tables["runs"]
    c1 = runs[runs.study == "C1"].set_index("method")
    # MC-PSGD moves two models each way: twice MM-PSGD's uplink (plus two losses a round)
    assert 2.0 <= c1.bits_up["mc_ema"] / c1.bits_up["mm_ema"] < 2.01
    assert (c1.sim_time_s > 0).all() and (c1.energy_j > 0).all()
    assert set(runs.study) == {"C1", "C2", "C3", "C4"}


def test_runs_that_raise_leave_every_claim_undecided_and_the_study_goes_on(
    tmp_path, monkeypatch, capsys
):
    """Every run raises (a point that raises: no simulation): each is a row of runs.csv with
    its status and error, every claim is undecided for the seed, the runs are listed."""
    import flnet.runner
    from flnet.errors import FlnetError

    def raising(scenario, **kwargs):
        raise FlnetError("cannot run")

    monkeypatch.setattr(flnet.runner, "run", raising)
    tables = study().main(["--smoke", "--out", str(tmp_path)])
    runs = tables["runs"]
    assert (runs.status == "error").all() and (runs.error == "cannot run").all()
    assert runs["mean"].isna().all() and runs.rounds_to_threshold.isna().all()
    assert (tables["claims"].seeds == "holds in 0 of 1 seeds, 1 undecided").all()
    assert "study C1, method mm_ema, seed 0: error: cannot run" in capsys.readouterr().out
