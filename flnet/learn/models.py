"""Models, used functionally: parameters live outside the module as a flat vector.

One client's parameters are ``[P]``; a cohort's are stacked ``[C, P]``. `Model.forward` runs one
client's parameters on a batch; `Model.forward_stacked` vmaps it over the cohort.

The papers' architectures (parameter counts at the papers' input sizes, checked in
tests/test_models.py):

| kind | source | input | params |
|---|---|---|---|
| `logistic` | DRDM's MNIST linear model, 784 -> 10 | any | 7,850 |
| `mlp` | hidden ReLU layers | any | |
| `cnn_mcmahan` | McMahan et al. 2017, the MNIST "CNN" | [1, 28, 28] | 1,663,370 |
| `cnn_dfl_mnist` | DFL paper (Liu et al.), Table II left | [1, 28, 28] | 20,490 |
| `cnn_dfl_cifar` | DFL paper, Table II right | [3, 32, 32] | 576,778 |
| `cnn_tutorial` | the PyTorch-tutorial CIFAR CNN of the block-cyclic paper | [3, 32, 32] | 62,006 |
| `cnn_kmnist` | DRDM's KMNIST CNN (Sec. 4.1) | [1, 28, 28] | 794,310 |
| `resnet18` | CIFAR ResNet-18, GroupNorm for BatchNorm (OledFL/DisPFL) | [3, 32, 32] | 11,173,962 |

Every model is an ``nn.Sequential`` ending in a Linear layer, whose input is the model's
representation z (`Model.forward_with_representation`, MOON's contrastive term); training and
forward-only FLOPs a sample are counted by running the model (`training_cost_per_sample`,
`forward_cost_per_sample`).

CNN layer widths after flattening are found by running the convolutional part once on the
actual input shape, so the CNNs also build on smaller images (e.g. digits' 8x8) when their
convolutions and pools fit.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from flnet.errors import ScenarioError
from flnet.schema import ModelConfig


def _mlp(in_features: int, hidden: list[int], num_classes: int) -> list[nn.Module]:
    layers: list[nn.Module] = []
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return layers + [nn.Linear(width, num_classes)]


def _cnn(
    features: list[nn.Module], input_shape: tuple[int, ...], head: list[int], num_classes: int
) -> nn.Sequential:
    """features, flatten, then dense layers of widths `head` (ReLU between) to the classes."""
    trunk = nn.Sequential(*features, nn.Flatten())
    with torch.no_grad():
        flat = trunk(torch.zeros(1, *input_shape)).shape[1]
    return nn.Sequential(*trunk, *_mlp(flat, head, num_classes))


def _conv_relu_pool(
    c_in: int, c_out: int, kernel: int, padding: int, pool: int, pool_stride: int | None = None
) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, c_out, kernel, padding=padding),
        nn.ReLU(),
        nn.MaxPool2d(pool, stride=pool_stride),
    ]


def cnn_mcmahan(shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """McMahan et al. 2017 Sec. 3: two 5x5 convolutions (32, 64 channels), each followed by
    2x2 max pooling, a 512-unit ReLU layer and a softmax layer; 'same' padding as in their
    TensorFlow code, so 28 -> 14 -> 7. The paper gives 1,663,370 parameters."""
    c = shape[0]
    return _cnn(
        _conv_relu_pool(c, 32, 5, 2, 2) + _conv_relu_pool(32, 64, 5, 2, 2),
        shape,
        [512],
        num_classes,
    )


def cnn_dfl_mnist(shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """DFL paper Table II (MNIST): Conv[1,16,3x3], ReLU, MaxPool[2x2], Conv[16,32,3x3], ReLU,
    MaxPool[2x2], Dense[32x7x7, 10]. The table's 32x7x7 needs padding 1 (28 -> 14 -> 7)."""
    c = shape[0]
    return _cnn(
        _conv_relu_pool(c, 16, 3, 1, 2) + _conv_relu_pool(16, 32, 3, 1, 2), shape, [], num_classes
    )


def cnn_dfl_cifar(shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """DFL paper Table II (CIFAR-10): Conv[3,64,5x5], ReLU, MaxPool[3x3], twice, then Dense
    64x4x4 -> 384 -> 192 -> 10. The paper gives no padding or pool stride; its 64x4x4 needs
    'valid' convolutions and stride-2 pools (32 -> 28 -> 13 -> 9 -> 4)."""
    c = shape[0]
    return _cnn(
        _conv_relu_pool(c, 64, 5, 0, 3, 2) + _conv_relu_pool(64, 64, 5, 0, 3, 2),
        shape,
        [384, 192],
        num_classes,
    )


def cnn_tutorial(shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The PyTorch CIFAR-10 tutorial CNN used by the block-cyclic paper ("two convolutional
    layers and three fully connected layers"): conv 3->6 5x5, pool 2, conv 6->16 5x5, pool 2,
    dense 400 -> 120 -> 84 -> 10. The paper names the tutorial; the widths are the tutorial's."""
    c = shape[0]
    return _cnn(
        _conv_relu_pool(c, 6, 5, 0, 2) + _conv_relu_pool(6, 16, 5, 0, 2),
        shape,
        [120, 84],
        num_classes,
    )


def cnn_kmnist(shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """DRDM Sec. 4.1 (KMNIST): 3x3 conv 16 channels, max-pool, 3x3 conv 32, max-pool, flatten
    (32x7x7), FC 500, ReLU, FC 10. The paper names ReLU only after FC1 and gives no padding;
    32x7x7 needs padding 1 and 2x2 pools, and we put ReLU after the convolutions too."""
    c = shape[0]
    return _cnn(
        _conv_relu_pool(c, 16, 3, 1, 2) + _conv_relu_pool(16, 32, 3, 1, 2),
        shape,
        [500],
        num_classes,
    )


class BasicBlock(nn.Module):
    """ResNet basic block with GroupNorm: conv3x3-GN-ReLU-conv3x3-GN, plus the shortcut."""

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.GroupNorm(groups, c_out)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        return torch.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


def resnet18_trunk(in_channels: int, groups: int = 32) -> nn.Sequential:
    """[B, C, H, W] -> [B, 512]: the CIFAR ResNet-18 (3x3 stem, stride 1, no max-pool; stages
    of two basic blocks, 64/128/256/512 channels; global average pool) with every BatchNorm
    replaced by GroupNorm(`groups`), as in DisPFL's ``customized_resnet18`` that OledFL builds
    on. GroupNorm has no running statistics, so the model is a pure function of its weights."""
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False),
        nn.GroupNorm(groups, 64),
        nn.ReLU(),
    ]
    c_in = 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [BasicBlock(c_in, c_out, stride, groups), BasicBlock(c_out, c_out, 1, groups)]
        c_in = c_out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())


CNNS = {
    f.__name__: f for f in (cnn_mcmahan, cnn_dfl_mnist, cnn_dfl_cifar, cnn_tutorial, cnn_kmnist)
}


def build_module(config: ModelConfig, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    kind = config.kind
    if kind == "logistic":
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))
    if config.kind == "mlp":
        return nn.Sequential(
            nn.Flatten(), *_mlp(math.prod(input_shape), config.hidden, num_classes)
        )
    if len(input_shape) != 3:
        raise ScenarioError(
            f"{kind} needs image inputs [channels, height, width]; this data "
            f"set gives {list(input_shape)}",
            field="model.kind",
        )
    try:
        if config.kind == "resnet18":
            return nn.Sequential(
                *resnet18_trunk(input_shape[0], config.norm_groups), nn.Linear(512, num_classes)
            )
        return CNNS[kind](input_shape, num_classes)
    except RuntimeError as e:  # a convolution or pool larger than what is left of the image
        raise ScenarioError(
            f"{kind} does not fit inputs of shape {list(input_shape)}: {e}", field="model.kind"
        ) from None


class Model:
    """A module and the layout of its flat parameter vector."""

    def __init__(self, module: nn.Module, input_shape: tuple[int, ...]) -> None:
        if list(module.buffers()):
            raise ValueError(
                "models with buffers (e.g. BatchNorm) are not supported; use GroupNorm"
            )
        self.module = module
        self.input_shape = tuple(input_shape)
        named = list(module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        self.num_params = sum(self.sizes)
        self._forward_stacked = vmap(self.forward)

    def init_params(self) -> torch.Tensor:
        """[P] the module's own initial parameters."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()])

    def unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """[P] -> {name: view}."""
        return {
            n: t.view(s) for n, t, s in zip(self.names, flat.split(self.sizes, -1), self.shapes)
        }

    def forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[P], [B, *input] -> [B, classes] logits."""
        return functional_call(self.module, self.unflatten(flat), (x,))

    def predict(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[P], [B, *input] -> [B, classes] logits, without gradients: a copy of the module
        with its parameters pointed at `flat`, which costs a fraction of `forward`'s
        functional_call on the small models evaluation runs every few rounds."""
        with torch.no_grad():
            return self.predictor(flat)(x)

    def predictor(self, flat: torch.Tensor) -> nn.Module:
        """The module's inference copy (`for_inference`) with its parameters pointed at `flat`
        [P] (views, no copy): call it under torch.no_grad(), from any number of threads."""
        for p, view in zip(self._predictor.parameters(), self.unflatten(flat).values()):
            p.data = view
        return self._predictor

    @functools.cached_property
    def _predictor(self) -> nn.Module:
        return for_inference(copy.deepcopy(self.module).requires_grad_(False))

    def forward_stacked(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[C, P], [C, B, *input] -> [C, B, classes]."""
        return self._forward_stacked(params, x)

    @property
    def training_cost_per_sample(self) -> TrainingCost:
        """Forward + backward (weight gradients) of one sample, counted by running the model."""
        return self._costs_per_sample[1]

    @property
    def forward_cost_per_sample(self) -> TrainingCost:
        """The forward pass alone of one sample (a loss query, MOON's extra forwards); its
        floats are those of a forward that keeps what the backward needs."""
        return self._costs_per_sample[0]

    @functools.cached_property
    def _costs_per_sample(self) -> tuple[TrainingCost, TrainingCost]:
        """(forward, forward + backward) of one sample, from one run of the model on a batch:
        the forward's are the counts before its backward (its FLOPs are those of the same
        forward without gradients)."""
        batch = 8
        device = next(self.module.parameters()).device
        x = torch.zeros((batch, *self.input_shape), device=device)
        params = self.init_params().requires_grad_(True)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # a batch of 8 needs no thread pool, and starting one costs
        try:
            with _WorkCounter() as counter, torch.enable_grad():
                logits = self.forward(params, x)
                loss = nn.functional.cross_entropy(
                    logits, torch.zeros(batch, dtype=torch.long, device=device)
                )
                forward = TrainingCost(counter.flops / batch, counter.floats / batch)
                torch.autograd.grad(loss, params)
        finally:
            torch.set_num_threads(threads)
        return forward, TrainingCost(counter.flops / batch, counter.floats / batch)

    def training_flops_per_sample(self) -> float:
        return self.training_cost_per_sample.flops

    def forward_flops_per_sample(self) -> float:
        return self.forward_cost_per_sample.flops

    # -------------------------------------------------------------- representation

    @functools.cached_property
    def _representation_layer(self) -> tuple[nn.Module, nn.Module, int, str]:
        """(trunk, last Linear, how many leading parameter tensors are the trunk's, the last
        layer's name prefix): the trunk's output is the representation z."""
        module = self.module
        if not (isinstance(module, nn.Sequential) and isinstance(module[-1], nn.Linear)):
            raise ValueError(
                f"{type(module).__name__} declares no representation layer: it must be an "
                "nn.Sequential ending in nn.Linear (z is that layer's input)"
            )
        children = list(module.children())
        head = children[-1]
        split = len(self.names) - len(list(head.parameters()))
        return nn.Sequential(*children[:-1]), head, split, f"{len(children) - 1}."

    def forward_with_representation(
        self, flat: torch.Tensor, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[P], [B, *input] -> (z [B, D], logits [B, classes]): z is the penultimate
        activation, the input of the last Linear layer (no projection head). Every model
        `build_module` makes is an ``nn.Sequential`` ending in that layer: z is the hidden
        ReLU output of an MLP, the flattened (pooled) features of a CNN or ResNet, and the
        flattened input of a logistic model."""
        trunk, head, split, prefix = self._representation_layer
        params = list(self.unflatten(flat).items())
        z = functional_call(trunk, dict(params[:split]), (x,))
        last = {n.removeprefix(prefix): p for n, p in params[split:]}
        return z, functional_call(head, last, (z,))

    def forward_with_representation_stacked(
        self, params: torch.Tensor, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[C, P], [C, B, *input] -> (z [C, B, D], logits [C, B, classes])."""
        return self._forward_rep_stacked(params, x)

    @functools.cached_property
    def _forward_rep_stacked(self) -> Any:
        return vmap(self.forward_with_representation)


class MaxPool2x2(nn.Module):
    """``nn.MaxPool2d(2)`` (stride 2, no padding, floor mode) as the larger of each pair of
    rows, then of each pair of columns: the same values (a max is exact, and NaN wins as in
    max_pool2d), several times quicker than torch's CPU kernel on NCHW tensors, which also
    works out the indices of the maxima that only a backward pass needs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2  # floor mode: an odd edge drops
        rows = torch.maximum(x[..., 0:h:2, :w], x[..., 1:h:2, :w])
        return torch.maximum(rows[..., 0::2], rows[..., 1::2])


def _is_max_pool_2x2(layer: nn.Module) -> bool:
    return (
        isinstance(layer, nn.MaxPool2d)
        and layer.kernel_size in (2, (2, 2))
        and layer.stride in (2, (2, 2))
        and layer.padding in (0, (0, 0))
        and layer.dilation in (1, (1, 1))
        and not layer.ceil_mode
        and not layer.return_indices
    )


def for_inference(module: nn.Module) -> nn.Module:
    """A parameter-free copy's layers rearranged for forward passes without gradients, giving
    the same logits: each 2x2 max pool as `MaxPool2x2`, and a ReLU before it moved after it
    (max and ReLU commute: ReLU of the largest is the largest ReLU), so ReLU runs on a
    quarter of the values. Parameters keep their order (`Model.predict` relies on it)."""
    if not isinstance(module, nn.Sequential):
        return module
    layers: list[nn.Module] = []
    for layer in module:
        if not _is_max_pool_2x2(layer):
            layers.append(layer)
        elif layers and isinstance(layers[-1], nn.ReLU):
            layers[-1:] = [MaxPool2x2(), nn.ReLU(inplace=True)]
        else:
            layers.append(MaxPool2x2())
    return nn.Sequential(*layers)


class TrainingCost(NamedTuple):
    flops: float  # torch's own FLOP formulas (matmuls, convolutions, attention)
    floats: float  # elements of every tensor an op produced: a bound on activation memory


class _WorkCounter(TorchDispatchMode):
    """FLOPs and floats of the ops run inside it. It counts what `FlopCounterMode` counts
    without importing torch._dynamo (over a second, more than a small run takes)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # else torch wraps __torch_dispatch__ in a dynamo guard, importing dynamo

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.floats = 0

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        self.floats += sum(t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def build(
    config: ModelConfig,
    input_shape: tuple[int, ...],
    num_classes: int,
    seed: int,
    device: torch.device,
) -> Model:
    """Initialise with torch's default init under `seed`, without touching the global RNG."""
    with seeded(seed):
        module = build_module(config, input_shape, num_classes)
    return Model(module.to(device), input_shape)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's CPU generator seeded with `seed` inside, as it was after: modules built on the
    CPU get torch's default init under `seed`. (torch.manual_seed would also seed every CUDA
    device's generator, which fork_rng(devices=[]) does not restore, and costs a stack trace.)"""
    with torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        yield
