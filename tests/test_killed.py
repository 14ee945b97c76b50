"""A run killed with -9 never replaces the summary that says it is running: every reader shows it
as killed when no process holds its folder's lock, and as running while one does. Real `flnet
run` and `flnet sweep` processes wait at a gate after a checkpoint (tests/gated.py), are
checked while alive, then get SIGKILL."""

import contextlib
import json
import os
import signal
import sys

import pandas as pd
import pytest
import yaml
from gated import Child, gated_run
from harness import assert_same_tables, flnet_cli

from flnet import output
from flnet.plot import load_results
from flnet.runner import run
from flnet.sweeps import combine, gather, load_base, parse_grid, plan, spec_from

SCENARIO = {
    "name": "killed",
    "seed": 2,
    "device": "cpu",
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 4},
        "local": {"steps": 2, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 8},
    "run": {"rounds": 8, "eval_every": 2, "checkpoint_every": 2, "checkpoint_interval_s": None},
}


def write_scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def flnet(*args, cwd=None):
    result = flnet_cli(*args, cwd=cwd, timeout=300)
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def report_status(out, tmp_path):
    """The status `flnet report` shows for the run in `out` (its final-results table)."""
    html = tmp_path / "report.html"
    code, said = flnet("report", out, "-o", html)
    assert code == 0, said
    text = html.read_text()
    return text.split('data-col="status">', 1)[1].split("<", 1)[0]


def summary_status(out):
    return json.loads((out / "summary.json").read_text())["status"]


def test_a_run_killed_after_a_checkpoint_reads_as_killed(tmp_path):
    path, out = write_scenario(tmp_path), tmp_path / "out"
    child = gated_run(tmp_path, 4, "run", path, "--out", out, "--quiet")
    child.wait_for("at the gate")  # round 4's checkpoint and summary are written
    assert summary_status(out) == "running"
    assert output.lock_holder(out) == str(child.proc.pid)
    assert output.run_status(out, "running") == "running"
    assert load_results(out).runs.status.tolist() == ["running"]
    assert report_status(out, tmp_path) == "running"
    code, said = flnet("run", path, "--out", out)
    assert code == 2 and f"being written by another flnet run (pid {child.proc.pid})" in said

    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    assert summary_status(out) == "running"  # on disk as the run left it: readers interpret
    assert output.lock_holder(out) is None
    assert output.run_status(out, "running") == "killed"
    assert output.run_status(out, "completed") == "completed"
    assert load_results(out).runs.status.tolist() == ["killed"]
    assert report_status(out, tmp_path) == "killed"
    code, said = flnet("run", path, "--out", out)
    assert code == 2, said
    assert f"{out} already holds a run that was killed" in said and "--resume" in said

    # the note's command continues it, from the checkpoint the kill left
    note = output.killed_note(out)
    command = note.split("continue it with `", 1)[1].split("`", 1)[0].split()
    assert command == ["flnet", "run", str(out / "scenario.yaml"), "--resume"]
    code, said = flnet(*command[1:], cwd=tmp_path / "..")
    assert code == 0 and "from round 4" in said, said
    assert summary_status(out) == "completed"
    assert load_results(out).runs.status.tolist() == ["completed"]
    whole = run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    pd.testing.assert_frame_equal(pd.read_parquet(out / "records.parquet"), whole.records)


def test_a_killed_run_without_a_checkpoint_says_to_start_again(tmp_path):
    """Killed between the first summary and the first checkpoint (in-process here: the summary
    is written, the checkpoint never is): nothing to resume, and the note says so."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"status": "running"}))
    assert output.run_status(out, "running") == "killed"  # no lock file: nobody holds it
    assert "it left no checkpoint: run it again with --force" in output.killed_note(out)
    with output.open_folder(out, force=True):  # this process holds it: alive
        assert output.lock_holder(out) == str(os.getpid())
        (out / "summary.json").write_text(json.dumps({"status": "running"}))
        assert output.run_status(out, "running") == "running"
    assert output.run_status(out, "running") == "killed"


FORKING = """
import multiprocessing, os, pathlib, sys, time
import flnet.runner as runner

stop = pathlib.Path(sys.argv[1])


def linger():  # a worker that outlives the run: it holds whatever fork gave it
    while not stop.exists():
        time.sleep(0.05)


class Fork:
    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        if progress.step == 2:  # after round 2's checkpoint
            worker = multiprocessing.get_context("fork").Process(target=linger, daemon=False)
            worker.start()
            print(f"forked {worker.pid}", file=sys.stderr, flush=True)
            while True:
                time.sleep(1)
        return None

    def on_end(self, world, reason):
        pass


real = runner.run
runner.run = lambda *a, observers=(), **k: real(*a, observers=(*observers, Fork()), **k)
from flnet.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_forked_worker_left_by_a_killed_run_does_not_hold_its_folder(tmp_path):
    """A run forks a multiprocessing worker (a data loader would) and is killed with -9; the
    worker lives on. An flock belongs to the open file, which fork shares: the worker used to
    hold the folder's lock, so the folder read as running and `--resume` was refused as "being
    written by another flnet run (pid <the dead run>)". The worker closes its copy at fork."""
    path, out, stop = write_scenario(tmp_path), tmp_path / "out", tmp_path / "stop"
    child = Child([sys.executable, "-c", FORKING, str(stop), "run", path, "--out", out, "-q"])
    worker = None
    try:
        worker = int(child.wait_for("forked ").split()[-1])
        assert output.lock_holder(out) == str(child.proc.pid)
        child.proc.send_signal(signal.SIGKILL)
        assert child.finish() == -signal.SIGKILL
        os.kill(worker, 0)  # the worker is alive
        assert output.lock_holder(out) is None
        assert output.run_status(out, "running") == "killed"
        code, said = flnet("run", path, "--out", out, "--resume")
        assert code == 0 and "from round 2" in said, said
        os.kill(worker, 0)  # still alive: the lock was free while it lived
    finally:
        stop.write_text("stop")
        if child.proc.poll() is None:
            child.proc.kill()
        if worker is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signal.SIGKILL)
    assert summary_status(out) == "completed"


@pytest.fixture
def sweep_args(tmp_path):
    path = write_scenario(tmp_path)
    return path, tmp_path / "sweep", ["--grid", "seed=0,1", "--workers", "0", "--quiet"]


def test_a_sweep_never_deletes_a_point_a_live_run_writes_and_shows_a_killed_one(
    tmp_path, sweep_args
):
    path, out, args = sweep_args
    child = gated_run(tmp_path, 4, "sweep", path, "--out", out, *args)
    child.wait_for("at the gate")
    points = plan(*_base_and_spec(path))
    live = [p.key for p in points if (out / p.key / "summary.json").exists()]
    assert len(live) == 1
    folder = out / live[0]
    before = sorted(f.name for f in folder.iterdir())
    assert gather(points, out, {})[0].set_index("point").status[live[0]] == "running"

    code, said = flnet("sweep", path, "--out", out, *args)  # a second sweep into the same folder
    assert code == 2 and f"{out} is being written by another flnet sweep" in said, said
    assert sorted(f.name for f in folder.iterdir()) == before  # nothing deleted under it

    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    table = gather(points, out, {})[0].set_index("point")
    assert table.status[live[0]] == "killed"
    assert "no process holds" in table.error[live[0]]
    code, said = flnet("sweep", path, "--out", out, *args)  # the killed point resumes
    assert code == 0, said
    assert f"resuming {folder.absolute()} from round" in " ".join(said.split()), said
    table = pd.read_csv(out / "points.csv")
    assert table.status.tolist() == ["completed", "completed"]
    whole = tmp_path / "whole"
    code, said = flnet("sweep", path, "--out", whole, *args)  # never killed
    assert code == 0, said
    assert_same_tables(folder, whole / live[0])


def test_a_sweep_starts_a_point_afresh_when_its_checkpoint_does_not_fit(tmp_path, sweep_args):
    path, out, args = sweep_args
    child = gated_run(tmp_path, 4, "sweep", path, "--out", out, *args)
    child.wait_for("at the gate")
    child.proc.send_signal(signal.SIGKILL)
    assert child.finish() == -signal.SIGKILL
    [folder] = [f for f in out.iterdir() if (f / output.CHECKPOINT).is_file()]
    (folder / output.CHECKPOINT).write_bytes(b"not a checkpoint")
    code, said = flnet("sweep", path, "--out", out, *args)
    assert code == 0, said
    assert f"starting {folder.absolute()} afresh:" in " ".join(said.split()), said
    assert pd.read_csv(out / "points.csv").status.tolist() == ["completed", "completed"]


def _base_and_spec(path):
    base, file_spec = load_base(path)
    return base, combine(file_spec, spec_from(parse_grid(["seed=0,1"]), None, None, []))
