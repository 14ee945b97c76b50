"""The DRDM energy study: its scenario is the digest's grid in the paper's setting, and its smoke
version gives the same best-tau table through Ray as through local workers."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest
from harness import ON_RAY, sweep_on_ray

from flnet.sweeps import load_base, plan, sweep

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "scenarios" / "sweeps" / "energy_study.yaml"
SMOKE = ROOT / "scenarios" / "sweeps" / "energy_study_smoke.yaml"


def analysis():
    spec = importlib.util.spec_from_file_location(
        "energy_study", ROOT / "analysis" / "energy_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_study_is_the_digests_grid_in_the_papers_setting():
    base, spec = load_base(STUDY)
    assert spec.grid == {
        "radio.uplink_snr_db": [-5, 0, 5, 10, 15, 20],
        "radio.uplink.bandwidth_hz": [1e6, 5e6, 10e6],
        "algorithm.local.steps": [1, 2, 5, 10, 15, 20, 25, 30],
    }
    assert list(spec.seeds) == [0, 1, 2]
    points = plan(base, spec)
    assert len(points) == 6 * 3 * 8 * 3 == len({p.key for p in points})
    assert base["clients"]["count"] == 30  # N
    algorithm = base["algorithm"]
    assert algorithm["cohort"]["clients_per_round"] == 20  # m
    assert algorithm["local"]["batch_size"] == 32
    assert base["model"]["costs_as"] == "cnn_kmnist"
    assert base["data"]["partition"] == {"kind": "zipf", "sigma": 0.0, "alpha": 0.1}
    # the switch to DRDM is the name: nothing SCAFFOLD-only is set
    assert set(algorithm) == {"name", "cohort", "local"}


@ON_RAY
def test_smoke_through_ray_gives_the_local_table(tmp_path, capsys):
    pytest.importorskip("ray")
    base, spec = load_base(SMOKE)
    assert len(plan(base, spec)) <= 12
    local_table, _ = sweep(SMOKE, workers=2, out_dir=tmp_path / "local")
    ray_table, _ = sweep_on_ray(SMOKE, out_dir=tmp_path / "ray")
    assert (local_table.status == "completed").all() and (ray_table.status == "completed").all()
    study = analysis()
    here = study.main([str(tmp_path / "local"), "--target", "0.5"])
    printed_here = capsys.readouterr().out
    there = study.main([str(tmp_path / "ray"), "--target", "0.5"])
    printed_there = capsys.readouterr().out
    pd.testing.assert_frame_equal(here["per_cell"], there["per_cell"], check_exact=True)
    pd.testing.assert_frame_equal(here["per_run"], there["per_run"], check_exact=True)
    assert printed_here.split("Tables in")[0] == printed_there.split("Tables in")[0]
    # one row per (SNR, bandwidth) cell, each seed's own winner listed
    table = here["table"]
    assert len(table) == 2 and (table.per_seed.str.count(",") == 1).all()
    assert (tmp_path / "local" / "energy_study" / "best_tau.csv").exists()
    # the radio does not change the learning: the same rounds to target in both SNR cells
    per_run = here["per_run"]
    rounds = per_run.groupby(["algorithm.local.steps", "seed"]).rounds_to_target.nunique(
        dropna=False
    )
    assert (rounds == 1).all()
