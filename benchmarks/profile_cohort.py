"""Where one cohort's local training spends its time: torch.profiler over one
`cohort.Trainer.train` call of a bench.py workload, on one torch thread, its kernels
grouped by input shape (the table the C1 notes quote).

    .venv/bin/python benchmarks/profile_cohort.py [--row d] [--top 25]

Rows as in bench.py's `workloads`: a (W1's MLP), b and c (CNNs), d (C1's cohort). The call
runs twice first (plans and buffers made), then once timed in CPU seconds, then profiled.
"""

from __future__ import annotations

import argparse
import time

import torch
from bench import workloads
from torch.profiler import ProfilerActivity, profile

from flnet.learn import optim


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--row", default="d", choices=list("abcd"), help="bench.py's workload")
    p.add_argument("--top", type=int, default=25, help="kernels shown, by self CPU time")
    p.add_argument("--lr", type=float, default=0.1, help="plain SGD's learning rate")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    name, trainer, params, rows = next(workloads("cpu", args.row))
    steps = torch.full((rows.shape[0],), rows.shape[1])

    def train() -> None:
        trainer.train(params, rows, steps, optim.sgd(args.lr))

    train()
    train()
    start = time.process_time()
    train()
    print(f"{name}: {time.process_time() - start:.2f} CPU-s a cohort (one thread)")
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train()
    table = prof.key_averages(group_by_input_shape=True)
    print(table.table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=30))


if __name__ == "__main__":
    main()
