"""Client optimizers as pure functions over stacked parameters, in optax's shape.

A `GradientTransformation` is ``init(params [C, P]) -> state`` and
``update(grads [C, P], state, params [C, P], *, grad_fn) -> (updates [C, P], state)``; the
caller applies ``params + updates``. `grad_fn(params) -> grads` lets transforms that need extra
gradients (SAM, Delta-SGD) take them; `grads_per_step` tells the cost model how many a step
takes. The sign flip of descent happens only in `scale_by_learning_rate`.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import torch

GradFn = Callable[[torch.Tensor], torch.Tensor]


class GradientTransformation(NamedTuple):
    init: Callable[[torch.Tensor], Any]
    update: Callable[..., tuple[torch.Tensor, Any]]
    grads_per_step: int = 1


class EmptyState(NamedTuple):
    pass


class TraceState(NamedTuple):
    momentum: torch.Tensor  # [C, P]


def _stateless(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> GradientTransformation:
    def update(grads, state, params, *, grad_fn=None):
        return fn(grads, params), state
    return GradientTransformation(lambda params: EmptyState(), update)


def add_decayed_weights(weight_decay: float) -> GradientTransformation:
    """g + wd * w: L2 regularisation folded into the gradient, as `torch.optim.SGD` does."""
    return _stateless(lambda g, w: g + weight_decay * w)


def trace(momentum: float) -> GradientTransformation:
    """Heavy-ball buffer b = momentum * b + g (b starts at 0), as `torch.optim.SGD`."""

    def init(params):
        return TraceState(torch.zeros_like(params))

    def update(grads, state, params, *, grad_fn=None):
        buf = state.momentum.mul(momentum).add_(grads)
        return buf, TraceState(buf)

    return GradientTransformation(init, update)


def scale_by_learning_rate(lr: float) -> GradientTransformation:
    """The descent step: updates = -lr * g."""
    return _stateless(lambda g, w: g * (-lr))


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply transforms in order; the state is the tuple of their states."""

    def init(params):
        return tuple(t.init(params) for t in transforms)

    def update(grads, state, params, *, grad_fn=None):
        new_state = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params, grad_fn=grad_fn)
            new_state.append(s)
        return grads, tuple(new_state)

    return GradientTransformation(init, update, max(t.grads_per_step for t in transforms))


def sgd(lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> GradientTransformation:
    parts = []
    if weight_decay:
        parts.append(add_decayed_weights(weight_decay))
    if momentum:
        parts.append(trace(momentum))
    parts.append(scale_by_learning_rate(lr))
    return chain(*parts)


def from_config(local) -> GradientTransformation:
    """The client optimizer a scenario's `local:` section asks for."""
    opt = local.optimizer
    if opt.name == "sgd":
        return sgd(local.lr, opt.momentum, opt.weight_decay)
    raise ValueError(f"unknown optimizer {opt.name!r}")
