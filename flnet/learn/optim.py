"""Client optimizers as pure functions over stacked parameters, in optax's shape.

A `GradientTransformation` is ``init(params [C, P]) -> state`` and
``update(grads [C, P], state, params [C, P], *, grad_fn, loss, aux) -> (updates [C, P], state)``;
the caller applies ``params + updates``. Every row is one client, so one call steps a whole
cohort. Three extra inputs serve the methods that need more than a gradient:

- ``grad_fn(params [C, P]) -> grads [C, P]`` evaluates the gradient at other points on the
  *same* minibatch (SAM's ascent point, Delta-SGD's previous iterate). Each call is a gradient
  evaluation that the trainer counts and the cost model charges; `grads_per_step` declares the
  most a step takes.
- ``loss [C]`` is each client's minibatch loss at `params` (SPS's f_i(x)); the trainer has it
  anyway, so passing it costs nothing (optax calls it ``value``).
- ``aux`` is the per-client data the caller handed the trainer (`Trainer.train(aux=...)`, a
  pytree of ``[C, ...]`` rows sliced with the cohort), e.g. SCAFFOLD's correction c - c_i for
  `add_correction`; None when there is none.

States are NamedTuples whose tensors have the clients as their first dimension, so a trainer can
mask, gather and scatter clients' rows.

Buffers are handed over, as JAX donates them: `update` may overwrite `grads` and typically
returns it as the updates, and the caller may overwrite the updates and update `params` in
place afterwards. So a transform never returns a tensor it keeps in its state, and copies
`params` if it keeps them. (On small models a fresh ``[C, P]`` tensor per transform and step
costs more than its arithmetic, in page faults and cache misses.)

A transform may also offer ``apply(grads, state, params, *, grad_fn, loss, aux) -> state``: the
same step with the updates added to `params` in place, without materialising them (the descent
step ``params.add_(grads, alpha=-lr)`` is one pass over memory where update-then-add is two).
`chain` offers it when its last transform does; callers use it where it exists (the trainer),
else ``params += update(...)[0]``. The two agree within float rounding (the fused multiply-add
rounds once), not bit for bit.

A transform whose whole step is plain descent, ``params -= lr * grads`` with no state and no
other input (`scale_by_learning_rate`, or a `chain` of it alone: `sgd` without momentum or
weight decay), says so in ``plain_lr``; an engine that computes the gradient piece by piece
may then take that step itself, without a [C, P] gradient read back (`DenseStack.descend`:
each weight's step fused into the GEMM of its gradient; equal within float rounding).

The sign flip of descent happens only in `scale_by_learning_rate`. A gradient-only term
(FedProx's mu (w - x_t), SCAFFOLD's c - c_i) is one more transform at the front of a `chain`;
a term that `grad_fn` must also see (because Delta-SGD or SAM evaluate it elsewhere) belongs
in the trainer's loss instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from flnet.config import LocalConfig

GradFn = Callable[[torch.Tensor], torch.Tensor]


class GradientTransformation(NamedTuple):
    init: Callable[[torch.Tensor], Any]
    update: Callable[..., tuple[torch.Tensor, Any]]
    grads_per_step: int = 1  # most gradient evaluations a step takes, the one given included
    apply: Callable[..., Any] | None = None  # update and add to params in place (see above)
    plain_lr: float | None = None  # the whole step is params -= lr * grads, stateless (below)


def step(
    transform: GradientTransformation,
    grads: torch.Tensor,
    state: Any,
    params: torch.Tensor,
    *,
    grad_fn: GradFn | None = None,
    loss: torch.Tensor | None = None,
    aux: Any = None,
) -> Any:
    """One optimizer step on `params` in place; returns the new state. Through the transform's
    `apply` where it has one, else ``params += updates``. May overwrite `grads`."""
    if transform.apply is not None:
        return transform.apply(grads, state, params, grad_fn=grad_fn, loss=loss, aux=aux)
    updates, state = transform.update(grads, state, params, grad_fn=grad_fn, loss=loss, aux=aux)
    params.add_(updates)
    return state


class EmptyState(NamedTuple):
    pass


class TraceState(NamedTuple):
    momentum: torch.Tensor  # [C, P]


class AdamState(NamedTuple):
    # [C] steps taken, for the bias correction (the field shadows tuple.count)
    count: torch.Tensor  # type: ignore[assignment]  # a field named like a tuple method
    mu: torch.Tensor  # [C, P] first moment
    nu: torch.Tensor  # [C, P] second moment


class AdagradState(NamedTuple):
    sum_of_squares: torch.Tensor  # [C, P]


class DeltaSgdState(NamedTuple):
    prev_params: torch.Tensor  # [C, P] x_{k-1}
    has_prev: torch.Tensor  # [C] bool: x_{k-1} exists (false before a client's first step)
    eta: torch.Tensor  # [C] eta_{k-1}
    theta: torch.Tensor  # [C] theta_{k-1}


def _stateless(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> GradientTransformation:
    def update(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        return fn(grads, params), state

    return GradientTransformation(lambda params: EmptyState(), update)


def _col(v: torch.Tensor) -> torch.Tensor:
    """[C] -> [C, 1], to scale each client's row."""
    return v.unsqueeze(1)


def add_decayed_weights(weight_decay: float) -> GradientTransformation:
    """g + wd * w: L2 regularisation folded into the gradient, as `torch.optim` does."""
    return _stateless(lambda g, w: g.add_(w, alpha=weight_decay))


def trace(momentum: float) -> GradientTransformation:
    """Heavy-ball buffer b = momentum * b + g (b starts at 0), as `torch.optim.SGD`."""
    return _momentum(momentum, lambda grads, buf: grads.copy_(buf))


def nesterov(momentum: float) -> GradientTransformation:
    """Nesterov's momentum as `torch.optim.SGD(nesterov=True)`: b = momentum * b + g, step
    along g + momentum * b (b starts at 0). With x -= lr * that, this is y_{k+1} = x_k - lr g_k,
    x_{k+1} = y_{k+1} + momentum (y_{k+1} - y_k): DFedAvgM's local step (Sun et al.)."""
    return _momentum(momentum, lambda grads, buf: grads.add_(buf, alpha=momentum))


def _momentum(
    momentum: float, along: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> GradientTransformation:
    """The buffer b = momentum * b + g (b starts at 0) and the step `along(g, b)`, into g."""

    def init(params: torch.Tensor) -> TraceState:
        return TraceState(torch.zeros_like(params))

    def update(
        grads: torch.Tensor,
        state: TraceState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, TraceState]:
        buf = state.momentum.mul(momentum).add_(grads)
        return along(grads, buf), TraceState(buf)

    return GradientTransformation(init, update)


def scale_by_adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> GradientTransformation:
    """m_hat / (sqrt(v_hat) + eps) with bias-corrected moments (Kingma & Ba 2015, Alg. 1)."""

    def init(params: torch.Tensor) -> AdamState:
        return AdamState(
            torch.zeros(params.shape[0], dtype=params.dtype, device=params.device),
            torch.zeros_like(params),
            torch.zeros_like(params),
        )

    def update(
        grads: torch.Tensor,
        state: AdamState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, AdamState]:
        count = state.count + 1
        mu = state.mu.mul(b1).add_(grads, alpha=1 - b1)
        nu = state.nu.mul(b2).addcmul_(grads, grads, value=1 - b2)
        denom = nu.div(_col(1 - b2**count)).sqrt_().add_(eps)
        updates = torch.div(mu, _col(1 - b1**count), out=grads).div_(denom)
        return updates, AdamState(count, mu, nu)

    return GradientTransformation(init, update)


def scale_by_rss(eps: float = 1e-10, initial_accumulator: float = 0.0) -> GradientTransformation:
    """Adagrad: g / (sqrt(sum of squared gradients) + eps) (Duchi et al. 2011), as torch."""

    def init(params: torch.Tensor) -> AdagradState:
        return AdagradState(torch.full_like(params, initial_accumulator))

    def update(
        grads: torch.Tensor,
        state: AdagradState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, AdagradState]:
        acc = state.sum_of_squares.addcmul(grads, grads)
        return grads.div_(acc.sqrt().add_(eps)), AdagradState(acc)

    return GradientTransformation(init, update)


def scale_by_polyak(
    c: float = 0.5, f_star: float = 0.0, max_step: float | None = None, eps: float = 1e-8
) -> GradientTransformation:
    """SPS (Loizou et al. 2021): g * (f_i(x) - f*) / (c ||g||^2 + eps), optionally capped.

    A loss below f* gives step 0; `max_step` is SPS_max's cap (None: none, as in the Delta-SGD
    paper's SPS runs).
    """

    def update(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        if loss is None:
            raise ValueError("scale_by_polyak needs the minibatch loss (update(..., loss=))")
        step = (loss - f_star).clamp_min(0) / (c * grads.square().sum(1) + eps)  # [C]
        if max_step is not None:
            step = step.clamp_max(max_step)
        return grads.mul_(_col(step)), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_delta(
    eta0: float = 0.2, theta0: float = 1.0, gamma: float = 2.0, delta: float = 0.1
) -> GradientTransformation:
    """Delta-SGD's locality-adaptive step (Kim et al., "Adaptive Federated Learning with
    Auto-Tuned Clients", Algorithm 1 with the delta of their experiments): eta_k * g.

        eta_k   = min(gamma ||x_k - x_{k-1}|| / (2 ||g(x_k) - g(x_{k-1})||),
                      sqrt(1 + delta theta_{k-1}) eta_{k-1})
        theta_k = eta_k / eta_{k-1}

    Both gradients are taken on the current minibatch (the paper's "same batch" option), so a
    step after the first costs two gradients. Norms are over each client's whole parameter
    vector. The first step uses eta0 as it is: Algorithm 1 (lines 6 and 8) steps with
    eta_{t,0} = eta0, whereas the authors' code grows it to eta0 sqrt(1 + delta theta0) first;
    the paper's text decides; so does delta = 0.1 of its experiments (the code's default is
    0.02). As in their code, the curvature term is skipped while ||x_k - x_{k-1}|| or
    ||g(x_k) - g(x_{k-1})|| is 0 (it carries no information). Algorithm 1 resets the state
    every round; kept across rounds (``optimizer_state: persist``), a client's first step of a
    round compares its new start point with its last iterate of the round before.
    """

    def init(params: torch.Tensor) -> DeltaSgdState:
        c = params.shape[0]
        full = lambda v: torch.full((c,), v, dtype=params.dtype, device=params.device)  # noqa: E731
        return DeltaSgdState(
            params.clone(),
            torch.zeros(c, dtype=torch.bool, device=params.device),
            full(eta0),
            full(theta0),
        )

    def update(
        grads: torch.Tensor,
        state: DeltaSgdState,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, DeltaSgdState]:
        eta, theta = state.eta, state.theta
        if bool(state.has_prev.any()):
            if grad_fn is None:
                raise ValueError("scale_by_delta needs grad_fn (the gradient at x_{k-1})")
            dx = (params - state.prev_params).norm(dim=1)
            dg = (grads - grad_fn(state.prev_params)).norm(dim=1)
            curvature = torch.where(
                (dx > 0) & (dg > 0), gamma * dx / (2 * dg), torch.full_like(dx, float("inf"))
            )
            new_eta = torch.minimum(curvature, (1 + delta * theta).sqrt() * eta)
            theta = torch.where(state.has_prev, new_eta / eta, theta)
            eta = torch.where(state.has_prev, new_eta, eta)
        done = torch.ones_like(state.has_prev)
        return grads.mul_(_col(eta)), DeltaSgdState(params.clone(), done, eta, theta)

    return GradientTransformation(init, update, grads_per_step=2)


def add_correction(get: Callable[[Any], torch.Tensor] = lambda aux: aux) -> GradientTransformation:
    """g + get(aux): a per-client gradient correction ``[C, P]`` handed in as the trainer's aux
    rows (SCAFFOLD's c - c_i, Karimireddy et al. 2020, Algorithm 1 line 10)."""

    def update(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        if aux is None:
            raise ValueError("add_correction needs the trainer's aux rows (train(..., aux=))")
        return grads.add_(get(aux)), state

    return GradientTransformation(lambda params: EmptyState(), update)


def scale_by_learning_rate(lr: float) -> GradientTransformation:
    """The descent step: updates = -lr * g; applied in place as params += -lr * g, one fused
    multiply-add per entry."""

    def apply(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> Any:
        params.add_(grads, alpha=-lr)
        return state

    return _stateless(lambda g, w: g.mul_(-lr))._replace(apply=apply, plain_lr=lr)


def chain(*transforms: GradientTransformation) -> GradientTransformation:
    """Apply transforms in order; the state is the tuple of their states."""

    def init(params: torch.Tensor) -> tuple[Any, ...]:
        return tuple(t.init(params) for t in transforms)

    def update(
        grads: torch.Tensor,
        state: tuple[Any, ...],
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, tuple[Any, ...]]:
        new_state = []
        for t, s in zip(transforms, state):
            grads, s = t.update(grads, s, params, grad_fn=grad_fn, loss=loss, aux=aux)
            new_state.append(s)
        return grads, tuple(new_state)

    *first, last = transforms

    def apply(
        grads: torch.Tensor,
        state: tuple[Any, ...],
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[Any, ...]:
        assert last.apply is not None  # offered only then
        new_state = []
        for t, s in zip(first, state):
            grads, s = t.update(grads, s, params, grad_fn=grad_fn, loss=loss, aux=aux)
            new_state.append(s)
        s = last.apply(grads, state[-1], params, grad_fn=grad_fn, loss=loss, aux=aux)
        return (*new_state, s)

    return GradientTransformation(
        init,
        update,
        max(t.grads_per_step for t in transforms),
        apply if last.apply is not None else None,
        transforms[0].plain_lr if len(transforms) == 1 else None,
    )


def sam(inner: GradientTransformation, rho: float) -> GradientTransformation:
    """Sharpness-aware minimisation (Foret et al. 2021) around any optimizer.

    The inner optimizer sees the SAM gradient g(x + rho g(x) / ||g(x)||) (per-client norm) in
    place of g(x), and a `grad_fn` that answers with SAM gradients too, so an inner method that
    probes other points (Delta-SGD) stays consistent. Costs twice the inner's gradients.
    """

    def ascent(params: torch.Tensor, grads: torch.Tensor, grad_fn: GradFn) -> torch.Tensor:
        norm = grads.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return grad_fn(params + (rho / norm) * grads)

    def sam_inputs(
        params: torch.Tensor, grads: torch.Tensor, grad_fn: GradFn | None
    ) -> tuple[torch.Tensor, GradFn]:
        """The SAM gradient at `params` and a `grad_fn` answering with SAM gradients."""
        if grad_fn is None:
            raise ValueError("sam needs grad_fn (the gradient at the ascent point)")
        return ascent(params, grads, grad_fn), lambda p: ascent(p, grad_fn(p), grad_fn)

    def update(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> tuple[torch.Tensor, Any]:
        grads, sam_grad_fn = sam_inputs(params, grads, grad_fn)
        return inner.update(grads, state, params, grad_fn=sam_grad_fn, loss=loss, aux=aux)

    def apply(
        grads: torch.Tensor,
        state: Any,
        params: torch.Tensor,
        *,
        grad_fn: GradFn | None = None,
        loss: torch.Tensor | None = None,
        aux: Any = None,
    ) -> Any:
        assert inner.apply is not None  # offered only then
        grads, sam_grad_fn = sam_inputs(params, grads, grad_fn)
        return inner.apply(grads, state, params, grad_fn=sam_grad_fn, loss=loss, aux=aux)

    return GradientTransformation(
        inner.init, update, 2 * inner.grads_per_step, apply if inner.apply is not None else None
    )


# ---------------------------------------------------------------- named optimizers


def _with_weight_decay(
    weight_decay: float, *rest: GradientTransformation
) -> GradientTransformation:
    return chain(*((add_decayed_weights(weight_decay),) if weight_decay else ()), *rest)


def sgd(
    lr: float, momentum: float = 0.0, weight_decay: float = 0.0, use_nesterov: bool = False
) -> GradientTransformation:
    """`torch.optim.SGD(lr, momentum, weight_decay, nesterov=use_nesterov)` (no dampening)."""
    accelerate = nesterov if use_nesterov else trace
    return _with_weight_decay(
        weight_decay, *((accelerate(momentum),) if momentum else ()), scale_by_learning_rate(lr)
    )


def adam(
    lr: float = 1e-3,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
) -> GradientTransformation:
    """`torch.optim.Adam(lr, (b1, b2), eps, weight_decay)`."""
    return _with_weight_decay(weight_decay, scale_by_adam(b1, b2, eps), scale_by_learning_rate(lr))


def adagrad(
    lr: float = 1e-2,
    eps: float = 1e-10,
    initial_accumulator: float = 0.0,
    weight_decay: float = 0.0,
) -> GradientTransformation:
    """`torch.optim.Adagrad(lr, initial_accumulator_value=..., eps=..., weight_decay=...)`."""
    return _with_weight_decay(
        weight_decay, scale_by_rss(eps, initial_accumulator), scale_by_learning_rate(lr)
    )


def sps(
    c: float = 0.5, f_star: float = 0.0, max_step: float | None = None, eps: float = 1e-8
) -> GradientTransformation:
    """SGD with the stochastic Polyak step size; no learning rate of its own."""
    return chain(scale_by_polyak(c, f_star, max_step, eps), scale_by_learning_rate(1.0))


def delta_sgd(
    eta0: float = 0.2, theta0: float = 1.0, gamma: float = 2.0, delta: float = 0.1
) -> GradientTransformation:
    """SGD with Delta-SGD's step size; eta0 plays the learning rate's part."""
    return chain(scale_by_delta(eta0, theta0, gamma, delta), scale_by_learning_rate(1.0))


def from_config(local: LocalConfig, round: int | None = None) -> GradientTransformation:
    """The client optimizer a scenario's `local:` section asks for (`flnet.config`), with the
    learning rate of round `round` under `local.lr_schedule` (`LocalConfig.lr_at`; None: the
    first round's). Made once per section and learning rate (they are frozen, and a transform
    holds no state of its own): without a schedule once a run, not every round."""
    return _made(local, local.lr_at(round))


@functools.lru_cache(maxsize=16)
def _made(local: LocalConfig, lr: float | None) -> GradientTransformation:
    """`from_config` with the learning rate `lr` (None: the optimizer sets its own step)."""
    opt = local.optimizer
    if opt.name == "sgd":
        assert lr is not None  # sgd, adam and adagrad have one (LocalConfig.lr_at)
        base = sgd(lr, opt.momentum, opt.weight_decay)
    elif opt.name == "adam":
        assert lr is not None
        base = adam(lr, opt.b1, opt.b2, opt.eps, opt.weight_decay)
    elif opt.name == "adagrad":
        assert lr is not None
        base = adagrad(lr, opt.eps, opt.initial_accumulator, opt.weight_decay)
    elif opt.name == "sps":
        base = sps(opt.c, opt.f_star, opt.max_step, opt.eps)
    elif opt.name == "delta_sgd":
        base = delta_sgd(opt.eta0, opt.theta0, opt.gamma, opt.delta)
    else:
        raise ValueError(f"unknown optimizer {opt.name!r}")
    return base if local.sam_rho is None else sam(base, local.sam_rho)
