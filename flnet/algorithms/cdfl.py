"""C-DFL: Liu, Chen and Zhang, "Decentralized Federated Learning: Balancing Communication and
Computing Costs", Algorithm 2: DFL whose gossip steps are CHOCO-Gossip steps (Koloskova et al.
2019) on compressed messages.

Every node i keeps public copies w_hat_j of itself and its neighbours (line 1: all 0), carried
across rounds and untouched by local steps. Round k:
  line 4:  tau1 local SGD steps (`local.steps`);
  then tau2 gossip steps (`gossip_steps`), each
  line 6:  w_i <- w_i + gamma sum_j c_ji (w_hat_j - w_hat_i)   (the copies every node holds)
  line 7:  q_i = Q(w_i - w_hat_i)                               (`flnet.learn.compress`)
  line 9:  send q_i to the neighbours, receive theirs           (one exchange)
  line 11: w_hat_j <- w_hat_j + q_j.
With Q = identity and gamma = 1, after each step w_hat = w, so steps 2..tau2 are DFL's exact
gossip; the first step of a round mixes the copies from the end of the last round (before the
local steps), and round 1's first step mixes zeros: C-DFL(identity, 1) is not DFL (the DFL digest
saw this in its pilot; a test pins it). `order: compress_first` runs CHOCO-SGD's order instead
(lines 7-11, then line 6 with the new copies), which with identity and gamma = 1 is DFL exactly.

Compression draws are keyed (round, gossip step, node). Every q must arrive: a lost one would
leave the copies of w_hat_j at j's neighbours apart, so C-DFL has no timeout, and a node may
not sit a step out: the scenario refuses message losses, availability other than `always` and
batteries for it (`flnet.scenario`). The model judged
is the nodes' average of w.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy
import torch

from flnet.algorithms import decentralized
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import CdflConfig as Config
from flnet.errors import FlnetError
from flnet.learn.aggregate import mix
from flnet.learn.cohort import LossFn
from flnet.learn.compress import compress
from flnet.sim import topology
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:
    from flnet.learn.local import Learner

NAME = "C-DFL"  # as its messages name it

__all__ = ["Config", "State", "init", "progress", "protocol", "check", "consensus_step"]


class State(NamedTuple):
    round: int  # rounds done
    x: torch.Tensor  # [n, P] every node's model w_i
    x_hat: torch.Tensor  # [n, P] the public copies w_hat_i (held by i and its neighbours)


def init(learn: Learner, cfg: Config) -> State:
    x = decentralized.same_start(learn)
    return State(0, x, torch.zeros_like(x))


def progress(state: State) -> Progress:
    return decentralized.progress(state.round, state.x, state)


def consensus_step(
    w: topology.Mixing, x: torch.Tensor, x_hat: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Line 6: w_i + gamma sum_j c_ji (w_hat_j - w_hat_i) = x + gamma (C X_hat - X_hat) (rows)."""
    return x + gamma * (mix(w, x_hat) - x_hat)


def gossip_step(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    g: decentralized.Graph,
    x: torch.Tensor,
    x_hat: torch.Tensor,
    flops: np.ndarray | float,
    t: int,
    s: int,
) -> Generator[simpy.Event, Any, tuple[torch.Tensor, torch.Tensor]]:
    """One CHOCO-Gossip step (s-th of round t) in the configured order: (x, x_hat) after it."""
    gamma = cfg.consensus_step
    if cfg.order == "paper":
        x = consensus_step(g.w, x, x_hat, gamma)  # line 6
    draws = lambda stream: [world.generator(stream, t, s, int(i)) for i in g.nodes]  # noqa: E731
    sent = compress(cfg.compression, x - x_hat, draws, learn.wire.charged_params)  # line 7
    done = yield from decentralized.send(world, g, sent.q, sent.bits, flops, t, None, substep=s)
    if done.arrived is not None:  # no timeout, no losses (the scenario refuses them)
        raise FlnetError(f"C-DFL round {t}: a compressed message was lost")
    x_hat = x_hat + sent.q  # line 11
    if cfg.order == "compress_first":
        x = consensus_step(g.w, x, x_hat, gamma)
    return x, x_hat


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
    x, x_hat = state.x, state.x_hat
    for t in world.steps(state.round):
        g = gossip.at(t)
        work = learn.local_train(g.nodes, x, cfg.local, t, loss_fn=loss_fn)  # line 4
        learn.train_loss.add(work.loss)  # every node trains: their mean
        x, flops = work.params, work.flops
        for s in range(cfg.gossip_steps):
            x, x_hat = yield from gossip_step(world, learn, cfg, g, x, x_hat, flops, t, s)
            flops = np.zeros_like(flops)  # only the first step waits for the local work
        if work.keep is not None:  # no timeout: every node's compute completed
            work.keep.commit(g.nodes)
        world.publish(decentralized.progress(t, x, State(t, x, x_hat), gossip.figures(g)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import cdfl as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
