"""What the garbage collector costs a run: W1 (benchmarks/w1.yaml) with the run's freeze of what
is alive at its start (`flnet.runner.collector_sees_only_the_run`) and without it, each in a
fresh process with the benchmark's imports done first (as bench.py times it): the collections
of each generation during the run and the seconds they took. Prints; asserts nothing.

    .venv/bin/python benchmarks/gc_passes.py [--rounds 50] [--reps 2]

With PYTHONPATH=<another checkout> it measures that checkout's flnet (one without the freeze
runs the same way in both modes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

W1 = Path(__file__).resolve().parent / "w1.yaml"


def child(freeze: bool, rounds: int) -> None:
    import contextlib
    import gc
    import tempfile
    import time

    import pyarrow.pandas_compat
    import pyarrow.parquet  # noqa: F401
    import sklearn.datasets
    import sklearn.model_selection  # noqa: F401
    import torch
    import torch.utils.serialization

    import flnet.runner as runner

    torch.set_num_threads(1)
    if not freeze and hasattr(runner, "collector_sees_only_the_run"):
        runner.collector_sees_only_the_run = contextlib.nullcontext  # type: ignore[assignment]
    passes, spent, started = [0, 0, 0], [0.0], [0.0]

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            passes[info["generation"]] += 1
            spent[0] += time.perf_counter() - started[0]

    with tempfile.TemporaryDirectory() as out:
        gc.callbacks.append(watch)
        wall = time.perf_counter()
        runner.run(str(W1), [f"output.dir={out}", f"run.rounds={rounds}"], write=False)
        wall = time.perf_counter() - wall
        gc.callbacks.remove(watch)
    print(json.dumps({"wall_s": wall, "passes": passes, "gc_s": spent[0]}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--child", choices=("on", "off"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child == "on", args.rounds)
    print(f"W1, {args.rounds} rounds; collections during the run by generation (0, 1, 2)")
    for _ in range(args.reps):
        for mode in ("on", "off"):
            cmd = [sys.executable, __file__, "--child", mode, "--rounds", str(args.rounds)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            r = json.loads(out.splitlines()[-1])
            print(
                f"  freeze {mode:3}: {r['wall_s']:.2f} s wall, collections {r['passes']}, "
                f"{r['gc_s']:.3f} s collecting"
            )


if __name__ == "__main__":
    main()
