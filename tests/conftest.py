import os
import signal

import pytest
import torch
from hypothesis import settings

from flnet.scenario import load_scenario, merge

torch.set_num_threads(1)

# The device the tests' scenarios (BASE, SMALL) train on: FLNET_TEST_DEVICE=cuda runs them on the
# GPU (benchmarks/gpu_check.sh does); tests that name a device themselves keep theirs.
TEST_DEVICE = os.environ.get("FLNET_TEST_DEVICE", "cpu")

# A shell without job control starts background jobs with SIGINT ignored, and the processes the
# tests start would inherit that (Python then raises no KeyboardInterrupt): the signal tests need
# Ctrl-C to act as it does in a terminal, however pytest itself was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

BASE = {
    "name": "test",
    "seed": 0,
    "device": TEST_DEVICE,
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 5},
        "local": {"steps": 2, "batch_size": 8, "lr": 0.05},
    },
    "clients": {"count": 10},
    "run": {"rounds": 3},
}


@pytest.fixture
def scenario(tmp_path):
    """scenario(**sections) -> a validated small scenario writing under tmp_path."""

    def make(**sections):
        data = merge(BASE, {"output": {"dir": str(tmp_path / "out")}})
        return load_scenario(data=merge(data, sections))

    return make


# A quickstart small enough for tests that read results back (plots, the report).
SMALL = [
    "run.rounds=4",
    "run.eval_every=1",
    "clients.count=10",
    "algorithm.cohort.clients_per_round=3",
    f"device={TEST_DEVICE}",
]


def small_base(*extra):
    """The small quickstart (with `extra` overrides), resolved: a sweep's base."""
    import flnet

    return flnet.load_scenario("scenarios/quickstart.yaml", [*SMALL, *extra]).model_dump(
        mode="json"
    )


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A finished small quickstart run's folder."""
    import flnet

    out = tmp_path_factory.mktemp("run") / "quickstart"
    flnet.run("scenarios/quickstart.yaml", overrides=[*SMALL, f"output.dir={out}"])
    return out


@pytest.fixture(scope="module")
def seed_sweep_dir(tmp_path_factory):
    """Four runs of the small quickstart: two taus, two seeds each."""
    import flnet

    out = tmp_path_factory.mktemp("seeds")
    flnet.sweep(small_base(), {"algorithm.local.steps": [1, 4], "seed": [0, 1]}, out_dir=out)
    return out


# Hypothesis: CI runs a fixed (derandomized) set of examples so it cannot flake;
# FLNET_FUZZ_SCALE=30 searches thirty times as many fresh random examples when hunting bugs.
FUZZ_SCALE = int(os.environ.get("FLNET_FUZZ_SCALE", "1"))
settings.register_profile("flnet", derandomize=FUZZ_SCALE == 1)
settings.load_profile("flnet")


@pytest.fixture(autouse=True, scope="session")
def _cache_in_a_temporary_folder(tmp_path_factory):
    """No test writes to the user's cache folder (~/.cache/flnet): the suite, and every
    subprocess it starts, uses a temporary one."""
    os.environ["FLNET_CACHE_DIR"] = str(tmp_path_factory.mktemp("flnet-cache"))
    yield
