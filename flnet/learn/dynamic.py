"""Dynamic regularisation, the maths FedDyn (Acar et al., ICLR 2021) and DRDM (Krouka et al.
2025, whose Eq. 3 is FedDyn's local objective and whose c is FedDyn's h) share: the clients'
regularised loss, their lagged-gradient update, and the server's h and model.

Rows are clients ``[C, P]``; `weights` [C] count a client's update that many times (DRDM's
draws with replacement), None once each.
"""

from __future__ import annotations

from typing import Any

import torch

from flnet.learn.cohort import LossFn, cross_entropy
from flnet.learn.models import Model


def dynamic_loss(alpha: float, anchor: torch.Tensor, base: LossFn = cross_entropy) -> LossFn:
    """Per-client L_k(w) - <g_k, w> + (alpha / 2) ||w - anchor||^2, g_k [C, P] the aux rows,
    anchor [P] the server model the round started from (FedDyn's local objective; DRDM's
    Eq. 3)."""

    def loss_fn(
        model: Model, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor, aux: Any = None
    ) -> torch.Tensor:
        linear = (params * aux).sum(1)
        return (
            base(model, params, x, y, None)
            - linear
            + 0.5 * alpha * (params - anchor).square().sum(1)
        )

    return loss_fn


def client_gradient(
    g: torch.Tensor,
    alpha: float,
    theta: torch.Tensor,
    start: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """grad L_k(theta_k^t) = g_k - alpha (theta_k^t - theta^{t-1}): g, theta [C, P], start [P];
    `weights` [C] applies the update that many times (DRDM's with_replacement draws)."""
    delta = _times(theta - start, weights)
    return g - alpha * delta


def _times(delta: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Each row of `delta` [C, P] times its count in `weights` [C] (None: once each)."""
    return delta if weights is None else delta * weights.to(delta.dtype)[:, None]


def server_h(
    h: torch.Tensor,
    alpha: float,
    num_clients: int,
    theta: torch.Tensor,
    start: torch.Tensor,
    weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """h - (alpha / m) sum_k w_k (theta_k - start), m all clients; theta [D, P], start [P];
    `weights` [D] counts each client (1 each when None; DRDM's draws with replacement)."""
    delta = _times(theta - start, weights)
    return h - alpha / num_clients * delta.sum(0)


def server_model(average: torch.Tensor, h: torch.Tensor, alpha: float) -> torch.Tensor:
    """theta = (mean of the delivered models) - h / alpha."""
    return average - h / alpha
