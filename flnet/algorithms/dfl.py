"""DFL: Liu, Chen and Zhang, "Decentralized Federated Learning: Balancing Communication and
Computing Costs", Algorithm 1.

Every round is tau = tau1 + tau2 iterations (eq. 5, X_{t+1} = (X_t - eta G'_t) C_t):
  lines 3-4: tau1 local SGD steps at every node, w <- w - eta g(w)  (`local.steps` = tau1);
  lines 5-6: tau2 gossip steps, w_i <- sum_j c_ji w_j, no gradient (`gossip_steps` = tau2).
The paper's trailing partial round (T - K tau <= tau1 local steps) is left out: a run is whole
rounds (`run.rounds`). Each gossip step is one exchange of full models; the first waits for the
node's local compute. tau2 = 1 is C-SGD as the paper runs it. The average never moves in a
gossip step (a doubly stochastic C); the model judged is that average u_t.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flnet.algorithms import decentralized, gossip_rounds
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DflConfig as Config
from flnet.algorithms.gossip_rounds import State, init, progress
from flnet.learn.cohort import LossFn
from flnet.sim import topology
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:
    from flnet.learn.local import Learner

NAME = "DFL"  # as its messages name it

__all__ = ["Config", "State", "init", "progress", "protocol", "check"]


def check(world: AbstractWorld, learn: Learner, cfg: Config) -> None:
    """Round 1's checks of W, without the run (`flnet validate`)."""
    decentralized.check(world, cfg, NAME)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    loss_fn: LossFn | None = None,
    mixing: topology.Mixing | None = None,
) -> Steps:
    """tau1 local steps, then tau2 gossip steps (`gossip_rounds.rounds`)."""
    return gossip_rounds.rounds(
        world,
        learn,
        cfg,
        state,
        NAME,
        gossip_steps=cfg.gossip_steps,
        loss_fn=loss_fn,
        mixing=mixing,
    )


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dfl as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
