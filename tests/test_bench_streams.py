"""The streams row of benchmarks/bench.py: its week trace reads as flnet's availability, and
the row's figures are per simulated hour, per client work and against FedAvg's."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench

from flnet.sim.traces import read_availability


def test_the_week_trace_reads_back_with_about_a_quarter_online(tmp_path):
    trace = read_availability(bench.week_trace(tmp_path / "week.csv", clients=60))
    rows = np.arange(60)
    assert trace.period_s[0] == bench.WEEK_S
    share = np.mean([trace.online(rows, t).mean() for t in np.linspace(6 * 3600, 6 * 86400, 50)])
    assert 0.15 < share < 0.35  # sessions of ~1 h, gaps of ~3 h


def test_the_streams_row_divides_by_hours_works_and_fedavgs_time(monkeypatch, capsys):
    canned = iter([5.0, 10.0, 20.0])  # FedAvg, FedBuff, FedAsync wall seconds

    def runs(path, *overrides, **kw):
        wall = next(canned)
        assert any(o.startswith("run.time_budget_s=3600") for o in overrides)
        return [
            dict(
                wall_s=wall, cpu_s=wall / 2, events=1000, train_wall_s=wall / 4, final_accuracy=0.9
            )
        ]

    monkeypatch.setattr(bench, "scenario_runs", runs)
    bench.streams_report(quick=True)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert "5.00 s wall (  2.50 s CPU) per simulated hour, 1.00x FedAvg;" in lines[0]
    assert "10.00 s wall (  5.00 s CPU) per simulated hour, 2.00x FedAvg" in lines[1]
    assert "20.00 s wall" in lines[2] and "4.00x FedAvg" in lines[2]
    # against the target, and the floor its training alone sets (a quarter of its wall)
    assert "(target 1.5x: not met; its local training alone 0.50x)" in lines[1]
    assert "(target 1.5x: not met; its local training alone 1.00x)" in lines[2]
    assert "1000 client works an hour, 20.00 ms wall each; local training  25%" in lines[2]


def test_a_server_within_the_target_is_met_up_to_its_bound(monkeypatch, capsys):
    canned = iter([4.0, 5.0, 6.0])  # 1.25x and exactly 1.5x FedAvg's wall

    def runs(path, *overrides, **kw):
        wall = next(canned)
        return [dict(wall_s=wall, cpu_s=wall, events=10, train_wall_s=2.0, final_accuracy=0.9)]

    monkeypatch.setattr(bench, "scenario_runs", runs)
    bench.streams_report(quick=True)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert "1.25x FedAvg (target 1.5x: met; its local training alone 0.50x)" in lines[1]
    assert "1.50x FedAvg (target 1.5x: met;" in lines[2]
