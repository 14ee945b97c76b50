"""DFedSAM: Shi et al., "Improving the Model Consistency of Decentralized Federated Learning",
ICML 2023 (without its multiple-gossip variant DFedSAM-MGS, as OledFL runs it).

DFedAvg whose local steps are SAM steps: with g = g_i(x; eps),
  x_breve = x + rho g / ||g||   (the norm over the node's whole parameter vector),
  x <- x - eta g_i(x_breve; eps)   (the same minibatch),
which is `algorithm.local.sam_rho` (`flnet.learn.optim.sam`, two gradients a step); then the
gossip mix as DFedAvg's. OledFL's Algorithm 1 with beta = 0 and lambda = rho.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flnet.algorithms.configs import DfedsamConfig as Config
from flnet.algorithms.dfedavg import State, check, init, progress, protocol

__all__ = ["Config", "State", "init", "progress", "protocol", "check"]


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dfedsam as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
