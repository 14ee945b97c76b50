"""What a run or sweep says about how it ended is true (issue 41, class 6), each checked on a
real process: a run stopped by the file-size limit (exit 4) records `failed` and the error in
its summary, not `running`."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import yaml

from flnet import output

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
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
    proc = subprocess.run(
        [sys.executable, "-m", "flnet.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
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
