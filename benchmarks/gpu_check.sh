#!/usr/bin/env bash
# The GPU check (issue 47, BENCHMARKS.md G1), in under 10 minutes on a machine with CUDA:
#   1. the test suite with its scenarios on CUDA (FLNET_TEST_DEVICE=cuda, tests/conftest.py;
#      tests that name a device themselves keep theirs);
#   2. local training of the MLP (W1's cohort), the small CNN (G1's) and C1's cohort on the
#      GPU against its FP32 peak, measured by a large matmul with TF32 off, and W1 as a
#      scenario with device: cuda (benchmarks/bench.py --device cuda).
# It prints the figures; its exit status is the first failing step's.
#
#   benchmarks/gpu_check.sh                 # on CUDA; fails at once where there is none
#   benchmarks/gpu_check.sh --device cpu    # the same steps, small, on the CPU (a test runs it)
#
# PYTHON picks the interpreter (default .venv/bin/python, else python3); TESTS the test files
# (default: the whole suite on CUDA, two small files on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
device=cuda
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="${2:-}"; shift 2 ;;
        --device=*) device="${1#*=}"; shift ;;
        -h | --help) sed -n '2,15p' "$0" | cut -c3-; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$device" in
    cuda) tests="${TESTS:-tests}"; rows=abd; w1_reps=3; tests_limit_s=420 ;;
    cpu) tests="${TESTS:-tests/test_device.py tests/test_kernels_dense.py}"; rows=a; w1_reps=0
         tests_limit_s=300 ;;
    *) echo "gpu_check.sh: --device is cuda or cpu, not '$device'" >&2; exit 2 ;;
esac
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's flnet
export FLNET_GPU_CHECK=1  # tests/test_gpu_check.py does not run this script again from within it
if [ "$device" = cuda ] && ! "$PYTHON" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
    echo "gpu_check.sh: no CUDA device here (torch.cuda.is_available() is False); --device cpu runs the CPU version" >&2
    exit 1
fi

echo "== tests with their scenarios on $device: $tests"
# shellcheck disable=SC2086  # $tests: file names split on spaces
FLNET_TEST_DEVICE="$device" timeout "$tests_limit_s" "$PYTHON" -m pytest -p no:cacheprovider $tests

echo "== local training and W1 on $device (benchmarks/bench.py --device $device)"
"$PYTHON" benchmarks/bench.py --device "$device" --rows "$rows" --reps "$w1_reps" \
    $([ "$device" = cpu ] && echo --quick)
echo "== gpu_check.sh --device $device: done in ${SECONDS} s"
