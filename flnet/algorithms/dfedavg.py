"""DFedAvg: Sun, Li and Wang, "Decentralized Federated Averaging", IEEE TPAMI 2022 (the
baseline of OledFL, Li et al.; OledFL's Algorithm 1 with beta = 0 and lambda = 0).

No server: every client is a node of the graph W. Round t, at every node i in parallel:
  x_{i,0} = x_i^t;                                   start from the post-mix model
  K local SGD steps x_{i,k+1} = x_{i,k} - eta g_i(x_{i,k}; eps_{i,k});
  z_i = x_{i,K}, sent to the neighbours;
  x_i^{t+1} = sum_j W_ij z_j.                        mix (`gossip_rounds`)
In matrix form X^{t+1} = W Z^t. The model judged is the nodes' average.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flnet.algorithms import decentralized, gossip_rounds
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DfedavgConfig as Config
from flnet.algorithms.gossip_rounds import State, init, progress
from flnet.learn.cohort import LossFn
from flnet.sim import topology
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:
    from flnet.learn.local import Learner

NAME = "DFedAvg"  # as its messages name it

__all__ = ["Config", "State", "init", "progress", "protocol", "check"]


def check(world: AbstractWorld, learn: Learner, cfg: decentralized.TimedGossipConfig) -> None:
    """Round 1's checks of W, without the run (`flnet validate`)."""
    decentralized.check(world, cfg, NAME)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: decentralized.TimedGossipConfig,
    state: State,
    loss_fn: LossFn | None = None,
    mixing: topology.Mixing | None = None,
) -> Steps:
    """K local steps, one mix (`gossip_rounds.rounds`); `loss_fn` and `mixing` (W given
    directly, any real weights) are for tests."""
    return gossip_rounds.rounds(world, learn, cfg, state, NAME, loss_fn=loss_fn, mixing=mixing)


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dfedavg as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
