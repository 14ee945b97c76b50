"""OledFL: Li, Zhang, Wang, Yin and Shen, "OledFL: Unleashing the Potential of Decentralized
Federated Learning via Opposite Lookahead Enhancement", Algorithm 1.

Round t, at every node i in parallel (x_{i,K}^{-1} = x_i^0, so round 0's Ole term is 0):
  line 3:  x_{i,0}^t = x_i^t + beta (x_i^t - x_{i,K}^{t-1})   the opposite lookahead start
  lines 4-9: K local steps (lambda = 0: SGD, OledFL-SGD; lambda > 0: SAM with radius lambda,
           `local.sam_rho`, OledFL-SAM);
  line 10: z_i^t = x_{i,K}^t, kept for line 3 of the next round and sent to the neighbours;
  line 11: x_i^{t+1} = sum_j w_ij z_j^t.
One extra model per node (z), no extra communication. With beta = 0 this is DFedAvg (DFedSAM).

In matrix form the next start is X_0^{t+1} = (1 + beta) W Z^t - beta Z^t = W~ Z^t with
W~ = (1 + beta) W - beta I (the paper's Chebyshev remark): OledFL is DFedAvg mixing with W~,
which contracts disagreement only for a beta small enough for W's spectrum
(`flnet.sim.spectral`: a ring with weights 1/3 needs beta < 1/2). `protocol` warns when beta
breaks that for the W it builds (the first W of a time-varying topology; `OleWarning`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch

from flnet.algorithms import decentralized
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import OledflSgdConfig as Config
from flnet.errors import TopologyWarning
from flnet.learn.cohort import LossFn
from flnet.sim import topology
from flnet.sim.spectral import stability_problem
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:
    from flnet.learn.local import Learner

__all__ = [
    "Config",
    "State",
    "init",
    "progress",
    "protocol",
    "check",
    "ole_start",
]


class OleWarning(TopologyWarning):
    """beta makes (1 + beta) W - beta I unstable for this W (the CLI shows it as one line)."""


class OleConfig(decentralized.TimedGossipConfig, Protocol):
    @property
    def beta(self) -> float: ...


class State(NamedTuple):
    round: int  # rounds done
    x: torch.Tensor  # [n, P] every node's post-mix model x_i^t
    z: torch.Tensor  # [n, P] every node's last local result x_{i,K}^{t-1}


def init(learn: Learner, cfg: OleConfig) -> State:
    x = decentralized.same_start(learn)
    return State(0, x, x.clone())


def progress(state: State) -> Progress:
    return decentralized.progress(state.round, state.x, state)


def ole_start(x: torch.Tensor, z: torch.Tensor, beta: float) -> torch.Tensor:
    """Line 3: x + beta (x - z)."""
    return x + beta * (x - z)


def checked_gossip(
    world: AbstractWorld, cfg: OleConfig, mixing: topology.Mixing | None = None
) -> decentralized.Gossip:
    """The rounds' W, round 1's checked as every gossip protocol's and for beta's stability
    (a warning)."""
    gossip = decentralized.Gossip(world, cfg, algorithm="OledFL", mixing=mixing)
    if (problem := stability_problem(gossip.at(1).w, cfg.beta, gossip.eigenvalues)) is not None:
        if gossip.schedule is not None and gossip.schedule.varying:
            problem += (
                " (this is round 1's W of a time-varying graph: the product of the rounds' "
                "W~ may still contract, as on the OledFL paper's random topology)"
            )
        warnings.warn(problem, OleWarning, stacklevel=1)
    return gossip


def check(world: AbstractWorld, learn: Learner, cfg: OleConfig) -> None:
    """Round 1's checks of W and beta, without the run (`flnet validate`)."""
    checked_gossip(world, cfg)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: OleConfig,
    state: State,
    loss_fn: LossFn | None = None,
    mixing: topology.Mixing | None = None,
) -> Steps:
    """`loss_fn` and `mixing` (W given directly) are for tests."""
    gossip = checked_gossip(world, cfg, mixing)
    x, z = state.x, state.z
    for t in world.steps(state.round):
        g = gossip.at(t)
        start = ole_start(x, z, cfg.beta)  # line 3
        z, x, present = yield from decentralized.local_then_mix(  # lines 4-11
            world, learn, cfg.local, g, x, t, cfg.timeout_s, start=start, last_z=z, loss_fn=loss_fn
        )
        figures = gossip.figures(g) | decentralized.offline(present)
        world.publish(decentralized.progress(t, x, State(t, x, z), figures))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import oledfl as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
