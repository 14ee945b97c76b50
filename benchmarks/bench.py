"""flnet's benchmark: how close local training runs to this machine's limit, and what the
simulation around it costs. One command; it prints throughput and ratios and asserts nothing.

    .venv/bin/python benchmarks/bench.py [--quick]        # or: make bench
    .venv/bin/python benchmarks/bench.py --w1 [--reps N]  # only W1 side by side
    .venv/bin/python benchmarks/bench.py --training       # only the local-training table
    .venv/bin/python benchmarks/bench.py --short-batch    # only epochs' short last batches
    .venv/bin/python benchmarks/bench.py --device cuda    # training and W1 on a GPU
    .venv/bin/python benchmarks/bench.py --streams        # FedBuff, FedAsync beside FedAvg

- the machine's single-thread float32 matmul peak (GFLOP/s);
- local training throughput, batched vs sequential path, in samples and GFLOP per CPU-second
  and % of that peak: (a) the W1 MLP on digits, 100 clients x 10 steps of batch 32 (also
  through the generic vmap + autograd engine); (b) a small CNN (the Delta-SGD paper's MNIST
  CNN, without dropout) on 28x28 inputs and (c) the CIFAR tutorial CNN on 3x32x32, 50 clients x
  10 steps of batch 32 each, through `conv.ConvStack` and the generic engine, against a plain
  per-client loop (nn.Module + torch.optim.SGD) and the "im2col ceiling" (the engine's GEMMs
  alone, same shapes, layouts and clients a call, on preallocated tensors), repeats of the
  rows interleaved;
- a shared band's cost per transfer with 10, 100 and 1000 transfers under way at once, kept as
  Python floats and as numpy arrays (`flnet.sim.channel.band` picks floats up to 128 users);
- W1 side by side (BENCHMARKS.md), each run a fresh process, 5 interleaved runs of each
  (imports excluded): flnet's scenario, Flower 1.41's simulation runtime (benchmarks/
  flower_w1.py, from the `bench` extra; skipped with a line saying how to install it when
  absent), a plain torch loop and a plain torch.func vmap (benchmarks/w1_reference.py); their
  medians, ranges and accuracy curves, the ratio of medians, and W1's split inside and
  outside cohort.Trainer.train;
- scenarios, each in a fresh process (imports excluded, as in BENCHMARKS.md): the
  quickstart's share of wall time spent outside local training (simulation, bookkeeping,
  evaluation, checkpoints, writing results; median and range of 7 runs), as `flnet run` runs
  it and with a checkpoint every 10 rounds; the peak memory of a 1000-client digits run;
  epoch mode with the papers' short last batch (`drop_last: false`) beside `drop_last: true`
  (benchmarks/fedprox_synthetic.yaml: wall seconds, medians of interleaved runs, and their
  ratio; target within 1.5x).
- asynchronous servers beside FedAvg (`--streams`, or in the full run): FedAvg, FedBuff and
  FedAsync on the same 300 clients replaying a week-long smartphone-like availability trace
  (`week_trace`), wall and CPU seconds per simulated hour and per client work, each a fresh
  process; each asynchronous server's ratio to FedAvg against the 1.5x target, and its local
  training's alone (a floor: its batches are the timeline's).

Training is timed in CPU seconds of this process on one torch thread, the best of a few
repeats, so the numbers hold on a shared, noisy machine; scenario times are wall seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent


def peak_rss_mb() -> float:
    """This process's peak resident set size in MiB (printed as MB): VmHWM, the high-water
    mark of its own memory image. Not getrusage's ru_maxrss: Linux carries that across exec,
    so a child started by a process of 2 GB reports 2 GB however little it uses itself. Where
    /proc is missing (not Linux), ru_maxrss all the same (bytes on macOS, KB elsewhere)."""
    try:
        with open("/proc/self/status") as status:
            kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return kb / 1024
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def cpu_seconds(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def matmul_product(n: int = 1024):
    """An n x n float32 matrix product to time, and its GFLOP."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    return (lambda: a @ b), 2 * n**3 / 1e9


def matmul_peak_gflops(reps: int) -> float:
    """Best single-thread GFLOP/s of the matrix product."""
    product, gflop = matmul_product()
    product()
    return gflop / min(cpu_seconds(product) for _ in range(reps))


def paper_cnn() -> nn.Module:
    """The MNIST CNN of the Delta-SGD paper's code, without its dropout layers."""
    return nn.Sequential(
        nn.Conv2d(1, 10, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(10, 20, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(320, 50),
        nn.ReLU(),
        nn.Linear(50, 10),
    )


def workloads(device: str = "cpu", rows: str = "abc"):
    """(name, trainer, start params [C, P], batches [C, T, B]) for (a), (b) and (c), or those
    of `rows` (d: C1's cohort, `cnn_mcmahan` on 3x32x32, 50 clients x 5 steps of batch 10),
    on `device`."""
    from flnet.learn import cohort, models
    from flnet.learn import data as data_mod
    from flnet.scenario import DataConfig, MlpConfig

    on = torch.device(device)
    if "a" in rows:
        digits = data_mod.load(DataConfig(), 100, seed=0, device=on)
        mlp = models.build(MlpConfig(hidden=[64]), digits.input_shape, 10, seed=0, device=on)
        clients = torch.arange(100).numpy()
        batches = data_mod.minibatches(digits, clients, 1, [10] * 100, 32, seed=0)
        yield (
            "(a) MLP 64-64-10, digits, 100 clients x 10 steps, batch 32",
            cohort.Trainer(mlp, digits.x_train, digits.y_train),
            mlp.init_params().expand(100, -1),
            batches.to(on),
        )
    for name, module, shape, (c, t, b) in (
        (
            "(b) CNN 2 conv + 2 fc, 28x28, 50 clients x 10 steps, batch 32",
            paper_cnn,
            (1, 28, 28),
            (50, 10, 32),
        ),
        (
            "(c) CIFAR CNN (cnn_tutorial), 3x32x32, 50 clients x 10 steps, batch 32",
            lambda: models.cnn_tutorial((3, 32, 32), 10),
            (3, 32, 32),
            (50, 10, 32),
        ),
        (
            "(d) C1's cohort: cnn_mcmahan, 3x32x32, 50 clients x 5 steps, batch 10",
            lambda: models.cnn_mcmahan((3, 32, 32), 10),
            (3, 32, 32),
            (50, 5, 10),
        ),
    ):
        if name[1] not in rows:
            continue
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(5000, *shape, generator=g), torch.randint(0, 10, (5000,), generator=g)
        torch.manual_seed(0)
        cnn = models.Model(module().to(on), shape)
        yield (
            name,
            cohort.Trainer(cnn, x.to(on), y.to(on)),
            cnn.init_params().expand(c, -1),
            torch.randint(0, 5000, (c, t, b), generator=g).to(on),
        )


def cohort_run(trainer, params: torch.Tensor, rows: torch.Tensor, **kwargs):
    """The cohort's local training (SGD, lr 0.05) with `Trainer.train`'s `kwargs`."""
    from flnet.learn import optim

    steps = torch.full((rows.shape[0],), rows.shape[1])
    return lambda: trainer.train(params, rows, steps, optim.sgd(0.05), **kwargs)


def plain_loop(trainer, params: torch.Tensor, rows: torch.Tensor, lr: float):
    """What a researcher writes without flnet: each client in turn, an `nn.Module` and
    `torch.optim.SGD`, the same minibatches (one thread, as everything here)."""
    import copy

    from torch.nn.utils import vector_to_parameters

    module = copy.deepcopy(trainer.model.module)
    x, y = trainer.x_data, trainer.y_data

    def train() -> None:
        for client in range(rows.shape[0]):
            vector_to_parameters(params[client], module.parameters())
            opt = torch.optim.SGD(module.parameters(), lr)
            for step in range(rows.shape[1]):
                batch = rows[client, step]
                loss = nn.functional.cross_entropy(module(x[batch]), y[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()

    return train


def im2col_ceiling(trainer, c: int, t: int, b: int, per_call: int):
    """The GEMMs of `ConvStack` alone, on preallocated tensors of its shapes and layouts for
    `per_call` clients a call (path auto's), as many calls as make `c` clients: per step the
    first layer's im2col products (forward; weight gradient with the bias's row of ones, over
    runs of `conv.COLUMNS_PER_PRODUCT` columns), each later convolution's row-shifted
    products (per kernel row: forward, weight gradient, input gradient) and the Linear
    layers' three."""
    from flnet.learn.kernels import conv

    def runs(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, ...]:
        return x.split(conv.COLUMNS_PER_PRODUCT, dim)

    def columns(rows: int, n: int) -> torch.Tensor:
        return torch.randn(per_call, rows, conv._row_stride(n))[:, :, :n]

    products = []
    for i, layer in enumerate(trainer.default_value_and_grad.layers):
        if isinstance(layer, conv._Conv):
            (kh, kw), out, bias = layer.kernel, layer.c_out, layer.bias is not None
            n = layer.out_hw[0] * layer.out_hw[1] * b
            if not i:
                k = layer.c_in * kh * kw + bias
                cols, w, z = (
                    columns(k, n),
                    torch.randn(per_call, out, k),
                    torch.randn(per_call, out, n),
                )
                dw = torch.empty(per_call, out, k)
                pairs = list(zip(runs(z, 2), [r.transpose(1, 2) for r in runs(cols, 2)]))
                products += [
                    lambda w=w, cols=cols, z=z: torch.bmm(w, cols, out=z),
                    lambda dw=dw, pairs=pairs: conv.accumulate(dw, pairs),
                ]
                continue
            k, row = layer.c_in * kw, layer.out_hw[1] * b
            length = (layer.in_hw[0] + 2 * layer.padding[0]) * row
            shifted, d_shifted = columns(k + bias, length), columns(k, length)
            w, z = torch.randn(per_call, kh, out, k + bias), torch.randn(per_call, out, n)
            z_t, dw = torch.randn(per_call, n, out), torch.empty(per_call, kh, k + bias, out)
            rows = [slice(p * row, p * row + n) for p in range(kh)]
            forward = [(w[:, p], shifted[:, :, rows[p]]) for p in range(kh)]
            products.append(lambda z=z, forward=forward: conv.accumulate(z, forward))
            for p in range(kh):
                pairs = list(zip(runs(shifted[:, :, rows[p]], 2), runs(z_t, 1)))
                products += [
                    lambda dw=dw[:, p], pairs=pairs: conv.accumulate(dw, pairs),
                    lambda w=w[:, p, :, :k], z=z, d=d_shifted[:, :, rows[p]]: d.baddbmm_(
                        w.transpose(1, 2), z
                    ),
                ]
        elif isinstance(layer, conv._Linear):
            (out, k), n = layer.shape, b
            w, a = torch.randn(per_call, out, k), torch.randn(per_call, k, n)
            z, dw, da = (
                torch.randn(per_call, out, n),
                torch.empty(per_call, out, k),
                torch.empty(per_call, k, n),
            )
            products += [
                lambda w=w, a=a, z=z: torch.bmm(w, a, out=z),
                lambda z=z, a=a, dw=dw: torch.bmm(z, a.transpose(1, 2), out=dw),
                lambda w=w, z=z, da=da: torch.bmm(w.transpose(1, 2), z, out=da),
            ]

    def gemms() -> None:
        for _ in range(t * -(-c // per_call)):
            for product in products:
                product()

    return gemms


def training_table(peak_gflops: float, reps: int) -> None:
    from flnet.learn import cohort, optim
    from flnet.learn.kernels import conv, dense

    print(f"{'':64} {'samples/CPU-s':>14} {'GFLOP/CPU-s':>12} {'% of peak':>10}")
    product, product_gflop = matmul_product()
    for name, trainer, params, rows in workloads():
        c, t, b = rows.shape
        samples = c * t * b
        gflop = samples * trainer.model.training_flops_per_sample() / 1e9
        engine = trainer.default_value_and_grad
        runs = {
            "batched": cohort_run(trainer, params, rows, path="batched"),
            "sequential": cohort_run(trainer, params, rows, path="sequential"),
        }
        if isinstance(engine, dense.DenseStack | conv.ConvStack):
            # the same maths through the generic engine (vmap + autograd), for comparison
            for path in ("batched", "sequential")[: 1 + isinstance(engine, conv.ConvStack)]:
                runs[f"{path}, generic engine"] = cohort_run(
                    trainer, params, rows, path=path, loss_fn=cohort.cross_entropy
                )
        if isinstance(engine, conv.ConvStack):
            runs["path auto"] = cohort_run(trainer, params, rows)
            runs["plain per-client loop (nn.Module + torch.optim.SGD)"] = plain_loop(
                trainer, params, rows, 0.05
            )
            per_call = trainer.clients_per_call(c, b, "auto", optim.sgd(0.05))
            runs["im2col ceiling: the engine's GEMMs alone"] = im2col_ceiling(
                trainer, c, t, b, per_call
            )
        for train in runs.values():
            train()
        # repeats interleaved, so that the machine's load weighs on every row alike; the peak
        # too (one product per repeat): this box's clock moves between spells
        times: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(reps):
            for label, train in runs.items():
                times[label].append(cpu_seconds(train))
            peak_gflops = max(peak_gflops, product_gflop / cpu_seconds(product))
        best = {label: min(t) for label, t in times.items()}
        print(f"{name:64.64} matmul peak, the best of the start's and the repeats': ", end="")
        print(f"{peak_gflops:.1f} GFLOP/s")
        for label in runs:
            rate = gflop / best[label]
            print(
                f"{'':64} {samples / best[label]:14,.0f} "
                f"{rate:12.2f} {100 * rate / peak_gflops:9.1f}%  {label}"
            )
        auto = trainer.clients_per_call(c, b, "auto", optim.sgd(0.05))
        print(
            f"{'':64} batched / sequential: {best['sequential'] / best['batched']:.1f}x; "
            f"path auto takes {auto} client{'s' * (auto > 1)} per call"
        )
        if isinstance(engine, conv.ConvStack):
            ceiling = best["im2col ceiling: the engine's GEMMs alone"]
            plain = best["plain per-client loop (nn.Module + torch.optim.SGD)"]
            auto_s = best["path auto"]
            print(
                f"{'':64} path auto vs plain loop: {plain / auto_s:.2f}x"
                f"{' (target >= 2)' if name.startswith('(b)') else ''}; "
                f"path auto at {100 * gflop / auto_s / peak_gflops:.0f}% of peak and "
                f"{100 * ceiling / auto_s:.0f}% of the im2col ceiling "
                f"({100 * gflop / ceiling / peak_gflops:.0f}% of peak)"
            )


# ---------------------------------------------------------------- on a device (gpu_check.sh)


def synchronized(device: str):
    """A no-op on the CPU; waits for the device's queued kernels on CUDA."""
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def wall_seconds(fn, device: str) -> float:
    sync = synchronized(device)
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def device_peak_gflops(device: str, reps: int) -> float:
    """The best FP32 GFLOP/s of a large matrix product on `device`, TF32 off (8192^2 on CUDA;
    on the CPU the training table's 1024^2 on one thread), in wall seconds."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = 8192 if device == "cuda" else 1024
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    return 2 * n**3 / 1e9 / min(wall_seconds(lambda: a @ b, device) for _ in range(reps))


def device_report(device: str, rows: str, reps: int, w1_reps: int) -> None:
    """Local training of the table's workloads `rows` (path auto) on `device`, in wall seconds
    (the best of `reps`) against its FP32 peak; then W1 as a scenario with `device` set,
    `w1_reps` fresh runs (0: none)."""
    from flnet.learn import optim

    peak = device_peak_gflops(device, max(reps, 3))
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU, 1 thread"
    print(
        f"torch {torch.__version__} on {device} ({name}); FP32 matmul peak, TF32 off: "
        f"{peak:.1f} GFLOP/s"
    )
    for label, trainer, params, batches in workloads(device, rows):
        c, t, b = batches.shape
        steps = torch.full((c,), t, device=batches.device)
        gflop = c * t * b * trainer.model.training_flops_per_sample() / 1e9

        def train(trainer=trainer, params=params, batches=batches, steps=steps) -> None:
            trainer.train(params, batches, steps, optim.sgd(0.05))

        train()  # plans, buffers and kernels' first use
        best = min(wall_seconds(train, device) for _ in range(reps))
        print(
            f"  {label:72.72} {best:8.4f} s  {gflop / best:9.1f} GFLOP/s  "
            f"{100 * gflop / best / peak:5.1f}% of peak"
        )
    if not w1_reps:
        return
    runs = scenario_runs(HERE / "w1.yaml", f"device={device}", reps=w1_reps)
    wall = [r["wall_s"] for r in runs]
    curves = [curve_of(r) for r in runs]
    print(
        f"  W1 (benchmarks/w1.yaml, device={device}), {w1_reps} fresh runs: median "
        f"{statistics.median(wall):.2f} s [{min(wall):.2f}-{max(wall):.2f}]; accuracy "
        f"{' '.join(f'{a:.4f}' for a in curves[0])}: {curve_agreement(curves)}"
    )


# ---------------------------------------------------------------- shared band


def channel_report(reps: int) -> None:
    import numpy as np
    import simpy

    from flnet.sim.channel import SharedBand, SharedBandArrays

    def per_transfer_us(kind, n: int) -> float:
        rng = np.random.default_rng(0)
        snr_hz = (10 ** rng.uniform(6, 9, n)).tolist()
        best = float("inf")
        for _ in range(max(reps, 3)):
            env = simpy.Environment()
            band = kind(env, 20e6)
            start = time.process_time()
            for k in range(n):  # all start at once: every start and end re-times n transfers
                band.transmit(1e6, snr_hz[k])
            env.run()
            best = min(best, time.process_time() - start)
        return best / n * 1e6

    def at_once_us(kind, n: int, solve: bool) -> float:
        """The same transfers computed at once (flnet.sim.at_once): replayed step by step
        without SimPy (by the band's own steps: floats or arrays), or solved as a triangular
        system (`SharedBand.replays_up_to` is where the replay stops being the quicker)."""
        rng = np.random.default_rng(0)
        snr_hz = (10 ** rng.uniform(6, 9, n)).tolist()
        band = kind(simpy.Environment(), 20e6)
        how = band.solve_alone if solve else band.schedule_alone
        best = float("inf")
        for _ in range(max(reps, 3)):
            start = time.process_time()
            schedule = how([0.0] * n, [1e6] * n, snr_hz)
            best = min(best, time.process_time() - start)
        return float("nan") if schedule is None else best / n * 1e6

    print("shared band, CPU-us per transfer (n under way at once):")
    for n in (2, 5, 10, 100, 1000):
        floats, arrays = per_transfer_us(SharedBand, n), per_transfer_us(SharedBandArrays, n)
        replays = [at_once_us(kind, n, False) for kind in (SharedBand, SharedBandArrays)]
        solved = at_once_us(SharedBand, n, True)
        print(
            f"  n = {n:4d}: Python floats {floats:7.1f}, numpy arrays {arrays:7.1f}; at once: "
            f"replayed {replays[0]:7.1f} (arrays {replays[1]:7.1f}), solved {solved:7.1f}"
        )


# ---------------------------------------------------------------- scenarios, in fresh processes


class PlanRecorder:
    """What a scenario's run trained, written for pfl's side (benchmarks/pfl_side.py) to do
    the same work: the data as the model sees them, the model with its initial parameters,
    and per round the cohort's clients, each one's training rows in its minibatches' order
    and its FedAvg weight (its sample count). For runs where every client of a round takes
    the same number of full minibatches (W1's steps; C1's epochs over equal shares)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.learner = None
        self.start: torch.Tensor | None = None
        self.cohorts: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []

    def install(self, patch=setattr) -> None:
        """Wrap flnet's draws of minibatch rows and Learner.local_train with `patch`
        (setattr; a test's monkeypatch.setattr)."""
        from flnet.learn import data, local

        recorder = self
        local_train = local.Learner.local_train

        def recorded_local_train(learner, clients, start, *args, **kwargs):
            if recorder.learner is None:
                recorder.learner, recorder.start = learner, start.detach().clone()
            return local_train(learner, clients, start, *args, **kwargs)

        patch(local.Learner, "local_train", recorded_local_train)
        for name in ("minibatches", "epoch_batches"):
            draw = getattr(data, name)

            def recorded(*args, draw=draw, **kwargs):
                out = draw(*args, **kwargs)
                batches, sizes = out if isinstance(out, tuple) else (out, None)
                if sizes is not None and (sizes < batches.shape[2]).any():
                    raise ValueError("a plan for pfl needs full minibatches only")
                recorder.cohorts.append(np.asarray(args[1]).copy())
                recorder.rows.append(batches.reshape(len(batches), -1).cpu().numpy().copy())
                return out

            patch(data, name, recorded)

    def write(self, path: str, overrides: list[str]) -> None:
        import copy

        from flnet.scenario import load_scenario

        scenario = load_scenario(path, overrides)
        learner = self.learner
        assert learner is not None and self.start is not None, "the run trained nothing"
        d = learner.data
        self.folder.mkdir(parents=True, exist_ok=True)
        np.savez(
            self.folder / "plan.npz",
            x_train=d.x_train.cpu().numpy(),
            y_train=d.y_train.cpu().numpy(),
            x_test=d.x_test.cpu().numpy(),
            y_test=d.y_test.cpu().numpy(),
            cohorts=np.stack(self.cohorts),
            rows=np.stack(self.rows),
            weights=np.stack([d.num_samples[c] for c in self.cohorts]),
        )
        module = copy.deepcopy(learner.trainer.model.module)
        torch.nn.utils.vector_to_parameters(self.start, module.parameters())
        torch.save(module, self.folder / "model.pt")
        local = scenario.algorithm.local
        meta = {
            "lr": local.lr,
            "batch_size": local.batch_size,
            "eval_every": scenario.run.eval_every,
        }
        (self.folder / "meta.json").write_text(json.dumps(meta))


def scenario_child(path: str, overrides: list[str], write: bool, plan: str | None = None) -> None:
    """Run one scenario and print what the parent reports, as JSON; with `plan`, also write
    what it trained there (`PlanRecorder`), for pfl's side."""
    # imports are excluded from the timing, as in BENCHMARKS.md, including the ones pandas,
    # scikit-learn and torch make lazily on first use
    import pyarrow.pandas_compat
    import pyarrow.parquet
    import pyarrow.vendored.version  # noqa: F401
    import sklearn.datasets
    import sklearn.datasets.data
    import sklearn.datasets.descr
    import sklearn.model_selection  # noqa: F401
    import torch.utils.serialization  # noqa: F401

    from flnet import runner
    from flnet.algorithms import MODULES, server  # MODULES: imported below, out of the timing
    from flnet.learn import cohort, data, evaluate, local
    from flnet.sim import at_once, world

    for module in MODULES.values():
        importlib.import_module(module)

    spent: dict = {}

    def timed(owner, name: str, key: str) -> None:
        inner = getattr(owner, name)
        spent[key + "_wall_s"] = spent[key + "_cpu_s"] = 0.0

        def wrapper(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[key + "_wall_s"] += time.perf_counter() - wall
                spent[key + "_cpu_s"] += time.process_time() - cpu

        setattr(owner, name, wrapper)

    timed(cohort.Trainer, "train", "trainer")  # the cohort's local steps
    timed(local.Learner, "local_train", "train")  # those, plus drawing and gathering minibatches
    for key, (owner, name) in {  # parts of what lies outside the trainer (OUTSIDE_PARTS)
        "build": (runner.Run, "__init__"),
        "sampling": (world.World, "sample_clients"),
        "draws": (data, "minibatches"),
        "rounds": (at_once.AtOnce, "plan"),
        "server": (server, "step"),  # FedAvg's rounds look it up each round
        "evaluation": (evaluate.Evaluator, "__call__"),
        "results": (runner.Run, "result"),
    }.items():
        timed(owner, name, key)
    recorder = None if plan is None else PlanRecorder(Path(plan))
    if recorder is not None:
        recorder.install()
    with tempfile.TemporaryDirectory() as out:
        wall, cpu = time.perf_counter(), time.process_time()
        res = runner.run(path, [*overrides, f"output.dir={out}"], write=write)
        spent.update(wall_s=time.perf_counter() - wall, cpu_s=time.process_time() - cpu)
    if recorder is not None:
        recorder.write(path, overrides)
    for clock in ("wall", "cpu"):  # local_train's own work: what is neither its steps nor draws
        spent[f"local_{clock}_s"] = (
            spent[f"train_{clock}_s"] - spent[f"trainer_{clock}_s"] - spent[f"draws_{clock}_s"]
        )
    acc = res.records.set_index("round").test_accuracy
    spent.update(
        accuracy={int(r): round(float(a), 4) for r, a in acc.items() if a == a},  # not NaN
        peak_rss_mb=peak_rss_mb(),
        events=int(res.records.events.iloc[-1]),  # uploads the server received
        final_accuracy=round(float(acc.iloc[-1]), 4),
    )
    print(json.dumps(spent))


OUTSIDE_PARTS = (  # what a scenario's child times apart outside the trainer
    "build",  # runner.Run: data, model, world, the initial evaluation
    "sampling",  # World.sample_clients: a round's cohort
    "draws",  # data.minibatches: a round's minibatch rows (one PCG64 per client)
    "local",  # the rest of Learner.local_train: optimizer states, FLOPs, its result (and
    # with local.epochs, its epochs' draws: data.epoch_batches)
    "rounds",  # at_once.AtOnce.plan: a round's transfers and computes at once
    "server",  # algorithms.server.step: the weighted mean of the delivered models (FedAvg's)
    "evaluation",  # Evaluator.__call__
    "results",  # Run.result: the records, ledger and summary
)


def scenario_runs(
    path: Path, *overrides: str, write: bool = False, reps: int = 1, plan: Path | None = None
) -> list:
    """`reps` runs, each in a fresh process; with `plan`, each writes what it trained there
    (`PlanRecorder`)."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        str(path),
        *(f"--child-set={o}" for o in overrides),
        *(["--child-write"] if write else []),
        *([f"--child-plan={plan}"] if plan is not None else []),
    ]
    return [
        json.loads(
            subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
        )
        for _ in range(reps)
    ]


def scenario(path: Path, *overrides: str, write: bool = False, reps: int = 1) -> dict:
    """The fastest of `reps` runs, each in a fresh process."""
    return min(scenario_runs(path, *overrides, write=write, reps=reps), key=lambda r: r["wall_s"])


# ---------------------------------------------------------------- streams beside FedAvg

STREAM_CLIENTS = 300
WEEK_S = 7 * 86_400.0
# an asynchronous server's wall time per simulated hour, at most this times FedAvg's (issue 47);
# its local training alone is a floor: its batches, and so its bits, are fixed by the timeline
STREAM_TARGET = 1.5
STREAM_LOCAL = "{steps: 10, batch_size: 32, lr: 0.05}"  # trace_replay.yaml's and fedbuff.yaml's
STREAM_ALGORITHMS = {  # each with 10 clients training at a time, as the shipped scenarios
    "FedAvg (10 a round)": "name: fedavg, cohort: {clients_per_round: 10}",
    "FedBuff (10 at once, K 5)": "name: fedbuff, concurrency: 10, buffer_size: 5",
    "FedAsync (10 at once)": "name: fedasync, concurrency: 10",
}


def week_trace(path: Path, clients: int = STREAM_CLIENTS, seed: int = 7) -> Path:
    """A smartphone-like availability trace in flnet's CSV: each client alternates online
    sessions of 1 min + Exp(1 h) and offline gaps of 1 min + Exp(3 h) over a week that repeats
    (about a quarter online at a time), its first session within its first 4 hours. Synthetic:
    no real trace ships with flnet (FedScale's convert with `flnet traces fedscale`)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = [f"# period_s: {WEEK_S:g}", "client,online_from_s,online_until_s,tz_offset_s"]
    for c in range(clients):
        t = float(rng.uniform(0, 4 * 3600))
        while t < WEEK_S:
            end = min(t + rng.exponential(3600.0) + 60, WEEK_S)
            rows.append(f"{c},{t:.1f},{end:.1f},0")
            t = end + rng.exponential(3 * 3600.0) + 60
    path.write_text("\n".join(rows) + "\n")
    return path


def streams_report(quick: bool) -> None:
    """FedAvg, FedBuff and FedAsync on the same clients and trace (trace_replay.yaml with 300
    clients, `week_trace`), `hours` simulated hours each in a fresh process, interleaved."""
    hours = 1.0 if quick else 3.0
    reps = 1 if quick else 2
    with tempfile.TemporaryDirectory() as tmp:
        trace = week_trace(Path(tmp) / "week.csv")
        common = (
            f"clients.count={STREAM_CLIENTS}",
            f"clients.availability.path={trace}",
            "run.rounds=1000000",
            f"run.time_budget_s={hours * 3600:g}",
            "run.eval_every=1000000",
        )
        runs: dict[str, list] = {label: [] for label in STREAM_ALGORITHMS}
        scenario = HERE.parent / "scenarios" / "trace_replay.yaml"
        for _ in range(reps):
            for label, algorithm in STREAM_ALGORITHMS.items():
                section = f"algorithm={{{algorithm}, local: {STREAM_LOCAL}}}"
                runs[label] += scenario_runs(scenario, section, *common)
    print(
        f"streams beside FedAvg: {STREAM_CLIENTS} clients replaying a week-long trace "
        f"(benchmarks/bench.py week_trace), {hours:g} simulated hours, best of {reps}:"
    )
    base = min(r["wall_s"] for r in runs[next(iter(runs))]) / hours
    for i, (label, done) in enumerate(runs.items()):
        best = min(done, key=lambda r: r["wall_s"])
        wall_h, cpu_h = best["wall_s"] / hours, best["cpu_s"] / hours
        per_work_ms = 1000 * best["wall_s"] / max(1, best["events"])
        met = "met" if wall_h / base <= STREAM_TARGET else "not met"
        against = (
            ""
            if i == 0
            else f" (target {STREAM_TARGET:g}x: {met}; its local training alone "
            f"{best['train_wall_s'] / hours / base:4.2f}x)"
        )
        print(
            f"  {label:<26} {wall_h:6.2f} s wall ({cpu_h:6.2f} s CPU) per simulated hour, "
            f"{wall_h / base:4.2f}x FedAvg{against}; {best['events'] / hours:6.0f} client works "
            f"an hour, {per_work_ms:5.2f} ms wall each; local training "
            f"{100 * best['train_wall_s'] / best['wall_s']:3.0f}% of wall; "
            f"accuracy {best['final_accuracy']:.3f}"
        )


# ---------------------------------------------------------------- W1 side by side

W1_CURVE = (0.7861, 0.8806, 0.9028, 0.9167, 0.9278)  # BENCHMARKS.md; tests/test_fedavg.py
W1_TEST_ROWS = 360
W1_RUN_TIMEOUT_S = 600.0
FLOWER_MISSING = (
    "Flower W1: skipped, flwr[simulation] 1.41 is not installed ({why}); `make bench` or "
    "`pip install -e .[bench]` adds it"
)
PFL_MISSING = (
    "pfl-research: skipped, {why}; `make bench-pfl` makes its environment (.venv-pfl: torch "
    "2.13.0 and pfl[pytorch] 0.6), or name one with --pfl-python"
)
PFL_PYTHON = HERE.parent / ".venv-pfl" / "bin" / "python"  # `make bench-pfl`'s; --pfl-python
PFL_WORKERS = {  # label -> pfl's worker processes (torchrun's), 1 thread each
    "pfl-research 0.6 (torchrun, 2 workers x 1 thread)": 2,
    "pfl-research 0.6 (1 process, 1 thread)": 1,
}
PFL2, PFL1 = PFL_WORKERS
W1_VARIANTS = {  # label -> the command of one fresh run; each prints JSON: wall_s, accuracy
    "flnet W1 (benchmarks/w1.yaml)": None,  # scenario_runs' --child
    "Flower 1.41 simulation (Ray, 2 actors x 1 CPU)": [str(HERE / "flower_w1.py")],
    **dict.fromkeys(PFL_WORKERS),  # pfl_run's, on the work flnet's first run did
    "plain torch loop (nn.Module + SGD, 1 thread)": [str(HERE / "w1_reference.py"), "loop"],
    "plain torch.func vmap (1 thread)": [str(HERE / "w1_reference.py"), "vmap"],
}
FLNET, FLOWER = list(W1_VARIANTS)[:2]


def flower_missing() -> str | None:
    """Why Flower's side cannot run here (the `bench` extra is absent), or None."""
    try:
        import flwr  # noqa: F401
        import ray  # noqa: F401
    except ImportError as e:
        return str(e)
    return None


def pfl_missing(python: Path) -> str | None:
    """Why pfl-research's side cannot run with `python` (its own environment), or None."""
    if not python.exists():
        return f"{python} does not exist"
    check = subprocess.run(
        [str(python), "-c", "import pfl.algorithm, torch.distributed.run"],
        capture_output=True,
        text=True,
    )
    if check.returncode:
        return f"{python} cannot import pfl ({(check.stderr.strip().splitlines() or ['?'])[-1]})"
    return None


def fresh_run(cmd: list[str], timeout_s: float = W1_RUN_TIMEOUT_S) -> str | dict:
    """Run `cmd` in its own process group: its stdout, or {"error": why} when it failed."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a timeout ends Ray's or torchrun's processes
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"no result within {timeout_s:.0f} s; stopped"}
    if proc.returncode:
        last = (err.strip().splitlines() or ["(no message)"])[-1]
        return {"error": f"exit status {proc.returncode}: {last}"}
    return out


def pfl_run(python: Path, workers: int, plan: Path, timeout_s: float = W1_RUN_TIMEOUT_S) -> dict:
    """One fresh run of benchmarks/pfl_side.py on `plan` (torchrun's `workers`, or one plain
    process): wall_s the slowest worker's, cpu_s the workers' sum, accuracy the first's."""
    if not (plan / "meta.json").exists():
        return {"error": "no plan: flnet's run that writes it failed"}
    with tempfile.TemporaryDirectory() as tmp:
        side = [str(HERE / "pfl_side.py"), str(plan), f"--out={tmp}"]
        if workers > 1:
            torchrun = ["-m", "torch.distributed.run", "--standalone"]
            side = [*torchrun, f"--nproc-per-node={workers}", *side]
        out = fresh_run([str(python), *side], timeout_s)
        if isinstance(out, dict):
            return out
        ranks = [json.loads(f.read_text()) for f in sorted(Path(tmp).glob("rank*.json"))]
    if len(ranks) != workers:
        return {"error": f"{len(ranks)} of {workers} workers reported"}
    first = min(ranks, key=lambda r: r["rank"])
    return {
        "wall_s": max(r["wall_s"] for r in ranks),
        "cpu_s": sum(r["cpu_s"] for r in ranks),
        "accuracy": first["accuracy"],
    }


def w1_run(label: str, plan: Path | None = None, pfl_python: Path = PFL_PYTHON) -> dict:
    """One fresh run of a W1 variant: its JSON, or {"error": why} when it failed. flnet's
    writes what it trained into `plan` when that holds none yet; pfl's trains on it."""
    if label == FLNET:
        record = plan if plan is not None and not (plan / "meta.json").exists() else None
        return scenario_runs(HERE / "w1.yaml", plan=record)[0]
    if label in PFL_WORKERS:
        assert plan is not None, "pfl trains on the plan flnet's run wrote"
        return pfl_run(pfl_python, PFL_WORKERS[label], plan)
    out = fresh_run([sys.executable, *W1_VARIANTS[label]])  # type: ignore[list-item]
    return out if isinstance(out, dict) else json.loads(out.splitlines()[-1])


def curve_of(run: dict) -> tuple[float, ...]:
    return tuple(v for k, v in sorted((int(k), v) for k, v in run["accuracy"].items()) if k)


def curve_agreement(curves: list[tuple[float, ...]]) -> str:
    """How the runs' accuracy curves compare with W1's: the same, within one test sample
    (1/360) at every evaluation, or further off (the most test samples apart)."""
    if any(len(c) != len(W1_CURVE) for c in curves):
        return "DIFFERS: not evaluated after rounds 10..50"
    apart = [max(round(abs(a - b) * W1_TEST_ROWS) for a, b in zip(c, W1_CURVE)) for c in curves]
    off, n = sum(a > 0 for a in apart), len(curves)
    if max(apart) == 0:
        return "the same curve" + (f" in all {n} runs" if n > 1 else "")
    if max(apart) == 1:
        return (
            f"within one test sample of {W1_TEST_ROWS} per evaluation ({off} of {n} runs "
            f"not the same curve)"
        )
    return f"DIFFERS: up to {max(apart)} test samples apart at an evaluation"


def w1_side_by_side(reps: int, pfl_python: Path = PFL_PYTHON) -> None:
    """W1 in flnet, Flower's simulation runtime, pfl-research (on the work flnet's first run
    did: `PlanRecorder`) and the plain torch references, `reps` fresh runs of each
    interleaved (so all see the same machine load): medians, ranges, accuracy curves, the
    ratios of medians, and W1's time inside and outside cohort.Trainer.train."""
    missing = flower_missing()
    no_pfl = pfl_missing(pfl_python)
    labels = [
        k
        for k in W1_VARIANTS
        if not (missing and k == FLOWER) and not (no_pfl and k in PFL_WORKERS)
    ]
    side_by_side_title("W1", reps)
    if missing:
        print("  " + FLOWER_MISSING.format(why=missing), flush=True)
    if no_pfl:
        print("  " + PFL_MISSING.format(why=no_pfl), flush=True)
    runs: dict[str, list[dict]] = {k: [] for k in labels}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(reps):
            for label in labels:
                runs[label].append(w1_run(label, plan=Path(tmp), pfl_python=pfl_python))
    print(f"  load average {os.getloadavg()[0]:.1f} after the runs")
    medians = {}
    for label, rs in runs.items():
        failed = [r["error"] for r in rs if "error" in r]
        good = [r for r in rs if "error" not in r]
        if failed:
            print(f"  {label}: {len(failed)} of {reps} runs failed: {failed[0]}")
        if not good:
            continue
        wall = [r["wall_s"] for r in good]
        medians[label] = statistics.median(wall)
        curves = [curve_of(r) for r in good]
        print(
            f"  {label:50} {medians[label]:7.2f} s [{min(wall):.2f}-{max(wall):.2f}]  "
            f"accuracy {' '.join(f'{a:.4f}' for a in curves[0])}: {curve_agreement(curves)}"
        )
    for other, name, target in (
        (FLOWER, "Flower", 50),
        (PFL2, "pfl-research (2 workers)", 10),
        (PFL1, "pfl-research (1 process)", 10),
    ):
        if FLNET in medians and other in medians:
            print(
                f"  {name} / flnet, ratio of medians: {medians[other] / medians[FLNET]:.1f}x "
                f"(target >= {target}x)"
            )
    good = [r for r in runs[FLNET] if "error" not in r]
    if good:
        inside = [r["trainer_wall_s"] for r in good]
        outside = [100 * (1 - r["trainer_wall_s"] / r["wall_s"]) for r in good]
        print(
            f"  flnet W1's split: inside cohort.Trainer.train {statistics.median(inside):.2f} s "
            f"(median), outside {statistics.median(outside):.0f}% of wall "
            f"[{min(outside):.0f}-{max(outside):.0f}] (target <= 15%)"
        )
        parts = {key: statistics.median(r[key + "_wall_s"] for r in good) for key in OUTSIDE_PARTS}
        outside_s = statistics.median(r["wall_s"] - r["trainer_wall_s"] for r in good)
        print(
            "  outside, median ms: "
            + ", ".join(f"{key} {1e3 * s:.0f}" for key, s in parts.items())
            + f", the rest {1e3 * (outside_s - sum(parts.values())):.0f} (of {1e3 * outside_s:.0f})"
        )


C1_FLNET = "flnet C1 (benchmarks/c1.yaml, run.threads 2)"
C1_TARGET_RATIO = 1.5  # pfl / flnet, at the same final accuracy within
C1_SAME_POINTS = 2.0  # percentage points


def side_by_side_title(workload: str, reps: int, what: str = "") -> None:
    """The first line of a side-by-side section (W1, C1): what is timed and how."""
    print(
        f"{workload} side by side (shared/BENCHMARKS.md): {what}wall s from data load to the "
        f"final accuracy, imports excluded; median [range] of {reps} interleaved fresh runs "
        f"each; load average {os.getloadavg()[0]:.1f} before",
        flush=True,
    )


def c1_run(label: str, data_root: Path, plan: Path, pfl_python: Path) -> dict:
    """One fresh run of a C1 variant (as `w1_run`): flnet's writes the plan when there is
    none yet; pfl's (2 workers) trains on it."""
    if label == C1_FLNET:
        record = None if (plan / "meta.json").exists() else plan
        try:
            return scenario_runs(HERE / "c1.yaml", f"data.root={data_root}", plan=record)[0]
        except subprocess.CalledProcessError as e:
            return {"error": f"exit status {e.returncode}: {e.stderr.strip()[-200:]}"}
    return pfl_run(pfl_python, PFL_WORKERS[label], plan)


def curves_apart(a: dict, b: dict) -> tuple[float, list[int]]:
    """The most percentage points two runs' accuracies differ by at the rounds both
    evaluated after round 0, and those rounds."""
    rounds = sorted(set(map(int, a["accuracy"])) & set(map(int, b["accuracy"])) - {0})
    gaps = [100 * abs(a["accuracy"][str(r)] - b["accuracy"][str(r)]) for r in rounds]
    return max(gaps, default=float("nan")), rounds


def c1_side_by_side(reps: int, pfl_python: Path = PFL_PYTHON) -> None:
    """C1 (shared/BENCHMARKS.md) in flnet and in pfl-research (2 workers), `reps` fresh
    runs of each interleaved, on data benchmarks/c1_data.py writes: pfl trains what flnet's
    first run trained (`PlanRecorder`: its partition, cohorts and batch order, from its
    initial model), so both do the same work; medians, ranges, CPU seconds, the accuracy
    curves and how far apart they are, and the ratio of medians."""
    import c1_data

    no_pfl = pfl_missing(pfl_python)
    labels = [C1_FLNET, *([] if no_pfl else [PFL2])]
    side_by_side_title(
        "C1",
        reps,
        "cnn_mcmahan, 200 clients x 50 synthetic 3x32x32 images, cohort 50, "
        "1 epoch of batch 10, 10 rounds; ",
    )
    if no_pfl:
        print("  " + PFL_MISSING.format(why=no_pfl), flush=True)
    runs: dict[str, list[dict]] = {k: [] for k in labels}
    with tempfile.TemporaryDirectory() as tmp:
        data_root, plan = c1_data.write(Path(tmp) / "data").parent, Path(tmp) / "plan"
        for _ in range(reps):
            for label in labels:
                runs[label].append(c1_run(label, data_root, plan, pfl_python))
    print(f"  load average {os.getloadavg()[0]:.1f} after the runs")
    medians, first = {}, {}
    for label, rs in runs.items():
        failed = [r["error"] for r in rs if "error" in r]
        good = [r for r in rs if "error" not in r]
        if failed:
            print(f"  {label}: {len(failed)} of {reps} runs failed: {failed[0]}")
        if not good:
            continue
        wall, cpu = [r["wall_s"] for r in good], [r["cpu_s"] for r in good]
        medians[label], first[label] = statistics.median(wall), good[0]
        curve = " ".join(f"{r}: {a:.4f}" for r, a in sorted(curve_points(good[0])))
        print(
            f"  {label:50} {medians[label]:7.2f} s [{min(wall):.2f}-{max(wall):.2f}], "
            f"{statistics.median(cpu):.1f} CPU-s; test accuracy after round {curve}"
        )
    good = [r for r in runs[C1_FLNET] if "error" not in r]
    if good:
        median = lambda key: statistics.median(r[key] for r in good)  # noqa: E731
        print(
            f"  flnet C1's split, medians: inside cohort.Trainer.train "
            f"{median('trainer_wall_s'):.2f} s ({median('trainer_cpu_s'):.1f} CPU-s), "
            f"evaluation {median('evaluation_wall_s'):.2f} s, building the run (the first "
            f"evaluation included) {median('build_wall_s'):.2f} s"
        )
    if C1_FLNET not in first or PFL2 not in first:
        return
    gap, rounds = curves_apart(first[C1_FLNET], first[PFL2])
    last = str(rounds[-1]) if rounds else None
    final_gap = (
        100 * abs(first[C1_FLNET]["accuracy"][last] - first[PFL2]["accuracy"][last])
        if last
        else float("nan")
    )
    print(
        f"  the same work (pfl on flnet's partition, cohorts, batch order and initial model): "
        f"accuracy curves at most {gap:.2f} points apart (rounds {rounds}); final "
        f"{final_gap:.2f} points apart ({'within' if final_gap <= C1_SAME_POINTS else 'NOT within'}"
        f" {C1_SAME_POINTS:g})"
    )
    print(
        f"  pfl-research (2 workers) / flnet, ratio of medians: "
        f"{medians[PFL2] / medians[C1_FLNET]:.2f}x (target >= {C1_TARGET_RATIO}x)"
    )


def curve_points(run: dict) -> list[tuple[int, float]]:
    return [(int(r), a) for r, a in run["accuracy"].items() if int(r)]


def scenarios_report(reps: int, quick: bool, w1_reps: int, pfl_python: Path = PFL_PYTHON) -> None:
    w1_side_by_side(w1_reps, pfl_python)
    c1_side_by_side(w1_reps, pfl_python)
    quickstart = HERE.parent / "scenarios" / "quickstart.yaml"
    for label, overrides in (
        ("as `flnet run` runs it", ()),
        ("a checkpoint every 10 rounds", ("run.checkpoint_every=10",)),
    ):
        runs = scenario_runs(quickstart, *overrides, write=True, reps=1 if quick else 7)
        wall = statistics.median(r["wall_s"] for r in runs)
        train, steps = (
            [100 * (1 - r[key + "_wall_s"] / r["wall_s"]) for r in runs]
            for key in ("train", "trainer")
        )
        print(
            f"quickstart, {label}, median of {len(runs)}: {wall:.2f} s wall; outside local "
            f"training (World.local_train) {statistics.median(train):.0f}% "
            f"[{min(train):.0f}-{max(train):.0f}], outside the trainer's steps "
            f"{statistics.median(steps):.0f}%"
        )
    rounds = 20 if quick else 100
    big = scenario(HERE / "digits_1000.yaml", f"run.rounds={rounds}")
    print(
        f"1000 clients (benchmarks/digits_1000.yaml, {rounds} rounds): peak memory "
        f"{big['peak_rss_mb']:.0f} MB, {big['wall_s']:.2f} s wall"
    )
    short_batch_report(1 if quick else 5)


SHORT_BATCH_CASES = {  # label -> overrides of benchmarks/fedprox_synthetic.yaml
    "drop_last: true": ("algorithm.local.drop_last=true",),
    "drop_last: false (short last batches)": (),
}


def short_batch_report(reps: int) -> None:
    """FedProx on Synthetic(1, 1) in epochs (benchmarks/fedprox_synthetic.yaml) with its
    short last batches (`drop_last: false`, the papers' default: padded and masked in the
    batched call) beside `drop_last: true` (full batches only): median wall seconds of `reps`
    fresh runs of each, interleaved, the run's and the trainer's steps', and their ratio.
    `drop_last: false` also takes an epoch's one more step wherever n_k mod B > 0."""
    path = HERE / "fedprox_synthetic.yaml"
    runs: dict[str, list[dict]] = {label: [] for label in SHORT_BATCH_CASES}
    for _ in range(reps):
        for label, overrides in SHORT_BATCH_CASES.items():
            runs[label] += scenario_runs(path, *overrides)
    keys = ("wall_s", "trainer_wall_s", "cpu_s")
    medians = {
        label: {key: statistics.median(r[key] for r in rs) for key in keys}
        for label, rs in runs.items()
    }
    print(f"epochs' short last batches ({path.name}, median of {reps}):")
    for label, m in medians.items():
        print(
            f"  {label:38} {m['wall_s']:7.2f} s wall ({m['trainer_wall_s']:.2f} s in the "
            f"trainer's steps), {m['cpu_s']:.2f} CPU-s"
        )
    full, short = (medians[label] for label in SHORT_BATCH_CASES)
    ratio = {key: short[key] / full[key] for key in keys}
    print(
        f"  short / full: {ratio['wall_s']:.2f}x wall (target <= 1.5), "
        f"{ratio['trainer_wall_s']:.2f}x in the trainer, {ratio['cpu_s']:.2f}x CPU"
    )


def compare_w1(other: Path, reps: int = 7) -> None:
    """W1's wall time here and in another checkout of flnet (`other`, e.g. main before a
    change), fresh processes interleaved so both see the same machine load."""
    import os

    def child(root: Path) -> dict:
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = [
            sys.executable,
            str(root / "benchmarks" / "bench.py"),
            "--child",
            str(HERE / "w1.yaml"),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=root)
        return json.loads(out.stdout.splitlines()[-1])

    runs: dict[str, list[dict]] = {"this": [], "other": []}
    for _ in range(reps):
        runs["this"].append(child(HERE.parent))
        runs["other"].append(child(other.resolve()))
    medians = {}
    for name, rs in runs.items():
        print(f"W1, {name} ({HERE.parent if name == 'this' else other}), {reps} fresh runs:")
        for key in ("wall_s", "cpu_s"):
            v = [r[key] for r in rs]
            medians[name, key] = statistics.median(v)
            print(f"  {key}: median {medians[name, key]:.3f} [{min(v):.3f}-{max(v):.3f}]")
        # the share outside cohort.Trainer.train, run by run, as the W1 report's
        share = [100 * (1 - r["trainer_wall_s"] / r["wall_s"]) for r in rs]
        print(
            f"  outside the trainer: median {statistics.median(share):.1f}% of wall "
            f"[{min(share):.1f}-{max(share):.1f}]"
        )
    for key in ("wall_s", "cpu_s"):
        print(f"this / other, median {key}: {medians['this', key] / medians['other', key]:.3f}")


POPULATION_SIZES = (10_000, 1_000_000, 10_000_000)


class RoundClock:
    """Observer: wall and CPU time when the run starts (its world built) and at every step."""

    def __init__(self):
        self.start_s = self.start_cpu_s = None
        self.steps_s: list[tuple[float, float]] = []

    def on_start(self, world):
        self.start_s, self.start_cpu_s = time.perf_counter(), time.process_time()

    def on_progress(self, world, progress, stopping):
        self.steps_s.append((time.perf_counter(), time.process_time()))

    def on_end(self, world, reason):
        pass


def population_child(path: str, overrides: list[str]) -> None:
    """One run of a population case: wall and CPU seconds to build (data, World, Learner,
    evaluator), the median wall and CPU seconds per round after the first (each round's
    evaluation included), and peak RSS, as JSON."""
    from flnet.runner import run

    clock = RoundClock()
    wall, cpu = time.perf_counter(), time.process_time()
    run(path, overrides, write=False, observers=(clock,))
    steps = clock.steps_s[1:]
    per_round = [[b[i] - a[i] for a, b in zip(steps, steps[1:])] for i in (0, 1)]
    print(
        json.dumps(
            {
                "build_s": clock.start_s - wall,
                "build_cpu_s": clock.start_cpu_s - cpu,
                "round_s": statistics.median(per_round[0]),
                "round_cpu_s": statistics.median(per_round[1]),
                "peak_rss_mb": peak_rss_mb(),
            }
        )
    )


class CheckpointBytes:
    """Observer placed after the run's checkpointer: the bytes each checkpoint wrote, by file
    kind (checkpoint.pt rewritten whole; the journals' growth, a rewritten journal whole)."""

    def __init__(self, out: Path):
        self.out = out
        self.sizes: dict[str, int] = {}
        self.mtime_ns = -1
        self.written: list[dict[str, int]] = []

    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        ckpt = self.out / "checkpoint.pt"
        if not ckpt.exists() or ckpt.stat().st_mtime_ns == self.mtime_ns:
            return None
        self.mtime_ns = ckpt.stat().st_mtime_ns
        row = {"checkpoint": ckpt.stat().st_size, "tables": 0, "ledger": 0}
        names = [f.name for f in self.out.iterdir() if "journal" in f.name]
        for name in sorted(set(names) | set(self.sizes)):
            size = (self.out / name).stat().st_size if name in names else 0
            row["tables" if name.startswith("tables") else "ledger"] += max(
                0, size - self.sizes.get(name, 0)
            )
            self.sizes[name] = size
        self.written.append(row)
        return None

    def on_end(self, world, reason):
        pass


def checkpoint_child(path: str, overrides: list[str]) -> None:
    """One run writing checkpoints into a temporary folder: the bytes each checkpoint wrote
    (checkpoint.pt, the table journal, the ledger journal), as JSON."""
    from flnet.runner import run

    with tempfile.TemporaryDirectory() as tmp:
        meter = CheckpointBytes(Path(tmp) / "out")
        run(path, [*overrides, f"output.dir={tmp}/out"], observers=(meter,))
    print(json.dumps({"written": meter.written}))


def population_case(*overrides: str, child: str = "--population-child") -> dict:
    cmd = [
        sys.executable,
        __file__,
        child,
        str(HERE.parent / "scenarios" / "million.yaml"),
        *(f"--child-set={o}" for o in overrides),
    ]
    return json.loads(
        subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    )


def population_report(quick: bool) -> None:
    """The issue's cases for populations at scale, each in a fresh process."""
    rounds = 5 if quick else 10
    print(
        f"FedAvg on scenarios/million.yaml (synthetic, natural partition, logistic, 100 "
        f"clients a round, {rounds} rounds), by registered clients:"
    )
    base = None
    for n in POPULATION_SIZES:
        r = population_case(f"clients.count={n}", f"run.rounds={rounds}")
        base = base or r
        print(
            f"  {n:>10,}: built in {r['build_s']:5.2f} s ({r['build_cpu_s']:5.2f} CPU-s); a "
            f"round {r['round_s'] * 1e3:5.0f} ms ({r['round_cpu_s'] * 1e3:4.0f} CPU-ms, "
            f"{r['round_cpu_s'] / base['round_cpu_s']:.2f}x 10k's); peak RSS "
            f"{r['peak_rss_mb']:5.0f} MB (+{r['peak_rss_mb'] - base['peak_rss_mb']:.0f} MB "
            f"over 10k)"
        )
    diurnal = (
        "clients.count=1000000",
        f"run.rounds={rounds}",
        "clients.availability.kind=diurnal",
        "clients.dropout_probability=0.08",
        "clients.slowdown_probability=0.1",
        "clients.slowdown_factor=3",
    )
    r = population_case(*diurnal)
    big = population_case("clients.count=1000000", f"run.rounds={rounds}")
    print(
        f"  1,000,000 diurnal (default curve, dropout 0.08, slowdowns 0.1 x3): built in "
        f"{r['build_s']:5.2f} s; a round {r['round_s'] * 1e3:5.0f} ms "
        f"({r['round_cpu_s'] * 1e3:4.0f} CPU-ms, {r['round_cpu_s'] / big['round_cpu_s']:.2f}x "
        f"always-on's); peak RSS {r['peak_rss_mb']:5.0f} MB "
        f"({r['peak_rss_mb'] - big['peak_rss_mb']:+.0f} MB over always-on)"
    )
    battery = (*diurnal, "clients.battery.idle_power_w=0.5")  # default batteries, 0.5 W use
    b = population_case(*battery)
    print(
        f"  1,000,000 diurnal with batteries (defaults, 0.5 W idle drain): built in "
        f"{b['build_s']:5.2f} s; a round {b['round_s'] * 1e3:5.0f} ms "
        f"({b['round_cpu_s'] * 1e3:4.0f} CPU-ms, {b['round_cpu_s'] / r['round_cpu_s']:.2f}x "
        f"diurnal's); peak RSS {b['peak_rss_mb']:5.0f} MB "
        f"({b['peak_rss_mb'] - r['peak_rss_mb']:+.0f} MB over diurnal without batteries)"
    )
    cells_report(big, rounds)
    scheduler_report(big, rounds)
    from flnet.algorithms import ALGORITHMS

    if "scaffold" not in ALGORITHMS:
        print("SCAFFOLD: not in this checkout")
        return
    rounds = 10 if quick else 50
    scaffold = ("algorithm.name=scaffold", "data.synthetic.num_features=784")
    r = population_case(*scaffold, f"run.rounds={rounds}")
    print(
        f"SCAFFOLD, 1,000,000 clients, 100 a round, {rounds} rounds, logistic on 784 "
        f"features (7,850 parameters): built in {r['build_s']:.2f} s; a round "
        f"{r['round_s'] * 1e3:.0f} ms ({r['round_cpu_s'] * 1e3:.0f} CPU-ms); peak RSS "
        f"{r['peak_rss_mb']:.0f} MB"
    )
    every = 5
    w = population_case(
        *scaffold, f"run.rounds={rounds}", f"run.checkpoint_every={every}", child="--ckpt-child"
    )["written"][1:]  # the round-0 checkpoint has no c_i rows yet
    mb = lambda row: (row["checkpoint"] + row["tables"]) / 1e6  # noqa: E731
    print(
        f"  the same run checkpointed every {every} rounds: MB written per checkpoint "
        f"(checkpoint.pt + table journal), first {mb(w[0]):.1f}, median "
        f"{statistics.median(map(mb, w)):.1f}, last {mb(w[-1]):.1f}, in all "
        f"{sum(map(mb, w)):.0f} over {len(w)} checkpoints (c_i of the clients seen so far: "
        f"{100 * rounds * 7850 * 4 / 1e6:.0f} MB at most)"
    )


SEVEN_CELLS = (
    "clients.positions={kind: uniform, side_m: 1000}",
    "radio.cells={stations_xy_m: [[0, 0], [500, 0], [1000, 0], [0, 500], [500, 500], "
    "[1000, 500], [500, 1000]]}",
)


def cells_report(big: dict, rounds: int) -> None:
    """1,000,000 clients in 7 cells, standing and moving, against one access point (`big`):
    the cells cost per client asked about (flnet.sim.cell_clients), so peak RSS should not
    grow with the registered clients."""
    for label, extra in (
        ("7 cells", ()),
        ("7 cells, moving (1 s epochs)", ("radio.cells.mobility={epoch_s: 1}",)),
    ):
        c = population_case("clients.count=1000000", f"run.rounds={rounds}", *SEVEN_CELLS, *extra)
        print(
            f"  1,000,000 in {label} (uniform on 1 km): built in {c['build_s']:5.2f} s; a round "
            f"{c['round_s'] * 1e3:5.0f} ms ({c['round_cpu_s'] * 1e3:4.0f} CPU-ms, "
            f"{c['round_cpu_s'] / big['round_cpu_s']:.2f}x one access point's); peak RSS "
            f"{c['peak_rss_mb']:5.0f} MB ({c['peak_rss_mb'] - big['peak_rss_mb']:+.0f} MB over one "
            "access point)"
        )


def scheduler_cost(kind: str, n: int, k: int, rounds: int) -> tuple[float, float]:
    """CPU-us and peak traced KB of one round's cohort choice (`World.sample_clients`) of k
    from n clients under `resources.scheduling.kind` (uniform: no resources section): the
    mean over `rounds` rounds after a first (uniform draws 16 rounds at once: the mean
    spreads that draw), and the largest peak."""
    import tracemalloc

    from flnet.schema import ClientsConfig, DirectRadio, ResourcesConfig, SchedulingConfig
    from flnet.sim.world import World

    radio = DirectRadio(mode="direct", uplink_snr_db={"kind": "uniform", "low": 0, "high": 30})
    res = None if kind == "uniform" else ResourcesConfig(scheduling=SchedulingConfig(kind=kind))
    world = World(ClientsConfig(count=n), radio, 0, resources=res)
    world.sample_clients(k, 0)
    cpu, peak = [], []
    for t in range(1, rounds + 1):
        tracemalloc.start()
        start = time.process_time()
        world.sample_clients(k, t + 1000)  # beyond what uniform drew ahead at round 0
        cpu.append(time.process_time() - start)
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.mean(cpu) * 1e6, max(peak) / 1e3


def allocation_ms(c: int) -> dict[str, float]:
    """CPU-ms of each allocation of `flnet.sim.allocation` for a cohort of c (SNRs spread
    over 30 dB, a 1 s deadline), the best of 3."""
    import numpy as np

    from flnet.sim import allocation as alloc

    rng = np.random.default_rng(0)
    bits, gain = np.full(c, 1e6), 10 ** rng.uniform(9, 12, c)
    m = alloc.Members(
        *(np.full(c, v) for v in (0.05, 1e8)),
        bits,
        gain,
        *(np.full(c, v) for v in (1e8, 2e9, 1e-4, 0.1, 1e-28, 0.01)),
    )
    ready = m.down_s + m.cycles / m.f_max_hz
    band = np.full(c, 20e6 / c)
    cases = {
        "min_max": lambda: alloc.equal_finish(ready, bits, gain * m.p_max_w, 20e6),
        "just_in_time": lambda: alloc.just_in_time(m, band, 1.0),
        "min_energy": lambda: alloc.min_energy(m, band, 1.0),
    }
    out = {}
    for name, fn in cases.items():
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
        out[name] = best * 1e3
    return out


def scheduler_report(uniform_run: dict, rounds: int) -> None:
    """A channel-aware scheduler at 1,000,000 clients beside uniform selection: the choice
    alone (pool of 4 x 100 candidates) and a whole FedAvg run."""
    n, k = 1_000_000, 100
    print(f"  cohort choice of {k} from {n:,} clients, a round (mean of 32):")
    for kind in ("uniform", "best_channel", "proportional_fair", "age_based"):
        us, kb = scheduler_cost(kind, n, k, 32)
        print(f"    {kind:>17}: {us:8.0f} CPU-us, peak {kb:7.1f} KB traced")
    ms = allocation_ms(k)
    print(
        f"  allocation for a cohort of {k}, CPU-ms a round: "
        + ", ".join(f"{name} {t:.1f}" for name, t in ms.items())
    )
    r = population_case(
        "clients.count=1000000",
        f"run.rounds={rounds}",
        "resources.scheduling.kind=best_channel",
    )
    print(
        f"  1,000,000 with best_channel scheduling (pool 400): a round {r['round_s'] * 1e3:5.0f} "
        f"ms ({r['round_cpu_s'] * 1e3:4.0f} CPU-ms, "
        f"{r['round_cpu_s'] / uniform_run['round_cpu_s']:.2f}x uniform's); peak RSS "
        f"{r['peak_rss_mb']:5.0f} MB ({r['peak_rss_mb'] - uniform_run['peak_rss_mb']:+.0f} MB "
        "over uniform)"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one repeat; a shorter 1000-client run")
    p.add_argument(
        "--compare-w1",
        metavar="CHECKOUT",
        type=Path,
        help="only W1's median wall time over 7 fresh runs here and in CHECKOUT, interleaved",
    )
    p.add_argument(
        "--population",
        action="store_true",
        help="only the population cases: FedAvg at 10k, 1M and 10M clients, SCAFFOLD at 1M",
    )
    p.add_argument(
        "--w1",
        action="store_true",
        help="only W1 side by side: flnet, Flower's simulation runtime, plain torch loop and vmap",
    )
    p.add_argument(
        "--c1",
        action="store_true",
        help="only C1 side by side: flnet and pfl-research (2 workers) on the same work",
    )
    p.add_argument(
        "--pfl-python",
        type=Path,
        default=PFL_PYTHON,
        help="the python of pfl-research's environment (default: .venv-pfl's, `make bench-pfl`)",
    )
    p.add_argument(
        "--training",
        action="store_true",
        help="only the matmul peak and the local-training table: (a) MLP, (b) and (c) CNNs",
    )
    p.add_argument(
        "--short-batch",
        action="store_true",
        help="only epochs' short last batches (drop_last false) beside drop_last true",
    )
    p.add_argument(
        "--reps",
        type=int,
        help="fresh runs of each W1 variant or --short-batch case, interleaved (default 5; "
        "1 with --quick)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        help="only local training of --rows (path auto, wall s against the device's FP32 "
        "peak, TF32 off) and W1 --reps times as a scenario, on this device",
    )
    p.add_argument(
        "--rows",
        default="abd",
        help="with --device, the workloads: letters of a (MLP), b, c (CNNs), d (C1's cohort)",
    )
    p.add_argument(
        "--streams",
        action="store_true",
        help="only FedBuff's and FedAsync's wall time per simulated hour beside FedAvg's",
    )
    p.add_argument("--population-child", help=argparse.SUPPRESS)
    p.add_argument("--ckpt-child", help=argparse.SUPPRESS)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-set", action="append", default=[], help=argparse.SUPPRESS)
    p.add_argument("--child-write", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--child-plan", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.child:
        return scenario_child(args.child, args.child_set, args.child_write, args.child_plan)
    if args.population_child:
        return population_child(args.population_child, args.child_set)
    if args.ckpt_child:
        return checkpoint_child(args.ckpt_child, args.child_set)
    if args.population:
        return population_report(args.quick)
    if args.streams:
        return streams_report(args.quick)
    if args.compare_w1:
        return compare_w1(args.compare_w1)
    if args.device:
        reps = 1 if args.quick else 3
        return device_report(args.device, args.rows, reps, 3 if args.reps is None else args.reps)
    w1_reps = args.reps or (1 if args.quick else 5)
    if args.w1:
        return w1_side_by_side(w1_reps, args.pfl_python)
    if args.c1:
        return c1_side_by_side(w1_reps, args.pfl_python)
    if args.short_batch:
        return short_batch_report(args.reps or (1 if args.quick else 5))
    reps = 1 if args.quick else 3
    peak = matmul_peak_gflops(reps=max(reps, 3))
    print(
        f"torch {torch.__version__}, 1 thread; float32 matmul peak: {peak:.1f} GFLOP/s (at the "
        "start; each workload's % of peak takes the best of it and of its repeats')\n"
    )
    training_table(peak, reps)
    if args.training:
        return None
    print()
    channel_report(reps)
    print()
    scenarios_report(reps, args.quick, w1_reps, args.pfl_python)
    print()
    streams_report(args.quick)


if __name__ == "__main__":
    main()
