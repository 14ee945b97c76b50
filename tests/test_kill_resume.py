"""`kill -TERM` in the middle of a real `flnet run` of a gossip (D-PSGD) and an asynchronous
(FedBuff) run with periodic checkpoints, then `--resume`: it continues from past a quarter of
the run and ends with the same records and ledger as a run never interrupted."""

import signal
import subprocess
import sys

import pytest
import yaml
from harness import assert_same_tables, checkpoint_round, signal_once_checkpointed

from flnet.runner import run

ROUNDS = 120
SCENARIOS = {
    "dpsgd": {
        "algorithm": {
            "name": "dpsgd",
            "topology": {"kind": "torus"},
            "local": {"steps": 1, "batch_size": 8, "lr": 0.1},
        },
        "clients": {"count": 9},
    },
    "fedbuff": {
        "algorithm": {
            "name": "fedbuff",
            "concurrency": 4,
            "buffer_size": 2,
            "local": {"steps": 2, "batch_size": 8, "lr": 0.05},
        },
        "clients": {"count": 10, "cpu_hz": {"kind": "lognormal", "median": 2e8, "sigma": 0.5}},
    },
}


def write_scenario(tmp_path, name):
    sc = {
        "name": name,
        "seed": 3,
        "device": "cpu",
        "radio": {"rayleigh_fading": True},
        **SCENARIOS[name],
        "run": {
            "rounds": ROUNDS,
            "eval_every": 10,
            "checkpoint_every": 4,
            "checkpoint_interval_s": None,
        },
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


@pytest.mark.parametrize("name", ["dpsgd", "fedbuff"])
def test_sigterm_then_resume_gives_the_uninterrupted_results(tmp_path, name):
    path, out = write_scenario(tmp_path, name), tmp_path / "out"
    cli = [sys.executable, "-m", "flnet.cli", "run", str(path), "--quiet"]
    status = signal_once_checkpointed(cli, out, ROUNDS // 4, signal.SIGTERM, within_s=600)
    assert status == 130, "the run ended before it could be interrupted"
    stopped_at = checkpoint_round(out)
    assert ROUNDS // 4 <= stopped_at < ROUNDS

    resumed = subprocess.run([*cli, "--resume"], capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    said = " ".join(resumed.stderr.split())
    if " from round " in said:  # the CLI names the step it resumes from (hardening's message)
        assert int(said.split(" from round ")[1].split()[0]) == stopped_at
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    assert_same_tables(out, tmp_path / "whole")
