"""Wall time of `flnet --help`, `flnet --version` and `flnet schema`, each in fresh processes
(median and range of N runs; CPU seconds too, which a busy machine inflates less), its exit
status, and whether torch was imported. Run it from outside the repository with PYTHONPATH
set to compare two checkouts (`python -m` puts the working directory first). Prints figures;
asserts nothing.

    .venv/bin/python benchmarks/cli_startup.py [-n 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

COMMANDS = (["--help"], ["--version"], ["schema", "-o", os.devnull])
PROBE = (
    "import sys, runpy\nsys.argv = ['flnet', *sys.argv[1:]]\ntry:\n"
    "    runpy.run_module('flnet.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
    "print('torch' in sys.modules, file=sys.stderr)"
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("-n", type=int, default=7)
    n = p.parse_args().n
    with tempfile.TemporaryDirectory():
        for argv in COMMANDS:
            walls, cpus, code = [], [], 0
            for _ in range(n):
                start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
                code = subprocess.run(
                    [sys.executable, "-m", "flnet.cli", *argv], capture_output=True
                ).returncode
                walls.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            probe = subprocess.run(
                [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True
            )
            torch = probe.stderr.strip().splitlines()[-1]
            print(
                f"flnet {argv[0]:10s} wall median {statistics.median(walls):.3f} s (range "
                f"{min(walls):.3f}-{max(walls):.3f}), CPU median {statistics.median(cpus):.3f} "
                f"s, {n} runs, exit {code}; torch imported: {torch}"
            )


if __name__ == "__main__":
    main()
