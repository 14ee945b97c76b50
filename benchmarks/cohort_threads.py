"""A cohort's local training on one thread, on torch's intra-op threads, and split over
threads (`cohort.Trainer.threads`): wall seconds, median [range] of interleaved repeats, and
whether each variant's parameters equal one thread's bit for bit.

    .venv/bin/python benchmarks/cohort_threads.py [--reps 7] [--threads 2] [--clients 50]

Workloads: C1's cohort (`cnn_mcmahan` on 3x32x32, 2.16M parameters, 50 clients (--clients) x
5 steps of batch 10: one epoch of 50 images) and W1's (the MLP 64-64-10 on digits, 100 clients
x 10 steps of batch 32; to split it, the trainer is made to take 50 clients a call)."""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from flnet.learn import cohort, models, optim


def c1_cohort(clients: int):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(10_000, 3, 32, 32, generator=g), torch.randint(0, 10, (10_000,), generator=g)
    torch.manual_seed(0)
    model = models.Model(models.cnn_mcmahan((3, 32, 32), 10), (3, 32, 32))
    rows = torch.randint(0, 10_000, (clients, 5, 10), generator=g)
    return cohort.Trainer(model, x, y), model.init_params().expand(clients, -1), rows, 0.1


def w1_cohort():
    from flnet.learn import data as data_mod
    from flnet.scenario import DataConfig, MlpConfig

    cpu = torch.device("cpu")
    digits = data_mod.load(DataConfig(), 100, seed=0, device=cpu)
    mlp = models.build(MlpConfig(hidden=[64]), digits.input_shape, 10, seed=0, device=cpu)
    rows = data_mod.minibatches(digits, torch.arange(100).numpy(), 1, [10] * 100, 32, seed=0)
    return (
        cohort.Trainer(mlp, digits.x_train, digits.y_train),
        mlp.init_params().expand(100, -1),
        rows,
        0.05,
    )


def variants(make, threads: int, split_calls: int | None, intra_op: bool = True):
    """label -> a function training the cohort once and returning its parameters."""
    trainer, params, rows, lr = make()
    steps = torch.full((rows.shape[0],), rows.shape[1])
    if split_calls is not None:  # calls of fewer clients than the cohort, to split
        trainer.clients_per_call = lambda c, *args, **kwargs: min(c, split_calls)  # type: ignore

    def run(cohort_threads: int, intra_op: int):
        def train():
            torch.set_num_threads(intra_op)
            trainer.threads = cohort_threads
            try:
                return trainer.train(params, rows, steps, optim.sgd(lr)).params
            finally:
                torch.set_num_threads(1)
                trainer.threads = 1

        return train

    return {
        "1 thread": run(1, 1),
        **({f"torch intra-op threads: {threads}": run(1, threads)} if intra_op else {}),
        f"cohort split over {threads} threads": run(threads, 1),
    }


def measure(name: str, runs: dict, reps: int) -> None:
    reference = next(iter(runs.values()))()
    same = {label: torch.equal(train(), reference) for label, train in runs.items()}
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(reps):
        for label, train in runs.items():
            start = time.perf_counter()
            train()
            times[label].append(time.perf_counter() - start)
    one = statistics.median(times["1 thread"])
    print(f"{name} (load average {os.getloadavg()[0]:.1f} after)")
    for label, t in times.items():
        med = statistics.median(t)
        print(
            f"  {label:38} {med:7.3f} s [{min(t):.3f}-{max(t):.3f}]  {one / med:4.2f}x  "
            f"{'bit-identical to 1 thread' if same[label] else 'DIFFERS from 1 thread'}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--only", choices=("c1", "w1"))
    p.add_argument("--clients", type=int, default=50, help="C1's cohort size (default 50)")
    p.add_argument(
        "--no-intra-op",
        action="store_true",
        help="leave out torch's intra-op threads (on a loaded machine, by far the slowest)",
    )
    args = p.parse_args()
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, {os.cpu_count()} cores; wall s, median [range] of "
        f"{args.reps} interleaved repeats"
    )
    if args.only != "w1":
        measure(
            f"C1's cohort: cnn_mcmahan 3x32x32, {args.clients} clients x 5 steps of batch 10",
            variants(lambda: c1_cohort(args.clients), args.threads, None, not args.no_intra_op),
            args.reps,
        )
    if args.only != "c1":
        measure(
            "W1's cohort: MLP 64-64-10, 100 clients x 10 steps of batch 32 (50 a call)",
            variants(w1_cohort, args.threads, 50, not args.no_intra_op),
            args.reps,
        )


if __name__ == "__main__":
    main()
