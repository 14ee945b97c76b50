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

from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import decentralized
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DflConfig as Config
from flnet.learn.cohort import LossFn
from flnet.sim import topology
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:
    from flnet.learn.local import Learner

NAME = "DFL"  # as its messages name it

__all__ = ["Config", "State", "init", "progress", "protocol", "check"]


class State(NamedTuple):
    round: int  # rounds done
    x: torch.Tensor  # [n, P] every node's model after the round's last gossip step


def init(learn: Learner, cfg: Config) -> State:
    return State(0, decentralized.same_start(learn))


def progress(state: State) -> Progress:
    return decentralized.progress(state.round, state.x, state)


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
    gossip = decentralized.Gossip(world, cfg, algorithm=NAME, mixing=mixing)
    x = state.x
    for t in world.steps(state.round):
        g = gossip.at(t)
        _, x, present = yield from decentralized.local_then_mix(  # tau1 local steps, step 1
            world, learn, cfg.local, g, x, t, cfg.timeout_s, loss_fn=loss_fn
        )
        for s in range(1, cfg.gossip_steps):  # gossip steps 2..tau2
            x = yield from decentralized.gossip(world, learn, g, x, t, cfg.timeout_s, s)
        figures = gossip.figures(g) | decentralized.offline(present)
        world.publish(decentralized.progress(t, x, State(t, x), figures))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dfl as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
