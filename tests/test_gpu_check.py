"""benchmarks/gpu_check.sh: its small CPU version runs (tests, then local training against the
peak), its CUDA version runs where there is CUDA and refuses where there is none."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
pytestmark = pytest.mark.skipif(
    bool(os.environ.get("FLNET_GPU_CHECK")), reason="run by gpu_check.sh itself"
)


def gpu_check(*args: str, tests: str = "tests/test_device.py") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": sys.executable, "TESTS": tests}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd="/"
    )


def test_cpu_version_runs_the_tests_and_the_training_row():
    done = gpu_check("--device", "cpu")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "tests with their scenarios on cpu: tests/test_device.py" in out
    assert "2 passed" in out
    assert "FP32 matmul peak, TF32 off:" in out
    assert "(a) MLP 64-64-10" in out and "% of peak" in out
    assert "W1 (" not in out  # the CPU version leaves W1 to bench.py --w1


def test_a_failing_test_stops_the_check():
    done = gpu_check("--device", "cpu", tests="tests/no_such_file.py")
    assert done.returncode != 0 and "local training" not in done.stdout


def test_unknown_arguments_are_refused():
    assert gpu_check("--device", "tpu").returncode == 2
    assert gpu_check("--fast").returncode == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="there is CUDA here")
def test_cuda_version_refuses_without_cuda():
    done = gpu_check()
    assert done.returncode == 1 and "no CUDA device here" in done.stderr


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA here")
def test_cuda_version_runs_on_the_gpu():
    done = gpu_check(tests="tests/test_kernels_conv.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "(d) C1's cohort" in done.stdout and "W1 (benchmarks/w1.yaml, device=cuda)" in done.stdout
    )
