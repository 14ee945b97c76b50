"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Algorithm 1 (FederatedAveraging).

Each round t the server picks S_t, sends x_t; each client k in S_t runs tau local SGD steps
from x_t (ClientUpdate) and returns x^k_{t+1}; the server sets
x_{t+1} = sum_{k in S_t} (n_k / m_t) x^k_{t+1} with m_t = sum_{k in S_t} n_k (the arXiv v4
form of line 8). Only clients whose upload was delivered count: a client dropped at the
deadline, or beyond the first K under over-selection, is left out of the sum and out of m_t.
The sum runs over the delivered clients in cohort order (the set S_t has no order), so which
upload arrived first never changes the model's last bits.

With `server_optimizer` (Reddi et al. 2021, `flnet.learn.server_optim`) the server instead
takes a step of that optimizer along the delivered clients' mean delta, x^k_{t+1} - x_t; with
`server` another rule replaces line 8's weighted mean (`flnet.algorithms.server`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from flnet.algorithms import central
from flnet.algorithms.base import Steps
from flnet.algorithms.central import State, init, progress
from flnet.algorithms.configs import FedAvgConfig as Config
from flnet.learn.cohort import LossFn
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner

__all__ = ["Config", "State", "init", "progress", "protocol"]


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    local_loss: Callable[[torch.Tensor], LossFn] | None = None,
) -> Steps:
    """Algorithm 1's rounds (`central.rounds`); the stragglers of `cfg.partial_work` are
    dropped, as in FedProx's code's FedAvg. `local_loss` replaces the clients' loss (tests)."""
    return central.rounds(world, learn, cfg, state, local_loss)


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import fedavg as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
