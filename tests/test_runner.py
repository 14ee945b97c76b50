"""The runner's lifecycle: interruption by real signals, failures part-way, a failing final
write; what it says was kept is what is on disk."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys

import pytest
import yaml
from gated import REPO, flnet_run, gated_run
from harness import RESUMABLE, assert_same_tables, checkpoint_round, tables

from flnet.errors import FlnetError, ScenarioError
from flnet.runner import run

ENV = {**os.environ, "PYTHONPATH": str(REPO)}

SCENARIO = {
    "name": "lifecycle",
    **RESUMABLE,
    "run": {"rounds": 200, "eval_every": 3, "checkpoint_interval_s": None},
}


def write_scenario(tmp_path, **run_over):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "run": {**SCENARIO["run"], **run_over}}))
    return path


def resume_argv(message):
    """The printed `continue with: flnet run ...` command, runnable here."""
    command = message.split("continue with: ", 1)[1]
    words = shlex.split(command)
    assert words[:2] == ["flnet", "run"] and words[-1] == "--resume"
    return [sys.executable, "-m", "flnet.cli", *words[1:]]


def test_sigterm_half_way_stops_at_a_round_and_resumes_to_the_same_results(tmp_path):
    """Periodic checkpoints off: only the stop itself can keep the work done."""
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    child = flnet_run(path, "--out", out, cwd=tmp_path)
    child.wait_for(
        lambda line: line.startswith("round ") and int(line.split()[1].split("/")[0]) >= 100
    )
    child.proc.send_signal(signal.SIGTERM)
    assert child.finish() == 130, child.text()
    message = child.message()
    stopped = checkpoint_round(out)
    assert f"interrupted (SIGTERM) at round {stopped}: the checkpoint of that round" in message
    assert 100 <= stopped < 200
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_reason"] == "interrupted"
    records, ledger = tables(out)  # readable outside the checkpoint, up to the stop
    assert records["round"].max() <= stopped and ledger["round"].max() == stopped

    resumed = subprocess.run(
        resume_argv(message), capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    printed = int(" ".join(resumed.stderr.split()).split(" from round ")[1].split()[0])
    assert printed == stopped and printed > 200 / 4
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    assert_same_tables(out, tmp_path / "whole")
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_a_second_ctrl_c_stops_at_once_keeping_the_last_checkpoint(tmp_path):
    """The run waits at a gate at the end of round 4 (its checkpoint written): the first
    SIGINT asks for a stop at the end of round 5, the second ends the run at once, inside
    round 4's gate; the checkpoint of round 4 is what is kept, and said to be."""
    path = write_scenario(tmp_path, rounds=8, checkpoint_every=1)
    out = tmp_path / "out"
    child = gated_run(tmp_path, 4, "run", path, "--out", out, "--quiet")
    child.wait_for("at the gate")
    child.proc.send_signal(signal.SIGINT)
    child.wait_for("stopping at the end of this round")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130, child.text()
    message = child.message()
    assert "stopped at once: the records, ledger and summary so far are in" in message
    assert "the checkpoint of round 4 is kept" in message
    assert checkpoint_round(out) == 4
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_reason"] is None
    assert tables(out)[1]["round"].max() == 4  # round 5 never ran

    resumed = subprocess.run(
        resume_argv(message), capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "from round 4" in " ".join(resumed.stderr.split())
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    assert_same_tables(out, tmp_path / "whole")


def test_the_continue_command_keeps_the_rounds_option(tmp_path):
    """`--rounds 8` over a file's 3: the printed command carries it, so the resume runs to 8
    (without it, the file's 3 rounds are below the checkpoint's 4 and the resume is refused)."""
    path = write_scenario(tmp_path, rounds=3, checkpoint_every=1)
    out = tmp_path / "out"
    child = gated_run(tmp_path, 4, "run", path, "--rounds", "8", "--out", out, "--quiet")
    child.wait_for("at the gate")
    child.proc.send_signal(signal.SIGINT)
    child.wait_for("stopping at the end of this round")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130, child.text()
    argv = resume_argv(child.message())
    assert argv[argv.index("--rounds") + 1] == "8"
    resumed = subprocess.run(
        argv, capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}", "run.rounds=8"])
    assert_same_tables(out, tmp_path / "whole")


def test_a_second_ctrl_c_before_any_checkpoint_says_none_was_kept(tmp_path):
    path = write_scenario(tmp_path, rounds=8)
    out = tmp_path / "out"
    child = gated_run(tmp_path, 2, "run", path, "--out", out, "--quiet")
    child.wait_for("at the gate")
    child.proc.send_signal(signal.SIGTERM)
    child.wait_for("stopping at the end of this round")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130, child.text()
    message = child.message()
    assert "no checkpoint was written, so --resume cannot continue this run" in message
    assert "continue with" not in message
    assert not (out / "checkpoint.pt").exists()
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"


def test_a_failing_final_checkpoint_keeps_the_completed_results(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) that the tables fit under and the
    checkpoint (its ledger journal or the checkpoint file) does not: the completed run's
    records, ledger and summary are all written before the checkpoint is tried, and the
    message says which file failed, why, and what was kept."""
    path = write_scenario(tmp_path, rounds=30)
    whole = tmp_path / "whole"
    run(path, overrides=[f"output.dir={whole}"])
    checkpoint_files = ("checkpoint.pt", "ledger-journal.csv")
    sizes = {p.name: p.stat().st_size for p in whole.iterdir() if not p.name.startswith(".")}
    limit = max(v for k, v in sizes.items() if k not in checkpoint_files) + 1024
    assert limit < max(sizes[k] for k in checkpoint_files), sizes  # the test's premise
    child = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
from flnet.cli import main
sys.exit(main(sys.argv[1:]))
"""
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-c", child, "run", str(path), "--quiet", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    message = " ".join(result.stderr.split())
    assert result.returncode == 4, result.stderr
    assert "Traceback" not in result.stderr
    assert re.search(
        f"could not write {out}/(checkpoint.pt|ledger-journal.csv): File too large", message
    ), message
    assert f"Written in {out}: records.parquet, ledger.parquet, summary.json;" in message
    assert "no checkpoint was written, so --resume cannot continue this run" in message
    assert_same_tables(out, whole)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 30
    assert not (out / "checkpoint.pt").exists()
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


class Boom:
    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        if progress.step == 7:
            raise RuntimeError("a bug in round 7")

    def on_end(self, world, reason):
        pass


def test_a_crash_leaves_status_failed_with_the_reason_and_the_results_so_far(tmp_path):
    path = write_scenario(tmp_path, rounds=20, checkpoint_every=5)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="a bug in round 7"):
        run(path, overrides=[f"output.dir={out}"], observers=(Boom(),))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed"
    assert summary["error"] == "RuntimeError: a bug in round 7"
    records, ledger = tables(out)
    assert records["round"].max() == 6 and ledger["round"].max() == 7
    assert checkpoint_round(out) == 5
    resumed = run(path, overrides=[f"output.dir={out}"], resume=True)  # from round 5
    assert resumed.summary["status"] == "completed" and resumed.summary["rounds"] == 20


def test_resume_below_the_checkpoints_round_is_refused(tmp_path):
    path = write_scenario(tmp_path, rounds=6)
    run(path, overrides=[f"output.dir={tmp_path / 'out'}"])
    with pytest.raises(
        ScenarioError, match="run.rounds: 4 rounds is below the checkpoint's round 6"
    ):
        run(path, overrides=[f"output.dir={tmp_path / 'out'}", "run.rounds=4"], resume=True)
    again = run(path, overrides=[f"output.dir={tmp_path / 'out'}"], resume=True)
    assert again.summary["rounds"] == 6  # equal to the checkpoint's round: nothing to do


def test_results_are_written_before_the_final_checkpoint(tmp_path, monkeypatch):
    """A full disk at the final checkpoint (ENOSPC) leaves the tables, and says so."""
    import flnet.checkpoint

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(flnet.checkpoint, "save", fail)
    path = write_scenario(tmp_path, rounds=4)
    with pytest.raises(
        FlnetError,
        match="checkpoint.pt: No space left on device.*Written in "
        ".*records.parquet, ledger.parquet, summary.json",
    ):
        run(path, overrides=[f"output.dir={tmp_path / 'out'}"])
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["rounds"] == 4


def test_an_interrupt_during_the_final_checkpoint_keeps_the_completed_results(
    tmp_path, monkeypatch
):
    """Ctrl-C after the tables and summary are written: they stay the final ones (a sweep counts
    the point as finished), and the message says the checkpoint was not written."""
    import flnet.checkpoint
    from flnet.runner import Interrupted

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(flnet.checkpoint, "save", interrupt)
    path = write_scenario(tmp_path, rounds=4)
    with pytest.raises(Interrupted, match="final checkpoint: the run's records, ledger and") as e:
        run(path, overrides=[f"output.dir={tmp_path / 'out'}"])
    assert "no checkpoint was written" in str(e.value) and not e.value.resumable
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds"] == 4
    assert (tmp_path / "out" / "ledger.parquet").exists()


def test_the_collector_settings_of_a_run_are_undone_after_it_even_when_it_raises():
    import gc

    from flnet.runner import YOUNG_COLLECTION_ALLOCATIONS, collector_sees_only_the_run

    before = gc.get_threshold()
    assert not gc.get_freeze_count()
    with pytest.raises(KeyError), collector_sees_only_the_run():
        assert gc.get_freeze_count() > 0  # what was alive before is out of the collector's sight
        assert gc.get_threshold() == (max(before[0], YOUNG_COLLECTION_ALLOCATIONS), *before[1:])
        raise KeyError
    assert gc.get_threshold() == before and not gc.get_freeze_count()
    gc.disable()
    try:  # a caller that manages the collector itself keeps its settings
        with collector_sees_only_the_run():
            assert gc.get_threshold() == before and not gc.get_freeze_count()
    finally:
        gc.enable()


def test_the_ledger_is_made_when_first_read_and_travels_made(tmp_path):
    """A run returns its ledger unmade; read, it holds every row of the run (their joules add
    up to the summary's), and a pickled Result (a sweep worker's) carries it made."""
    import math
    import pickle

    import pandas as pd

    res = run(write_scenario(tmp_path, rounds=3), write=False)
    assert callable(res.ledger_table)
    sent = pickle.loads(pickle.dumps(res))
    assert isinstance(sent.ledger_table, pd.DataFrame)
    ledger = res.ledger
    assert isinstance(res.ledger_table, pd.DataFrame) and res.ledger is ledger
    pd.testing.assert_frame_equal(sent.ledger, ledger)
    assert math.fsum(ledger.energy_j) == res.summary["energy_j"]
    assert (ledger["round"].max(), len(ledger) > 0) == (3, True)
