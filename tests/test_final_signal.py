"""Signals that reach a real `flnet run` while it writes its final checkpoint (after the
records, ledger and summary of the completed run): every claim of what it then prints is
checked against the disk, the exit status and what `--resume` does.

The moment is made exact without anything in flnet for tests: the child process wraps
`flnet.checkpoint.save` so that, for the final checkpoint only, it waits at a gate (a file the
test creates) at one of three points: before anything is written (`start`), with the new file
complete under its temporary name (`written`), and just after the rename, before the run notes
it, inside the block where SIGINT and SIGTERM are held back (`renamed`). A second thread that
does not block signals runs beside, as a progress bar's does in a terminal. The test sends real
signals from outside while the child waits there."""

import json
import os
import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml
from gated import REPO, Child

from flnet.runner import run

ENV = {**os.environ, "PYTHONPATH": str(REPO)}
ROUNDS = 7  # periodic checkpoints at rounds 0, 2, 4, 6; the final one at 7

CHILD = """
import contextlib, pathlib, sys, threading, time
import flnet.checkpoint as checkpoint
import flnet.output as output

phases, gates = sys.argv[1].split(","), pathlib.Path(sys.argv[2])
final = False
# a second thread that does not block signals, as the progress bar's refresh thread of a run
# in a terminal: the kernel may hand it a signal the main thread holds back
threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()


def gate(phase):
    if phase in phases:
        print(f"at the gate {phase}", file=sys.stderr, flush=True)
        while not (gates / phase).exists():
            time.sleep(0.01)


real_save, real_held = checkpoint.save, output.signals_held


def save(directory, ckpt, committed=None):
    global final
    if ckpt.stop_reason is None:  # a periodic checkpoint
        return real_save(directory, ckpt, committed)
    final = True
    gate("start")

    def noted():
        gate("renamed")
        if committed is not None:
            committed()

    return real_save(directory, ckpt, noted)


@contextlib.contextmanager
def held():
    if final:  # the final checkpoint's file is complete under its temporary name
        gate("written")
    with real_held():
        yield


checkpoint.save, output.signals_held = save, held
from flnet.cli import main
sys.exit(main(sys.argv[3:]))
"""

SCENARIO = {
    "name": "final",
    "seed": 5,
    "device": "cpu",
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 4},
        "local": {"steps": 2, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 8},
    "radio": {"rayleigh_fading": True},
    "run": {
        "rounds": ROUNDS,
        "eval_every": 2,
        "checkpoint_every": 2,
        "checkpoint_interval_s": None,
    },
}


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """The uninterrupted run: (scenario file, its output folder)."""
    tmp = tmp_path_factory.mktemp("whole")
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    run(path, overrides=[f"output.dir={tmp / 'out'}"])
    return path, tmp / "out"


def start(tmp_path, path, phases, out):
    gates = tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    child = Child(
        [sys.executable, "-c", CHILD, ",".join(phases), str(gates), "run", str(path)]
        + ["--out", str(out), "--quiet"],
        cwd=tmp_path,
    )
    return child, gates


def checkpoint_round(out):
    return torch.load(out / "checkpoint.pt", weights_only=True)["round"]


def assert_complete(out, whole_out):
    """The records, ledger and summary are the uninterrupted run's."""
    for table in ("records", "ledger"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(out / f"{table}.parquet"),
            pd.read_parquet(whole_out / f"{table}.parquet"),
            check_exact=True,
        )
    got, want = (json.loads((o / "summary.json").read_text()) for o in (out, whole_out))
    for s in (got, want):
        s.pop("wall_s"), s.pop("output_dir")
    assert got == want and got["status"] == "completed" and got["rounds"] == ROUNDS


def resume(message, tmp_path):
    command = message.split("continue with: ", 1)[1]
    words = command.split()
    assert words[:2] == ["flnet", "run"] and words[-1] == "--resume"
    return subprocess.run(
        [sys.executable, "-m", "flnet.cli", *words[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=ENV,
        timeout=300,
    )


@pytest.mark.parametrize(
    "phase, second",
    [("start", signal.SIGTERM), ("written", signal.SIGINT)],
)
def test_stopped_before_the_final_checkpoint_is_renamed(tmp_path, whole, phase, second):
    """The previous checkpoint (round 6) is kept, the results are complete, nothing half
    written is left, and --resume reruns round 7 to the same results."""
    path, whole_out = whole
    out = tmp_path / "out"
    child, gates = start(tmp_path, path, [phase], out)
    child.wait_for(f"at the gate {phase}")
    child.proc.send_signal(signal.SIGTERM)
    child.wait_for("the run has ended; writing its results and final checkpoint")
    child.proc.send_signal(second)
    assert child.finish() == 130, child.text()
    message = child.message()
    assert (
        "stopped while writing the final checkpoint: the run's records, ledger and summary "
        f"are complete in {out}; the checkpoint of round 6 is kept" in message
    ), message
    assert "continue with: flnet run" in message and "Traceback" not in message
    assert_complete(out, whole_out)
    assert checkpoint_round(out) == 6
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]

    resumed = resume(message, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "from round 6" in " ".join(resumed.stderr.split())
    assert_complete(out, whole_out)
    assert checkpoint_round(out) == ROUNDS


def test_stopped_just_after_the_final_checkpoint_is_renamed(tmp_path, whole):
    """A signal held back during the rename arrives after it: the final checkpoint is on disk
    and the message says so; --resume finds nothing left to run."""
    path, whole_out = whole
    out = tmp_path / "out"
    child, gates = start(tmp_path, path, ["start", "renamed"], out)
    child.wait_for("at the gate start")
    child.proc.send_signal(signal.SIGTERM)
    child.wait_for("the run has ended; writing its results and final checkpoint")
    (gates / "start").write_text("go")
    child.wait_for("at the gate renamed")
    child.proc.send_signal(signal.SIGINT)  # held back until the rename's block ends
    (gates / "renamed").write_text("go")
    assert child.finish() == 130, child.text()
    message = child.message()
    assert (
        "stopped while writing the final checkpoint: the run's records, ledger and summary "
        f"are complete in {out}; the checkpoint of round {ROUNDS} is kept" in message
    ), message
    assert_complete(out, whole_out)
    assert checkpoint_round(out) == ROUNDS
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]

    resumed = resume(message, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"from round {ROUNDS}" in " ".join(resumed.stderr.split())
    assert_complete(out, whole_out)


def test_one_signal_during_the_final_checkpoint_lets_it_finish(tmp_path, whole):
    path, whole_out = whole
    out = tmp_path / "out"
    child, gates = start(tmp_path, path, ["written"], out)
    child.wait_for("at the gate written")
    child.proc.send_signal(signal.SIGTERM)
    child.wait_for("the run has ended; writing its results and final checkpoint")
    (gates / "written").write_text("go")
    assert child.finish() == 0, child.text()
    assert_complete(out, whole_out)
    assert checkpoint_round(out) == ROUNDS


def test_stopped_at_the_final_checkpoint_of_a_run_without_checkpoints(tmp_path, whole):
    """No periodic checkpoint: none is kept, the message says --resume cannot continue, and
    --resume is refused; the results are still complete."""
    path, whole_out = whole
    nockpt = tmp_path / "s.yaml"
    nockpt.write_text(
        yaml.safe_dump({**SCENARIO, "run": {**SCENARIO["run"], "checkpoint_every": None}})
    )
    out = tmp_path / "out"
    child, gates = start(tmp_path, nockpt, ["start"], out)
    child.wait_for("at the gate start")
    child.proc.send_signal(signal.SIGINT)
    child.wait_for("the run has ended")
    child.proc.send_signal(signal.SIGINT)
    assert child.finish() == 130, child.text()
    message = child.message()
    assert (
        f"are complete in {out}; no checkpoint was written, so --resume cannot continue this run"
        in message
    ), message
    assert "continue with" not in message
    assert_complete(out, whole_out)
    assert not (out / "checkpoint.pt").exists()
    resumed = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "run", str(nockpt), "--out", str(out), "--resume"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert resumed.returncode == 2 and "nothing to resume" in resumed.stderr, resumed.stderr
