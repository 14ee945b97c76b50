"""D-PSGD at scale: wall seconds per gossip iteration and peak RSS of a ring of n nodes.

    PYTHONPATH=. .venv/bin/python benchmarks/gossip_scale.py N [ROUNDS]

scenarios/dpsgd.yaml with a tiny model (logistic regression on digits, 650 parameters), one
step of batch 8, clients sharing rows, evaluation only at the start and the end. Prints one
JSON line: the median wall seconds between consecutive iterations (the first two dropped:
warm-up) and the process's peak resident set size (imports and data included).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from typing import Any

from bench import peak_rss_mb  # this script's folder is on sys.path

import flnet


class Clock:
    """Observer: the wall time at every step."""

    def __init__(self) -> None:
        self.times_s: list[float] = []

    def on_start(self, world: Any) -> None:
        pass

    def on_progress(self, world: Any, progress: Any, stopping: str | None) -> None:
        self.times_s.append(time.perf_counter())

    def on_end(self, world: Any, reason: str) -> None:
        pass


def main() -> None:
    n = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        flnet.run(
            "scenarios/dpsgd.yaml",
            overrides=[
                f"clients.count={n}",
                f"run.rounds={rounds}",
                f"run.eval_every={rounds}",
                "model.kind=logistic",
                "algorithm.local.batch_size=8",
                "data.share_rows=true",
                f"output.dir={out}",
            ],
            observers=[clock],
        )
    gaps = [b - a for a, b in zip(clock.times_s[2:], clock.times_s[3:])]
    peak_mib = peak_rss_mb()  # MiB (bench.py prints them as MB)
    print(
        json.dumps(
            {
                "n": n,
                "rounds": rounds,
                "s_per_iter": statistics.median(gaps),
                "peak_rss_mib": peak_mib,
            }
        )
    )


if __name__ == "__main__":
    main()
