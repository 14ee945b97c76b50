"""Every warning a run emits reaches its summary and the sweep's table, and `flnet validate` of
a sweep names the point it is about (issue 41, class 7). OledFL with beta = 0.6 on the ring
(lambda_min(W) = -1/3: beta must stay below 1/2) warns that it is unstable; `flnet run`
printed it, but a sweep with workers left the point's note empty and its summary silent."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
UNSTABLE = "algorithm.beta = 0.6 is unstable for this W: lambda_min(W) = -0.3333"


def flnet(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "flnet.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000"},
        timeout=600,
    )
    return proc.returncode, proc.stdout, proc.stderr


def sweep_file(tmp_path, **sweep):
    path = tmp_path / "ole_sweep.yaml"
    scenario = {
        "extends": str(REPO / "scenarios" / "oledfl_sgd.yaml"),
        "name": "ole_sweep",
        "device": "cpu",
        "run": {"rounds": 2, "eval_every": 1},
        "sweep": sweep,
    }
    path.write_text(yaml.safe_dump(scenario))
    return path


def test_a_sweeps_workers_keep_each_points_warning_in_its_note_and_summary(tmp_path):
    """Three points with beta = 0.6 on two workers: one worker runs two of them, whose same
    warning a process's warnings filter shows once; each point notes it."""
    path = sweep_file(
        tmp_path, paired={"algorithm.beta": [0.4, 0.6, 0.6, 0.6], "seed": [0, 0, 1, 2]}
    )
    out = tmp_path / "out"
    code, _, err = flnet("sweep", path, "--workers", "2", "--out", out, "--quiet", "--no-reuse")
    assert code == 0, err
    table = pd.read_csv(out / "points.csv")
    assert table.status.tolist() == ["completed"] * 4
    for row in table.itertuples():
        summary = json.loads((out / row.point / "summary.json").read_text())
        if row._2 == 0.6:  # algorithm.beta
            assert UNSTABLE in row.note
            assert any(UNSTABLE in w for w in summary["warnings"])
        else:
            assert pd.isna(row.note) and "warnings" not in summary


def test_validate_of_a_sweep_names_the_point_a_warning_is_about(tmp_path):
    path = sweep_file(tmp_path, grid={"algorithm.beta": [0.4, 0.6]})
    code, out, err = flnet("validate", path)
    assert code == 0, err
    [line] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert line.startswith(f"warning: sweep point (algorithm.beta=0.6): {UNSTABLE}")
    assert "a sweep of 2 points, each checked" in out
