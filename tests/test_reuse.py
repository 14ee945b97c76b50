"""Trajectory reuse (a point's costs replayed on another point's training) and timing-only
runs: both must give what a full run of the point gives, bit for bit (same machine)."""

import json

import numpy as np
import pandas as pd
import pytest
from conftest import BASE
from harness import ON_RAY, sweep_on_ray

from flnet import reuse
from flnet.learn import cohort
from flnet.learn.evaluate import Evaluator
from flnet.runner import run
from flnet.scenario import load_scenario, merge
from flnet.sweeps import sweep

# fading, shared uplink and per-client CPU speeds: times depend on overlaps, not a formula
COSTLY = {
    "clients": {"cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.5}},
    "radio": {"rayleigh_fading": True},
    "run": {"rounds": 4, "eval_every": 2},
}
CELLS = [  # two SNR / bandwidth cells other than the trajectory's
    {"radio": {"uplink": {"bandwidth_hz": 1e6}, "tx_power_dbm": 0.0}},
    {"radio": {"uplink": {"bandwidth_hz": 5e6, "sharing": "dedicated"}, "tx_power_dbm": 20.0}},
]
SCAFFOLD = {"algorithm": {"name": "scaffold"}}
COSTS = list(reuse.COST_COLUMNS)


def _scenario(tmp_path, name, *parts):
    data = merge(BASE, {"output": {"dir": str(tmp_path / name)}})
    for part in parts:
        data = merge(data, part)
    return load_scenario(data=data)


@pytest.mark.parametrize("algorithm", [{}, SCAFFOLD], ids=["fedavg", "scaffold"])
def test_replayed_ledger_and_costs_equal_a_full_run_bit_for_bit(tmp_path, algorithm):
    run(_scenario(tmp_path, "trajectory", COSTLY, algorithm))
    source = reuse.load_source(tmp_path / "trajectory", "t")
    assert reuse.source_problem(source) is None
    for i, cell in enumerate(CELLS):
        full = run(_scenario(tmp_path, f"full{i}", COSTLY, algorithm, cell), write=False)
        replayed = reuse.replay(_scenario(tmp_path, f"replay{i}", COSTLY, algorithm, cell), source)
        pd.testing.assert_frame_equal(replayed.ledger, full.ledger, check_exact=True)
        pd.testing.assert_frame_equal(
            replayed.records[COSTS], full.records[COSTS], check_exact=True
        )
        assert not replayed.records.sim_time_s.equals(source.records.sim_time_s)  # a new cell
        # the accuracy columns are the trajectory's, and a full run's too: the server sums the
        # delivered updates in cohort order, so timing never changes the model
        pd.testing.assert_frame_equal(replayed.records, full.records, check_exact=True)
        on_disk = json.loads((tmp_path / f"replay{i}" / "summary.json").read_text())
        assert on_disk["reused_from"] == "t" and on_disk["energy_j"] == full.summary["energy_j"]
        assert on_disk["sim_time_s"] == full.summary["sim_time_s"]


def test_a_capacity_traces_compute_power_is_costs_only_and_replays_bit_for_bit(tmp_path):
    import pickle

    from flnet import fedscale

    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps({1: {"computation": 20.0, "communication": 800.0}}))
    fedscale.convert(None, cap, tmp_path)

    def trace(name, power_w, mapping="permuted"):
        path = str(tmp_path / "capacity.csv")
        part = {"path": path, "mapping": mapping, "compute_power_w": power_w}
        return _scenario(tmp_path, name, {"clients": {"capacity_trace": part}})

    def key(sc):
        return reuse.group_key(sc.model_dump(mode="json"))

    assert key(trace("a", 1.0)) == key(trace("b", 3.0))
    assert key(trace("a", 1.0)) != key(trace("c", 1.0, "in_order"))  # who plays whom
    run(trace("t", 1.0))
    source = reuse.load_source(tmp_path / "t", "t")
    full = run(trace("full", 3.0), write=False)
    replayed = reuse.replay(trace("replay", 3.0), source)
    pd.testing.assert_frame_equal(replayed.ledger, full.ledger, check_exact=True)
    assert replayed.summary["energy_j"] != source.summary["energy_j"]


def test_a_piece_of_work_without_a_compute_row_computed_nothing():
    """Work of no FLOPs writes no compute row (World): a replay reads it as 0 FLOPs, not as
    an incomplete round."""
    ledger = pd.DataFrame(
        {
            "round": [1, 1, 1, 1, 1],
            "node": [0, 0, 0, 1, 1],
            "kind": ["download", "compute", "upload", "download", "upload"],
            "bits": [8.0, 0.0, 16.0, 8.0, 16.0],
            "flops": [0.0, 5.0, 0.0, 0.0, 0.0],
        }
    )
    work = reuse._LedgerWork(ledger)
    assert work(1, np.array([0, 1])) == ([8.0, 8.0], [5.0, 0.0], [16.0, 16.0])
    with pytest.raises(reuse.NotReusable, match="client 2 of round 1 did no work"):
        work(1, np.array([2]))


def test_a_replay_a_deadline_would_cut_is_not_the_points_run(tmp_path):
    deadline = {
        "radio": {"mode": "direct", "rayleigh_fading": True},
        "algorithm": {"cohort": {"deadline_s": 0.5}},
    }
    run(_scenario(tmp_path, "a", deadline))  # 20 MHz: rounds of about 0.01 s
    source = reuse.load_source(tmp_path / "a", "a")
    narrow = {"radio": {"uplink": {"bandwidth_hz": 2e5}}}  # about 0.6 s: past the deadline
    with pytest.raises(reuse.NotReusable, match=r"events cut \(deadline\)"):
        reuse.replay(_scenario(tmp_path, "b", deadline, narrow), source)
    assert not (tmp_path / "b").exists()  # nothing written: the point runs in full instead


def test_sweep_replays_radio_cells_and_says_which_run_it_reused(tmp_path):
    base = merge(BASE, COSTLY)
    grid = {
        "radio.uplink.bandwidth_hz": [1e6, 5e6],
        "radio.tx_power_dbm": [0.0, 20.0],
        "algorithm.local.steps": [1, 2],
    }
    table, records = sweep(base, grid, workers=2, out_dir=tmp_path / "reuse")
    full_table, full = sweep(base, grid, workers=0, out_dir=tmp_path / "full", reuse=False)
    assert (table.status == "completed").all()
    pd.testing.assert_frame_equal(records, full, check_exact=True)
    same = ["point", *grid, "status", "stop_reason", "rounds", "sim_time_s", "energy_j"]
    pd.testing.assert_frame_equal(table[same], full_table[same], check_exact=True)
    # per tau one trajectory (the first radio cell) and three replays of it
    for _, group in table.groupby("algorithm.local.steps"):
        trajectory = group.point.iloc[0]
        assert group.reused_from.isna().iloc[0]
        assert group.reuse_note.iloc[0] == reuse.TRAJECTORY_NOTE
        assert (group.reused_from.iloc[1:] == trajectory).all()
    assert full_table.reused_from.isna().all()
    written = pd.read_csv(tmp_path / "reuse" / "points.csv")
    assert written.reused_from.notna().sum() == 6


def test_a_replay_a_deadline_cuts_runs_in_full_and_says_why(tmp_path):
    base = merge(
        BASE,
        {
            "radio": {"mode": "direct", "rayleigh_fading": True},
            "algorithm": {"cohort": {"deadline_s": 0.5}},
        },
    )
    grid = {"radio.uplink.bandwidth_hz": [20e6, 1e6, 2e5]}
    table, records = sweep(base, grid, workers=0, out_dir=tmp_path / "a")
    full_table, full = sweep(base, grid, workers=0, out_dir=tmp_path / "b", reuse=False)
    assert list(table.reused_from.isna()) == [True, False, True]
    cut = table.iloc[2]
    assert cut.reuse_note.startswith("ran in full: the replay had events cut (deadline)")
    summary = json.loads((tmp_path / "a" / cut.point / "summary.json").read_text())
    assert summary["reuse_note"] == cut.reuse_note and "reused_from" not in summary
    pd.testing.assert_frame_equal(records, full, check_exact=True)


def test_fedbuff_and_over_selection_are_never_reused(tmp_path):
    grid = {"radio.uplink.bandwidth_hz": [1e6, 5e6]}
    fedbuff = merge(BASE, {"algorithm": {"name": "fedbuff", "concurrency": 3, "buffer_size": 2}})
    fedbuff["algorithm"].pop("cohort", None)
    table, _ = sweep(fedbuff, grid, workers=0, out_dir=tmp_path / "fedbuff")
    assert table.reused_from.isna().all()
    assert table.reuse_note.str.contains("FedBuff").all()
    over = merge(BASE, {"algorithm": {"cohort": {"over_selection": 1.5}}})
    table, _ = sweep(over, grid, workers=0, out_dir=tmp_path / "over")
    assert table.reused_from.isna().all() and table.reuse_note.str.contains("over-").all()


def test_started_again_a_reusing_sweep_gives_the_same_table(tmp_path):
    base = merge(BASE, COSTLY)
    grid = {"radio.uplink.bandwidth_hz": [1e6, 2e6, 5e6]}
    first, records = sweep(base, grid, workers=0, out_dir=tmp_path)
    # a replay and the trajectory left unfinished (as a killed sweep leaves them)
    for key in first.point.iloc[[0, 2]]:
        summary = json.loads((tmp_path / key / "summary.json").read_text())
        (tmp_path / key / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    stamp = (tmp_path / first.point[1] / "summary.json").stat().st_mtime_ns
    again, again_records = sweep(base, grid, workers=0, out_dir=tmp_path)
    assert (tmp_path / first.point[1] / "summary.json").stat().st_mtime_ns == stamp
    cols = [c for c in first.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(again[cols], first[cols], check_exact=True)
    pd.testing.assert_frame_equal(again_records, records, check_exact=True)


def _no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a timing-only run trained or evaluated")

    monkeypatch.setattr(cohort.Trainer, "train", refuse)
    monkeypatch.setattr(Evaluator, "__call__", refuse)


@pytest.mark.parametrize(
    "algorithm",
    [
        {},
        SCAFFOLD,
        {"algorithm": {"local": {"epochs": 1, "steps": None, "batch_size": 16}}},
        {"algorithm": {"local": {"sam_rho": 0.05}, "cohort": {"deadline_s": 0.3}}},
        {"model": {"costs_as": "cnn_kmnist"}},
        {"algorithm": {"name": "moon"}, "model": {"costs_as": "cnn_kmnist"}},
        {"algorithm": {"name": "feddyn"}},
    ],
    ids=["fedavg", "scaffold", "epochs", "sam-deadline", "costs-as", "moon-costs-as", "feddyn"],
)
def test_timing_only_costs_equal_a_full_runs_and_nothing_trains(tmp_path, monkeypatch, algorithm):
    cell = merge(COSTLY, {"data": {"partition": {"kind": "dirichlet", "alpha": 0.5}}})
    full = run(_scenario(tmp_path, "full", cell, algorithm, CELLS[0]), write=False)
    _no_training(monkeypatch)
    timed = reuse.timing_only(_scenario(tmp_path, "timed", cell, algorithm, CELLS[0]))
    pd.testing.assert_frame_equal(timed.ledger, full.ledger, check_exact=True)
    pd.testing.assert_frame_equal(timed.records[COSTS], full.records[COSTS], check_exact=True)
    assert timed.records.timing_only.all() and "test_accuracy" not in timed.records
    on_disk = json.loads((tmp_path / "timed" / "summary.json").read_text())
    assert on_disk["timing_only"] is True
    assert on_disk["energy_j"] == full.summary["energy_j"]
    assert on_disk["charged_params"] == full.summary["charged_params"]


def test_timing_only_from_the_command_line(tmp_path, monkeypatch, capsys):
    from flnet.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(merge(BASE, {"output": {"dir": str(tmp_path / "o")}})))
    _no_training(monkeypatch)
    assert main(["run", str(path), "--timing-only", "--rounds", "7", "-q"]) == 0
    records = pd.read_parquet(tmp_path / "o" / "records.parquet")
    assert records["round"].tolist() == list(range(8)) and records.timing_only.all()
    assert "timing-only" in capsys.readouterr().out
    fedbuff = merge(BASE, {"algorithm": {"name": "fedbuff"}})
    fedbuff["algorithm"].pop("cohort", None)
    path.write_text(json.dumps(fedbuff))
    assert main(["run", str(path), "--timing-only", "-q"]) == 2
    assert "timing-only run supports fedavg" in capsys.readouterr().err


@ON_RAY
def test_ray_replays_give_the_same_table_as_local_workers(tmp_path):
    pytest.importorskip("ray")
    base = merge(BASE, COSTLY)
    grid = {"radio.uplink.bandwidth_hz": [1e6, 5e6], "seed": [0, 1]}
    local_table, local = sweep(base, grid, workers=2, out_dir=tmp_path / "local")
    ray_table, on_ray = sweep_on_ray(base, grid, out_dir=tmp_path / "ray")
    pd.testing.assert_frame_equal(on_ray, local, check_exact=True)
    cols = ["point", *grid, "status", "sim_time_s", "energy_j", "reused_from"]
    pd.testing.assert_frame_equal(ray_table[cols], local_table[cols], check_exact=True)
    assert ray_table.reused_from.notna().sum() == 2


def test_a_replay_stops_where_its_trajectory_reached_the_target(tmp_path):
    target = merge(COSTLY, {"run": {"rounds": 30, "target_accuracy": 0.3, "eval_every": 1}})
    trajectory = run(_scenario(tmp_path, "a", target))
    assert trajectory.summary["stop_reason"] == "target_accuracy"
    assert trajectory.summary["rounds"] < 30
    source = reuse.load_source(tmp_path / "a", "a")
    full = run(_scenario(tmp_path, "full", target, CELLS[0]), write=False)
    replayed = reuse.replay(_scenario(tmp_path, "b", target, CELLS[0]), source)
    assert replayed.summary["stop_reason"] == "target_accuracy"
    pd.testing.assert_frame_equal(replayed.records, full.records, check_exact=True)
    pd.testing.assert_frame_equal(replayed.ledger, full.ledger, check_exact=True)
