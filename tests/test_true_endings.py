"""What a run or sweep says about how it ended is true (issue 41, class 6), each checked on a
real process: a run stopped by the file-size limit (exit 4) records `failed` and the error in
its summary, not `running`; two sweeps started together into one folder do not both run every
point; SIGTERM to a stream with nobody online stops it at once, not after a 7-day give-up."""

import json
import resource
import signal
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from gated import flnet_run, gated_run
from harness import flnet_cli

from flnet import output
from flnet.runner import run

SMALL = {
    "name": "endings",
    "seed": 1,
    "device": "cpu",
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 3},
        "local": {"steps": 1, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 6},
    "run": {"rounds": 4, "eval_every": 1, "checkpoint_every": 1, "checkpoint_interval_s": None},
}


def flnet(*args, preexec_fn=None, timeout=300):
    proc = flnet_cli(*args, timeout=timeout, preexec_fn=preexec_fn)
    return proc.returncode, proc.stdout + proc.stderr


FILE_LIMIT_BYTES = 40_000  # the scenario, partition, records and summary fit; the checkpoint not


def limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_BYTES, FILE_LIMIT_BYTES))


def test_a_run_stopped_by_the_file_size_limit_records_failed_and_why(tmp_path):
    """A model of some 20,000 parameters: its first checkpoint (step 0, after the first
    summary said running) is over the limit; the run exits 4 and its summary says failed,
    with the error, the records of step 0 beside it."""
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    path.write_text(yaml.safe_dump({**SMALL, "model": {"kind": "mlp", "hidden": [300]}}))
    code, said = flnet("run", path, "--out", out, "--quiet", preexec_fn=limit_file_size)
    assert code == 4, said
    assert f"could not write {out / 'checkpoint.pt'}: File too large" in " ".join(said.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"].startswith("WriteError: could not write")
    assert "checkpoint.pt: File too large" in summary["error"]
    assert not (out / "checkpoint.pt").exists()
    assert output.run_status(out, summary["status"]) == "failed"  # what every reader shows


def test_two_sweeps_started_together_into_one_folder_run_each_point_once(tmp_path):
    """Both start at once; the one that takes the sweep's lock holds it for the whole sweep
    (here, waiting at a gate in its first point), so the other is refused naming it, whenever
    it gets there. Checking the points' own locks once let both run every point."""
    path, out = tmp_path / "s.yaml", tmp_path / "sweep"
    path.write_text(yaml.safe_dump(SMALL))
    args = ["sweep", path, "--out", out, "--grid", "seed=0,1", "--workers", "0", "--quiet"]
    both = [gated_run(tmp_path, 2, *args), gated_run(tmp_path, 2, *args)]
    try:
        deadline = time.monotonic() + 240
        while all(c.proc.poll() is None for c in both) and time.monotonic() < deadline:
            time.sleep(0.05)
        [refused] = [c for c in both if c.proc.poll() is not None]
        [running] = [c for c in both if c is not refused]
        assert refused.finish() == 2, refused.text()
        said = refused.message()
        assert f"{out} is being written by another flnet sweep (pid {running.proc.pid})" in said
        running.wait_for("at the gate")
        running.open_gate()
        assert running.finish() == 0, running.text()
    finally:
        for child in both:
            if child.proc.poll() is None:
                child.proc.kill()
    table = pd.read_csv(out / "points.csv")
    assert table.status.tolist() == ["completed", "completed"]
    assert output.lock_holder(out) is None  # released at exit


def _sigterm_once_checkpointed(path: Path, out: Path) -> str:
    """Run `flnet run path`, SIGTERM it once its first checkpoint is written, and return what
    it said, after checking that it exited 130 (interrupted)."""
    child = flnet_run(path, "--out", out, "--quiet")
    try:
        deadline = time.monotonic() + 600
        while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline:
            assert child.proc.poll() is None, child.text()
            time.sleep(0.02)
        child.proc.send_signal(signal.SIGTERM)
        assert child.finish(timeout_s=300) == 130, child.text()
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
    said = child.message()
    # the first line already says that a stream with no update to come stops at once
    assert "SIGTERM: stopping at the end of this round (a stream's next server update)" in said
    assert "or at once where none will come" in said
    return said


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedasync"])
def test_sigterm_to_an_idle_stream_stops_it_at_once_not_after_seven_days(tmp_path, algorithm):
    """Nobody is ever online (a trace whose one client never is): after step 0 the stream
    waits for clients, and no server update (its safe point) will come. SIGTERM used to print
    "stopping at the end of this round", go on waiting, and exit 2 after the 7-day give-up (a
    minute of wall time); it now stops at once: exit 130, summary interrupted, the checkpoint
    of step 0 kept and said to be."""
    never = tmp_path / "never.csv"
    never.write_text("client,online_from_s,online_until_s\n0,,\n")
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    scenario = {
        **SMALL,
        "algorithm": {"name": algorithm, "concurrency": 2, "local": SMALL["algorithm"]["local"]},
        "clients": {"count": 6, "availability": {"kind": "trace", "path": str(never)}},
    }
    path.write_text(yaml.safe_dump(scenario))
    said = _sigterm_once_checkpointed(path, out)  # in (or entering) its idle wait
    assert "stopped at once (nobody online and no work under way at" in said, said
    assert "the checkpoint of round 0 is kept" in said and "--resume" in said
    assert "7 simulated days" not in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds"] == 0


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedasync"])
def test_sigterm_to_a_stream_whose_works_all_fail_stops_it_not_at_the_give_up(tmp_path, algorithm):
    """Every work is dropped, so no server update (the stream's safe point) comes. Delta-SGD
    trains each work as it starts (its FLOPs are known only by training), 20 steps each, so
    the give-up after 1,000 failed works is far off. SIGTERM used to be honoured only there
    (exit 1, "no upload arrived in 1,000 works"); the stream now stops at a failure about a
    second after it: exit 130, summary interrupted, the checkpoint of step 0 kept and said."""
    path, out = tmp_path / "s.yaml", tmp_path / "out"
    local = {"steps": 20, "batch_size": 8, "lr": None, "optimizer": {"name": "delta_sgd"}}
    scenario = {
        **SMALL,
        "data": {"dataset": "synthetic"},
        "model": {"kind": "logistic"},
        "algorithm": {"name": algorithm, "concurrency": 2, "local": local},
        "clients": {"count": 6, "dropout_probability": 0.999999},
    }
    path.write_text(yaml.safe_dump(scenario))
    said = _sigterm_once_checkpointed(path, out)  # works failing, one after another
    assert "stopped at once (no server update to stop at:" in said, said
    assert "works in a row failed, the last at" in said
    assert "the checkpoint of round 0 is kept" in said and "--resume" in said
    assert "no upload arrived" not in said
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds"] == 0
    assert summary["stop_reason"] is None  # stopped at once, not at a safe point
    dropped = pd.read_parquet(out / "ledger.parquet").query("outcome == 'dropped'")
    assert 0 < len(dropped) < 1_000  # the failed works so far are charged (one row each)


@pytest.mark.parametrize(
    "algorithm",
    [{"name": "fedavg"}, {"name": "fedbuff", "concurrency": 3, "buffer_size": 2, "cohort": None}],
    ids=["fedavg", "fedbuff"],
)
def test_a_time_budget_lets_the_round_that_reaches_it_finish(scenario, algorithm):
    """As README says: the run stops at the end of the round (server update) that reaches
    run.time_budget_s; that round is not cut at the budget. A budget halfway through round 4
    ends the run at round 4's end, with the records and ledger of the run without a budget."""
    algo = {**algorithm}
    if algo.pop("cohort", 0) is None:
        algo["local"] = {"steps": 2, "batch_size": 8, "lr": 0.05}
    full = run(scenario(algorithm=algo, run={"rounds": 6}), write=False)
    t3, t4 = full.records.sim_time_s.iloc[3], full.records.sim_time_s.iloc[4]
    budget_s = (t3 + t4) / 2
    cut = run(scenario(algorithm=algo, run={"rounds": 6, "time_budget_s": budget_s}), write=False)
    assert cut.summary["stop_reason"] == "time_budget"
    assert cut.records["round"].tolist() == [0, 1, 2, 3, 4]
    assert cut.summary["sim_time_s"] == t4 > budget_s
    assert cut.records.equals(full.records.iloc[:5])
    before = full.ledger[full.ledger.end_s <= t4].reset_index(drop=True)
    assert cut.ledger.equals(before)
