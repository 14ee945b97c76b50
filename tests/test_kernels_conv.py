"""`kernels.conv.ConvStack` equals its readable path, `cohort.autograd_value_and_grad` (autograd
through the plain module), for every paper CNN: losses and gradients within tests/tolerance.py's
`assert_tensors_close` (relative 1e-5, absolute 1e-6), and runs within `assert_records_close`."""

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import assert_records_close, assert_tensors_close
from torch import nn

from flnet.learn import cohort, models, optim
from flnet.learn.kernels import conv
from flnet.learn.models import Model
from flnet.runner import run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench import paper_cnn  # the benchmark's CNN, workload (b)


def odd_cnn() -> nn.Module:
    """What the paper CNNs do not exercise: no biases, a non-square padded kernel, a 3/2 pool,
    a conv with no pool after it, two hidden Linear layers."""
    return nn.Sequential(
        nn.Conv2d(2, 3, (3, 2), padding=(1, 2), bias=False),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2),
        nn.Conv2d(3, 4, 2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(4 * 5 * 8, 6, bias=False),
        nn.ReLU(),
        nn.Linear(6, 5),
        nn.ReLU(),
        nn.Linear(5, 10),
    )


def stacked_cnn() -> nn.Module:
    """Convolutions straight after convolutions (with and without a ReLU between): each
    takes the previous one's output, in the batch-last layout, as its input."""
    return nn.Sequential(
        nn.Conv2d(1, 3, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(3, 4, 3),
        nn.Conv2d(4, 2, 2, bias=False),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * 3 * 3, 10),
    )


def winograd_cnn() -> nn.Module:
    """Later 5x5 convolutions through Winograd's F(4, 5) (`_Plan._conv_winograd`): padded as
    C1's (the tiles' middle points cover the columns: copied, not added), unpadded (tiles
    past the input's edge) and without a bias; then a 1x1 one (row-shifted) after it."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(16, 16, 5, padding=2),
        nn.ReLU(),
        nn.Conv2d(16, 3, 5, bias=False),
        nn.Conv2d(3, 4, 1),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, 10),
    )


def tiled_cnn(kernel: int) -> Callable[[], nn.Module]:
    """A first layer whose 3x3 pool tiles its 6x9 output: on 9x12 images a 4x4 kernel (the
    padded width a multiple of 3: `_Plan._split_im2col`, window columns (dj + kj) of every
    residue mod 3), on 8x11 a 3x3 one (not: the strided copy)."""
    return lambda: nn.Sequential(
        nn.Conv2d(1, 2, kernel), nn.MaxPool2d(3), nn.Flatten(), nn.Linear(12, 10)
    )


def image_shape(name: str) -> tuple[int, ...]:
    return (3, 32, 32) if name in ("cnn_dfl_cifar", "cnn_tutorial") else (1, 28, 28)


EVAL_ROWS = 360  # the digits test split (tests/test_fedavg.py)

CASES = {
    **{
        name: (lambda name=name, make=make: make(image_shape(name), 10))
        for name, make in models.CNNS.items()
    },
    "paper_cnn": paper_cnn,
    "odd_cnn": odd_cnn,
    "stacked_cnn": stacked_cnn,
    "winograd_cnn": winograd_cnn,
    # one tile (4x4, padded 2): its middle points cover the columns, no point is added
    "winograd_one_tile": lambda: models.cnn_mcmahan((1, 8, 8), 10),
    "tiled_split": tiled_cnn(4),
    "tiled_strided": tiled_cnn(3),
}
SHAPES = {
    **{name: image_shape(name) for name in models.CNNS},
    "paper_cnn": (1, 28, 28),
    "odd_cnn": (2, 9, 12),
    "stacked_cnn": (1, 9, 9),
    "winograd_cnn": (1, 16, 16),
    "winograd_one_tile": (1, 8, 8),
    "tiled_split": (1, 9, 12),
    "tiled_strided": (1, 8, 11),
}


def model_of(name: str) -> Model:
    torch.manual_seed(0)
    return Model(CASES[name](), SHAPES[name])


def cohort_inputs(model: Model, c: int = 3, b: int = 4, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(c, b, *model.input_shape, generator=g, dtype=dtype)
    y = torch.randint(0, 10, (c, b), generator=g)
    noise = torch.randn(c, model.num_params, generator=g, dtype=dtype)
    return model.init_params().to(dtype) + 0.05 * noise, x, y


@pytest.mark.parametrize(
    "name,dtype",
    [(name, torch.float64) for name in sorted(CASES)]
    + [("paper_cnn", torch.float32), ("winograd_cnn", torch.float32)],
)
def test_conv_stack_equals_autograd_on_every_cnn(name, dtype):
    """In float64 for the paper CNNs: their float32 gradients sum thousands of products in
    another order than autograd's kernels and a few entries near zero miss PARAM_ATOL."""
    model = model_of(name)
    model.module.to(dtype)
    layers = conv.conv_layers(model)
    assert layers is not None
    params, x, y = cohort_inputs(model, dtype=dtype)
    engine = conv.ConvStack(layers)
    loss, grad = engine(params, x, y)
    ref_loss, ref_grad = cohort.autograd_value_and_grad(model)(params, x, y)
    assert_tensors_close(loss, ref_loss)
    assert_tensors_close(grad, ref_grad)
    # a second call reuses the buffers of the first and must not read stale values
    out = torch.empty_like(grad)
    loss2, grad2 = engine(params.flip(0), x.flip(0), y.flip(0), out=out)
    assert grad2.data_ptr() == out.data_ptr()
    assert_tensors_close(loss2, ref_loss.flip(0))
    assert_tensors_close(grad2, ref_grad.flip(0))
    # other cohort sizes (one and two clients: what `path: auto` takes on the CPU), fewer plans
    for rows in (slice(0, 1), slice(1, 3), slice(0, 3), slice(2, 3)):
        part_loss, part_grad = engine(params[rows], x[rows], y[rows])
        assert_tensors_close(part_loss, ref_loss[rows])
        assert_tensors_close(part_grad, ref_grad[rows])
    assert len(engine._plans) == 2


@pytest.mark.parametrize(
    "name,dtype",
    [("paper_cnn", torch.float32), ("cnn_tutorial", torch.float64), ("odd_cnn", torch.float64)],
)
def test_conv_stack_equals_autograd_at_max_pool_ties(name, dtype):
    """Constant image regions (MNIST's background) give equal conv outputs in a pool window;
    the gradient goes to one of them, the one autograd picks. paper_cnn pools before its
    ReLU; cnn_tutorial and odd_cnn (an overlapping 3/2 pool) have ReLU then pool, which the
    engine runs as pool then ReLU: channels whose constant region is negative tie at zero
    after autograd's ReLU, positive ones tie above it."""
    model = model_of(name)
    model.module.to(dtype)
    params, x, y = cohort_inputs(model, dtype=dtype)
    x[..., : x.shape[-1] // 2] = 0.5  # half of every image constant
    engine = conv.ConvStack(conv.conv_layers(model))
    ref_loss, ref_grad = cohort.autograd_value_and_grad(model)(params, x, y)
    for rows in (slice(0, 3), slice(1, 2)):  # a cohort, and one client
        loss, grad = engine(params[rows], x[rows], y[rows])
        assert_tensors_close(loss, ref_loss[rows])
        assert_tensors_close(grad, ref_grad[rows])


def test_later_5x5_convolutions_of_16_channels_or_more_take_winograd():
    """F(4, 5) tiles: where the output width is a multiple of 4 and there are channels enough
    for its K = Cin products (C1's second convolution: 16 wide, 4 tiles)."""
    later = [layer for layer in conv.conv_layers(model_of("winograd_cnn"))[1:]]
    tiles = [conv._winograd_tiles(layer) for layer in later if isinstance(layer, conv._Conv)]
    assert tiles == [2, 1, 0]
    assert conv._winograd_tiles(conv.conv_layers(model_of("winograd_one_tile"))[3]) == 1
    c1 = conv.conv_layers(Model(models.cnn_mcmahan((3, 32, 32), 10), (3, 32, 32)))
    assert [conv._winograd_tiles(layer) for layer in c1 if isinstance(layer, conv._Conv)] == [0, 4]
    assert conv._winograd_tiles(conv.conv_layers(model_of("cnn_mcmahan"))[3]) == 0  # 14 wide


def test_winograd_gives_the_same_bits_again_on_one_or_two_threads():
    """Run to run, in float32, for each torch thread count. Across thread counts the bits
    are not promised: a threaded GEMM may split its sums on another CPU (tests/tolerance.py);
    the trainer's own `threads` run one-thread kernels, so its runs are the same path."""
    model = model_of("winograd_cnn")
    params, x, y = cohort_inputs(model, c=2, b=10)
    engine = conv.ConvStack(conv.conv_layers(model))
    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            (loss, grad), (again, grad_again) = (
                tuple(t.clone() for t in engine(params, x, y)) for _ in range(2)
            )
            assert torch.equal(loss, again) and torch.equal(grad, grad_again)
    finally:
        torch.set_num_threads(before)


def test_winograd_matrices_compute_the_correlation_exactly():
    """``A^T [(G g) * (B^T d)]`` is ``y_j = sum_q g_q d_(j+q)`` (in float64, to rounding)."""
    for m, r in [(4, 5), (2, 3), (4, 3)]:
        a_t, g, b_t = (torch.tensor(matrix, dtype=torch.float64) for matrix in conv.toom_cook(m, r))
        taps, inputs = torch.randn(r, dtype=torch.float64), torch.randn(m + r - 1).double()
        direct = torch.stack([taps @ inputs[j : j + r] for j in range(m)])
        winograd = a_t @ ((g @ taps) * (b_t @ inputs))
        torch.testing.assert_close(winograd, direct, rtol=1e-12, atol=1e-12)


def test_first_layer_goes_window_major_only_before_a_pool_that_tiles_it():
    """The first convolution's output goes window-major where the max-pool after it tiles
    it (stride = kernel, dividing its height and width): 2x2 over 24x24, 3x3 over 6x9, not
    2x2 over 25x25 (its last row in no window), a 3/2 pool (overlapping) or a 1x1 one."""

    def tiles(pool: nn.MaxPool2d, side: tuple[int, int]) -> tuple[int, int] | None:
        conv_out = (side[0] - 2, side[1] - 2)
        k, s = pool.kernel_size, pool.stride
        features = 2 * math.prod((size - k) // s + 1 for size in conv_out)
        model = Model(
            nn.Sequential(nn.Conv2d(1, 2, 3), pool, nn.Flatten(), nn.Linear(features, 3)),
            (1, *side),
        )
        layers = conv.conv_layers(model)
        assert layers is not None and layers[1].in_hw == conv_out
        return conv._tiles(layers[1])

    assert tiles(nn.MaxPool2d(2), (26, 26)) == (2, 2)
    assert tiles(nn.MaxPool2d(3), (8, 11)) == (3, 3)
    assert tiles(nn.MaxPool2d(2), (27, 27)) is None
    assert tiles(nn.MaxPool2d(3, stride=2), (26, 26)) is None
    assert tiles(nn.MaxPool2d(1), (26, 26)) is None


def test_conv_stack_runs_a_relu_after_its_max_pool_and_equals_autograd():
    """conv, ReLU, pool is computed as conv, pool, ReLU (the same maths on fewer elements);
    a ReLU with no pool after it stays where it is."""
    kinds = [type(layer).__name__ for layer in conv.conv_layers(model_of("cnn_tutorial"))]
    assert kinds[:6] == ["_Conv", "_Pool", "_ReLU", "_Conv", "_Pool", "_ReLU"]
    kinds = [type(layer).__name__ for layer in conv.conv_layers(model_of("odd_cnn"))]
    assert kinds[:5] == ["_Conv", "_Pool", "_ReLU", "_Conv", "_ReLU"]
    # ReLU, pool, ReLU: the second ReLU meets the first after the swap and is dropped
    torch.manual_seed(0)
    twice = nn.Sequential(
        nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(), nn.Linear(18, 3)
    )
    model = Model(twice.double(), (1, 8, 8))
    layers = conv.conv_layers(model)
    assert [type(layer).__name__ for layer in layers] == [
        "_Conv",
        "_Pool",
        "_ReLU",
        "_Flatten",
        "_Linear",
    ]
    params, x, y = cohort_inputs(model, dtype=torch.float64)
    y = y % 3
    for rows in (slice(0, 3), slice(0, 1)):
        loss, grad = conv.ConvStack(layers)(params[rows], x[rows], y[rows])
        ref_loss, ref_grad = cohort.autograd_value_and_grad(model)(params[rows], x[rows], y[rows])
        assert_tensors_close(loss, ref_loss)
        assert_tensors_close(grad, ref_grad)


def test_only_supported_stacks_take_the_conv_engine():
    def accepts(*layers, shape=(1, 8, 8)):
        return conv.conv_layers(Model(nn.Sequential(*layers), shape)) is not None

    head = [nn.Flatten(), nn.Linear(2 * 6 * 6, 3)]
    assert accepts(nn.Conv2d(1, 2, 3), nn.ReLU(), *head)
    assert not accepts(nn.Conv2d(1, 2, 3, stride=2), nn.Flatten(), nn.Linear(2 * 3 * 3, 3))
    same = [nn.Flatten(), nn.Linear(2 * 8 * 8, 3)]
    assert accepts(nn.Conv2d(1, 2, 3, padding=1), *same)
    assert not accepts(nn.Conv2d(1, 2, 3, padding="same"), *same)
    assert not accepts(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.ReLU(), *head)
    assert not accepts(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2, padding=1), *head)
    assert not accepts(nn.Conv2d(1, 2, 3), *head, nn.ReLU())  # ReLU last
    assert not accepts(nn.ReLU(), nn.Conv2d(1, 2, 3), *head)  # would run in place on x
    assert not accepts(nn.Flatten(), nn.Linear(64, 3))  # no convolution: DenseStack's
    assert not accepts(nn.Conv2d(2, 2, 3), *head)  # channels that do not match the input
    assert not accepts(nn.Conv2d(1, 2, 3), nn.MaxPool2d(2, ceil_mode=True), *head)


def test_training_through_conv_stack_equals_autograd_short_batches_included():
    model = model_of("cnn_dfl_mnist")
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(40, 1, 28, 28, generator=g), torch.randint(0, 10, (40,), generator=g)
    trainer = cohort.Trainer(model, x, y)
    assert isinstance(trainer.default_value_and_grad, conv.ConvStack)
    c, t, b = 3, 3, 5
    batches = torch.randint(0, 40, (c, t, b), generator=g)
    steps = torch.tensor([3, 2, 3])
    sizes = np.full((c, t), b)
    sizes[0, 2], sizes[2, 1] = 2, 4  # short batches: PAD slots, through ConvStack.padded
    params = model.init_params().expand(c, -1)
    opt = optim.sgd(0.1, momentum=0.9)
    fast = trainer.train(params, batches, steps, opt, sizes=sizes)
    generic = trainer.train(params, batches, steps, opt, sizes=sizes, loss_fn=cohort.cross_entropy)
    assert_tensors_close(fast.params, generic.params)
    assert_tensors_close(fast.loss, generic.loss)
    assert torch.equal(fast.sample_grads, generic.sample_grads)


def test_auto_path_counts_the_conv_engines_columns_against_its_memory():
    """On the CPU auto trains CNNs two clients a call through the conv engine (faster there),
    one where a client's buffers and parameters outgrow `CPU_CONV_CALL_BYTES` (cnn_tutorial:
    ~12 MiB at batch 32, ~3 at batch 8) or the memory allows fewer; on other devices it
    stacks what fits, the engine's columns counted (meta tensors stand in)."""
    model = model_of("cnn_tutorial")
    x, y = torch.zeros(4, 3, 32, 32), torch.zeros(4, dtype=torch.long)
    on_cpu = cohort.Trainer(model, x, y)
    assert on_cpu.clients_per_call(10, 8, "auto", optim.sgd(1)) == 2
    assert on_cpu.clients_per_call(10, 32, "auto", optim.sgd(1)) == 1
    assert on_cpu.clients_per_call(1, 8, "auto", optim.sgd(1)) == 1
    assert (
        cohort.Trainer(model, x, y, memory_bytes=1).clients_per_call(10, 8, "auto", optim.sgd(1))
        == 1
    )
    x, y = x.to("meta"), y.to("meta")
    trainer = cohort.Trainer(model, x, y)
    assert trainer.clients_per_call(10, 32, "auto", optim.sgd(1)) == 10
    engine = trainer.default_value_and_grad
    assert isinstance(engine, conv.ConvStack)
    # whichever is more: the engine's columns and buffers, or autograd's activations
    per_sample = max(engine.floats_per_sample(), model.training_cost_per_sample.floats)
    per_client = 32 * per_sample * 4
    small = cohort.Trainer(model, x, y, memory_bytes=20 * per_client)
    assert small.clients_per_call(50, 32, "auto", optim.sgd(1)) < 20
    assert (
        cohort.Trainer(model, x, y, memory_bytes=1).clients_per_call(50, 32, "auto", optim.sgd(1))
        == 1
    )


def test_a_cnn_run_through_conv_stack_equals_the_run_through_autograd(scenario, monkeypatch):
    def go():
        return run(
            scenario(model={"kind": "cnn_dfl_mnist"}, run={"rounds": 2, "eval_every": 1}),
            write=False,
        )

    engines = []
    monkeypatch.setattr(cohort.Trainer, "train", spy(cohort.Trainer.train, engines))
    fast = go()
    monkeypatch.setattr(cohort, "conv_layers", lambda model: None)  # autograd only
    generic = go()
    assert engines[0] is conv.ConvStack and engines[-1] is not conv.ConvStack
    assert len(fast.records) == 3  # round 0's evaluation, then two rounds'
    assert_records_close(fast.records, generic.records, eval_rows=EVAL_ROWS)


def spy(train, engines):
    def wrapped(self, *args, **kwargs):
        engines.append(type(self.default_value_and_grad))
        return train(self, *args, **kwargs)

    return wrapped


@pytest.mark.parametrize("case", ["uniform", "masked", "short"])
def test_conv_stack_descend_equals_sgd_on_its_gradient(case, monkeypatch):
    """Plain SGD (`plain_lr`) is stepped by `ConvStack.descend`: the Linear weights' steps
    fused into their gradients' GEMMs (on a [C, P] slice with the weights before the step
    giving the input gradient), the convolutions' added from their buffers; the same as the
    gradient assembled and stepped by the optimizer within tests/tolerance.py (the GEMM adds
    -lr times its sum, the optimizer -lr times the rounded gradient). Masked clients keep
    their parameters; a step with a short batch takes the padded twin's `descend`."""
    model = model_of("paper_cnn")
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(60, 1, 28, 28, generator=g), torch.randint(0, 10, (60,), generator=g)
    trainer = cohort.Trainer(model, x, y)
    c, t, b = 5, 4, 6
    batches = torch.randint(0, 60, (c, t, b), generator=g)
    steps = torch.tensor([t, 2, t, 1, t] if case == "masked" else [t] * c)
    sizes = None
    if case == "short":
        sizes = np.full((c, t), b)
        sizes[1, 2], sizes[3, 1] = 3, 5
    p0 = model.init_params().expand(c, -1)
    descents = []
    descend = conv.ConvStack.descend
    monkeypatch.setattr(conv.ConvStack, "descend", lambda *a: descents.append(1) or descend(*a))
    per_call = trainer.clients_per_call(c, b, "auto", optim.sgd(0.1))
    # every step of every call: a short batch's through the padded twin's `descend`
    engine_steps = t * len(range(0, c, per_call))
    fast = trainer.train(p0, batches, steps, optim.sgd(0.1), sizes=sizes)
    assert len(descents) == engine_steps
    plain = trainer.train(p0, batches, steps, optim.sgd(0.1)._replace(plain_lr=None), sizes=sizes)
    assert len(descents) == engine_steps  # the optimizer's steps, not the engine's
    assert not torch.equal(fast.params, p0)
    assert_tensors_close(fast.params, plain.params)
    assert_tensors_close(fast.loss, plain.loss)
    assert torch.equal(fast.sample_grads, plain.sample_grads)


@pytest.mark.parametrize("expanded", [False, True])
def test_conv_stack_descend_from_start_equals_the_step_on_a_copy(expanded):
    """`descend(params, ..., start=)` (a client's first step, no copy of the starting
    parameters first) writes into `params` what the step on a copy of `start` leaves there,
    whatever `params` held, from a [C, P] start or a [P] one expanded. Within
    tests/tolerance.py's bound, not bit for bit: the two paths add the step with different
    kernels (`torch.add(out=)`, `_foreach_add_`), which another CPU may round apart."""
    model = model_of("paper_cnn")
    p, x, y = cohort_inputs(model)
    start = p[0].expand(p.shape[0], -1) if expanded else p
    engine = conv.ConvStack(conv.conv_layers(model))
    copied = start.clone()
    loss = engine.descend(copied, x, y, 0.1)
    into = torch.full_like(p, float("nan"))
    loss_from_start = engine.descend(into, x, y, 0.1, start=start)
    assert not torch.equal(copied, start)
    assert_tensors_close(into, copied)
    assert torch.equal(loss_from_start, loss)  # the forward pass is one path
    again = engine.descend(into, x, y, 0.1)  # the next step, on the views of `into`
    assert_tensors_close(again, engine.descend(copied, x, y, 0.1))
    assert_tensors_close(into, copied)
