"""The rounds of the serverless methods whose nodes keep only their models (DFedAvg, DFedAvgM,
DFedSAM, DFL), written once below them so that none imports another: every node does its local
work from its model and mixes the results (`decentralized.local_then_mix`), then takes
`gossip_steps - 1` pure gossip steps (DFL's tau2; 1 for the others). The local steps' rule is
the algorithm's (`optimizer`, given the round: DFedAvgM's momentum at the round's learning
rate; SAM through `local.sam_rho`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import decentralized
from flnet.algorithms.base import Steps
from flnet.learn.cohort import LossFn
from flnet.learn.optim import GradientTransformation
from flnet.sim import topology
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int  # rounds done
    x: torch.Tensor  # [n, P] every node's model after the round's last mix


def init(learn: Learner, cfg: decentralized.TimedGossipConfig) -> State:
    return State(0, decentralized.same_start(learn))


def progress(state: State) -> Progress:
    return decentralized.progress(state.round, state.x, state)


def rounds(
    world: AbstractWorld,
    learn: Learner,
    cfg: decentralized.TimedGossipConfig,
    state: State,
    algorithm: str,
    *,
    optimizer: Callable[[int], GradientTransformation] | None = None,
    gossip_steps: int = 1,
    loss_fn: LossFn | None = None,
    mixing: topology.Mixing | None = None,
) -> Steps:
    """`algorithm` names the method in messages; `loss_fn` and `mixing` (W given directly,
    any real weights) are for tests."""
    schedule = decentralized.Gossip(world, cfg, algorithm=algorithm, mixing=mixing)
    x = state.x
    for t in world.steps(state.round):
        g = schedule.at(t)
        _, x, present = yield from decentralized.local_then_mix(  # local work, mix 1
            world,
            learn,
            cfg.local,
            g,
            x,
            t,
            cfg.timeout_s,
            optimizer=None if optimizer is None else optimizer(t),
            loss_fn=loss_fn,
        )
        for s in range(1, gossip_steps):  # gossip steps 2..tau2
            x = yield from decentralized.gossip(world, learn, g, x, t, cfg.timeout_s, s)
        figures = schedule.figures(g) | decentralized.offline(present)
        world.publish(decentralized.progress(t, x, State(t, x), figures))
