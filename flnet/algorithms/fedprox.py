"""FedProx: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020,
Algorithm 2.

FedAvg whose clients minimise h_k(w; x_t) = F_k(w) + (mu / 2) ||w - x_t||^2 instead of F_k(w).
The proximal term is part of the loss, not a gradient correction, so optimizers that evaluate
gradients elsewhere (Delta-SGD's previous iterate, SAM's ascent point) see it there too, as the
Delta-SGD authors' `update_weights_prox` does. Algorithm 2 lets a device stop early (gamma-inexact
solutions); here every client runs its full local work unless `partial_work` says otherwise
(`flnet.algorithms.partial`: the steps that fit before a deadline, or the code's random epochs
for stragglers), and the partial updates are aggregated like the others. The server aggregates
exactly as FedAvg (sample-size weighted mean of the delivered models, or its `server` rule or
`server_optimizer`): both run `central.rounds`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from flnet.algorithms import central
from flnet.algorithms.base import Steps
from flnet.algorithms.central import State, init, progress
from flnet.algorithms.configs import FedProxConfig as Config
from flnet.learn.cohort import ProximalLoss
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner

__all__ = ["Config", "State", "init", "progress", "protocol", "proximal_loss"]


def proximal_loss(mu: float, anchor: torch.Tensor) -> ProximalLoss:
    """Per-client cross-entropy + (mu / 2) ||w - anchor||^2; anchor [P] is x_t. Through the
    model's hand-derived engine where it has one (`cohort.ProximalLoss.over`), else autograd."""
    return ProximalLoss(mu, anchor)


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    return central.rounds(
        world,
        learn,
        cfg,
        state,
        local_loss=lambda x: proximal_loss(cfg.mu, x),
        partial_updates=True,  # partial work (cfg.partial_work) is aggregated, Section 5.2
    )


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import fedprox as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
