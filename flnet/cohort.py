"""Batched local training: every client of a cohort takes its local steps in one computation.

Parameters are stacked ``[C, P]``. One step gathers the cohort's minibatches ``[C, B, ...]``,
runs the vmapped forward pass, and differentiates the *sum* of the per-client mean losses: since
client c's loss depends only on row c, row c of that gradient is exactly client c's gradient.
Clients with fewer local steps than the longest are masked, not special-cased.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.nn import functional as F
from torch.utils._pytree import tree_map

from flnet.models import Model
from flnet.optim import GradientTransformation


class CohortResult(NamedTuple):
    params: torch.Tensor  # [C, P] after local training
    opt_state: Any  # per-client optimizer state, leaves [C, ...]
    loss: torch.Tensor  # [C] mean minibatch loss over the steps taken
    grad_evals: torch.Tensor  # [C] gradient evaluations (steps * optimizer.grads_per_step)


def loss_and_grad(model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor):
    """Per-client mean cross-entropy ``[C]`` and its gradient ``[C, P]``.

    params [C, P]; x [C, B, *input]; y [C, B].
    """
    with torch.enable_grad():
        w = params.detach().requires_grad_(True)
        logits = model.forward_stacked(w, x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none")
        loss = loss.view(y.shape).mean(1)
        (grad,) = torch.autograd.grad(loss.sum(), w)
    return loss.detach(), grad


def train(model: Model, x_data: torch.Tensor, y_data: torch.Tensor, params: torch.Tensor,
          batches: torch.Tensor, steps: torch.Tensor, optimizer: GradientTransformation,
          opt_state: Any = None) -> CohortResult:
    """Run each client's local steps.

    params [C, P]; batches [C, T, B] rows of `x_data`/`y_data`; steps [C] local steps per client
    (at most T); `opt_state` from ``optimizer.init`` or a previous round (None: fresh).
    """
    if opt_state is None:
        opt_state = optimizer.init(params)
    params = params.clone()
    loss_sum = torch.zeros(params.shape[0], device=params.device)
    uniform = bool((steps == steps.max()).all())
    for s in range(int(steps.max())):
        rows = batches[:, s]
        xb, yb = x_data[rows], y_data[rows]
        loss, grads = loss_and_grad(model, params, xb, yb)

        def grad_fn(p, xb=xb, yb=yb):
            return loss_and_grad(model, p, xb, yb)[1]

        updates, new_state = optimizer.update(grads, opt_state, params, grad_fn=grad_fn)
        if uniform:
            params = params + updates
            opt_state = new_state
            loss_sum += loss
        else:
            active = steps > s  # [C]
            params = torch.where(active[:, None], params + updates, params)
            opt_state = tree_map(lambda new, old: _where_rows(active, new, old),
                                 new_state, opt_state)
            loss_sum += torch.where(active, loss, torch.zeros_like(loss))
    steps_f = steps.to(loss_sum.dtype)
    return CohortResult(params, opt_state, loss_sum / steps_f,
                        steps * optimizer.grads_per_step)


def _where_rows(active: torch.Tensor, new, old):
    if not isinstance(new, torch.Tensor) or new.dim() == 0:
        return new
    mask = active.view(-1, *([1] * (new.dim() - 1)))
    return torch.where(mask, new, old)
