"""Helpers for tests that run flnet: observers that keep or stop a run, the check that a stopped
run resumes exactly, the CLI in a fresh process, and what a run folder holds."""

import os
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from gated import REPO

# The tests that start a Ray run one after another on one pytest-xdist worker (`make test` runs
# the suite on every core): a local Ray on each worker at once would share /tmp/ray and its
# session's ports, and crowd out the runs beside it.
ON_RAY = pytest.mark.xdist_group("ray")

# FedAvg with a deadline, Dirichlet data, uneven CPUs and fading: every round differs, so a
# resumed run that took another path shows it (add "name" and "run")
RESUMABLE = {
    "seed": 3,
    "device": "cpu",
    "data": {"partition": {"kind": "dirichlet", "alpha": 0.5}},
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 5, "deadline_s": 0.5},
        "local": {"steps": 2, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 10, "cpu_hz": {"kind": "lognormal", "median": 2e8, "sigma": 0.5}},
    "radio": {"rayleigh_fading": True},
}


class Keep:
    """Observer: keeps every step's `Progress` in `seen`; ends the run after step `steps`."""

    def __init__(self, steps):
        self.steps, self.seen = steps, []

    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        self.seen.append(progress)
        return "rounds" if progress.step >= self.steps else None

    def on_end(self, world, reason):
        pass


def run_protocol(world, steps, protocol):
    """Runs `protocol` (an algorithm's generator, made for `world`) on its own, without the
    runner, until it has published step `steps`; returns every step's `Progress`."""
    keep = Keep(steps)
    world.observers = [keep]
    world.env.run(until=world.env.process(protocol))
    return keep.seen


class StopAt:
    """Observer: asks the run to stop during step `step` (what the signal handler does); it
    stops at the next safe point, with a checkpoint."""

    def __init__(self, step):
        self.step = step

    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        if progress.step == self.step:
            world.request_stop()

    def on_end(self, world, reason):
        pass


def assert_resumes_exactly(make, stop):
    """`make(name)`: a scenario writing to a folder of that name. Runs "whole" through, then
    "cut" with the observer `stop` (which calls `request_stop`) and resumes it: the resumed
    run's records and ledger equal the whole run's to the bit. Returns (whole, cut)."""
    from flnet.runner import run
    from flnet.sim.world import INTERRUPTED

    whole = run(make("whole"))
    cut_scenario = make("cut")
    cut = run(cut_scenario, observers=[stop])
    assert cut.summary["stop_reason"] == INTERRUPTED
    assert cut.records["round"].max() < cut_scenario.run.rounds
    resumed = run(make("cut"), resume=True)
    pd.testing.assert_frame_equal(resumed.records, whole.records, check_exact=True)
    pd.testing.assert_frame_equal(resumed.ledger, whole.ledger, check_exact=True)
    return whole, cut


def flnet_cli(*args, cwd=None, timeout=600, **popen):
    """`python -m flnet.cli ARGS` in a fresh process, this checkout's flnet, output as text."""
    return subprocess.run(
        [sys.executable, "-m", "flnet.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=timeout,
        **popen,
    )


def signal_once_checkpointed(argv, out, at_round, sig, *, within_s):
    """Starts `argv` (a `flnet run` writing to `out`) and sends it `sig` once its checkpoint
    reaches `at_round` (or it ended, or `within_s` passed); returns its exit status."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + within_s
    while checkpoint_round(out) < at_round and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, sig)
    return proc.wait(timeout=300)


def checkpoint_round(out):
    """The round of the checkpoint in `out`; -1 while there is none (or half of one)."""
    try:
        return torch.load(out / "checkpoint.pt", weights_only=True)["round"]
    except Exception:
        return -1


def tables(out):
    """A run folder's records and ledger."""
    return pd.read_parquet(out / "records.parquet"), pd.read_parquet(out / "ledger.parquet")


def assert_same_tables(out, whole_out):
    """Two run folders hold the same records and ledger, to the bit."""
    for got, want in zip(tables(out), tables(whole_out)):
        pd.testing.assert_frame_equal(got, want, check_exact=True)


def sweep_on_ray(*args, **kwargs):
    """`flnet.sweeps.sweep` with backend="ray" on a local two-CPU Ray started for it and shut
    down after (the test skips itself where Ray is not installed)."""
    import ray

    from flnet.sweeps import sweep

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        return sweep(*args, backend="ray", **kwargs)
    finally:
        ray.shutdown()
