"""Models, used functionally: parameters live outside the module as a flat vector.

One client's parameters are ``[P]``; a cohort's are stacked ``[C, P]``. `Model.forward` runs one
client's parameters on a batch; `Model.forward_stacked` vmaps it over the cohort.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.utils.flop_counter import FlopCounterMode


def build_module(config, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    in_features = math.prod(input_shape)
    if config.kind == "logistic":
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, num_classes))
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for hidden in config.hidden:
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


class Model:
    """A module and the layout of its flat parameter vector."""

    def __init__(self, module: nn.Module, input_shape: tuple[int, ...]):
        if list(module.buffers()):
            raise ValueError("models with buffers (e.g. BatchNorm) are not supported; "
                             "use GroupNorm")
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
        return {n: t.view(s) for n, t, s in zip(self.names, flat.split(self.sizes, -1),
                                                self.shapes)}

    def forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[P], [B, *input] -> [B, classes] logits."""
        return functional_call(self.module, self.unflatten(flat), (x,))

    def forward_stacked(self, params: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[C, P], [C, B, *input] -> [C, B, classes]."""
        return self._forward_stacked(params, x)

    def training_flops_per_sample(self) -> float:
        """FLOPs of forward + backward (weight gradients) for one sample, counted by torch."""
        batch = 8
        device = next(self.module.parameters()).device
        x = torch.zeros((batch, *self.input_shape), device=device)
        params = self.init_params().requires_grad_(True)
        with FlopCounterMode(display=False) as counter:
            logits = self.forward(params, x)
            loss = nn.functional.cross_entropy(
                logits, torch.zeros(batch, dtype=torch.long, device=device))
            torch.autograd.grad(loss, params)
        return counter.get_total_flops() / batch


def build(config, input_shape: tuple[int, ...], num_classes: int, seed: int,
          device: torch.device) -> Model:
    """Initialise with torch's default init under `seed`, without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = build_module(config, input_shape, num_classes)
    return Model(module.to(device), input_shape)
