"""What fsyncing a checkpoint costs: the quickstart with a checkpoint every round, each
checkpoint timed (journals, checkpoint.pt, renames), with the fsyncs on and with `os.fsync` made
a no-op, alternating, in this process. Prints the median ms per checkpoint and the run's wall
time for both. Asserts nothing.

    .venv/bin/python benchmarks/checkpoint_sync.py [--rounds 60] [--repeats 3] [--dir DIR]

The folder (default: a temporary one) decides the file system measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def one_run(rounds: int, out: Path, sync: bool) -> tuple[list[float], float]:
    from flnet import runner

    real_fsync, real_save = os.fsync, runner.Checkpointer.save_or_raise
    times: list[float] = []

    def timed(self: Any, *a: Any, **k: Any) -> None:
        t = time.perf_counter()
        real_save(self, *a, **k)
        times.append(time.perf_counter() - t)

    runner.Checkpointer.save_or_raise = timed  # type: ignore[method-assign]
    if not sync:
        os.fsync = lambda fd: None
    try:
        t = time.perf_counter()
        runner.run(
            HERE.parent / "scenarios" / "quickstart.yaml",
            [
                f"run.rounds={rounds}",
                "run.checkpoint_every=1",
                "run.checkpoint_interval_s=null",
                f"output.dir={out}",
            ],
            force=True,
        )
        return times, time.perf_counter() - t
    finally:
        os.fsync = real_fsync
        runner.Checkpointer.save_or_raise = real_save  # type: ignore[method-assign]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dir", help="where to write (default: a temporary folder)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        got: dict[bool, tuple[list[float], list[float]]] = {True: ([], []), False: ([], [])}
        one_run(3, Path(tmp) / "warm", True)  # imports, data set cache
        for _ in range(args.repeats):
            for sync in (True, False):
                times, wall = one_run(args.rounds, Path(tmp) / "out", sync)
                got[sync][0].extend(times)
                got[sync][1].append(wall)
    for sync in (True, False):
        times, walls = got[sync]
        print(
            f"fsync {'on ' if sync else 'off'}: {len(times)} checkpoints, median "
            f"{1e3 * statistics.median(times):.2f} ms each (max {1e3 * max(times):.1f}); run of "
            f"{args.rounds} rounds: median {statistics.median(walls):.2f} s wall"
        )


if __name__ == "__main__":
    main()
