"""The Slurm path (submitit job arrays) run by submitit's local executor: the same table as a
local sweep, `--status` from the folder, and a second run that resumes the missing points."""

import shutil
import subprocess
import sys

import pandas as pd
import yaml
from conftest import BASE
from test_ray_cluster import need

from flnet.cluster import ClusterOptions
from flnet.scenario import merge
from flnet.slurm import chunks
from flnet.sweep_status import sweep_status
from flnet.sweeps import run_sweep, spec_from

need("submitit")

BASE2 = merge(BASE, {"run": {"rounds": 2}})
SPEC = spec_from({"seed": [0, 1], "radio.tx_power_dbm": [10, 20]})  # 2 trajectories, 2 replays
WALL = ["wall_s"]


def test_chunks_cover_every_task_once_in_order():
    tasks = [(str(i), i) for i in range(5)]
    assert chunks(tasks, 2) == [tasks[0:2], tasks[2:4], tasks[4:5]]
    assert chunks(tasks, 9) == [tasks]


def test_a_slurm_sweep_equals_a_local_one_and_resumes_what_is_missing(tmp_path):
    local = run_sweep(BASE2, SPEC, workers=2, out_dir=tmp_path / "local")
    slurm = ClusterOptions(points_per_task=2, time_min=10, executor="local")
    out = tmp_path / "slurm"
    first = run_sweep(BASE2, SPEC, out_dir=out, backend="slurm", cluster=slurm)
    assert set(first.table.status) == {"completed"}, first.table[["status", "error"]]
    pd.testing.assert_frame_equal(
        first.table.drop(columns=WALL), local.table.drop(columns=WALL), check_exact=True
    )
    pd.testing.assert_frame_equal(first.records, local.records, check_exact=True)
    assert list((out / "slurm").glob("*_log.out")), "submitit keeps each task's log there"

    lost = first.table.point[3]  # a replay: its trajectory is on disk
    shutil.rmtree(out / lost)
    status, folder = sweep_status(BASE2, SPEC, out)
    assert folder == out
    assert list(status.status) == ["completed"] * 3 + ["not finished"]
    scenario = tmp_path / "s.yaml"  # the same sweep as the command line gives it
    scenario.write_text(yaml.safe_dump(BASE2))
    shown = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "sweep", str(scenario), "--seeds", "0,1"]
        + ["--grid", "radio.tx_power_dbm=10,20", "--out", str(out), "--status"],
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: other tests may share the cores
    )
    assert shown.returncode == 1, shown.stderr  # not every point has finished
    assert f"4 points in {out}: 3 completed, 1 not finished" in shown.stdout

    again = run_sweep(BASE2, SPEC, out_dir=out, backend="slurm", cluster=slurm)
    assert again.ran == [lost] and len(again.skipped) == 3
    pd.testing.assert_frame_equal(
        again.table.drop(columns=WALL), local.table.drop(columns=WALL), check_exact=True
    )
