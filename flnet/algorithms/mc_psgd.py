"""MC-PSGD: Ding et al., "Distributed Optimization over Block-Cyclic Data", Algorithm 2
(Multi-Chain Parallel SGD).

Two kinds of chain. The block-mixed chain x is MM-PSGD's (FedAvg's): it trains on whichever
block is in force. Block-separate chain m trains only in block m's rounds, with its own step size
eta: it is stored as W[m] (w_m, line 7) while other blocks run and resumed from W[m] at block m's
next visit (lines 13-16), so a round in block m starts the separate chain from W[m]. Each round
every client takes I local SGD steps on both chains on the same minibatches (g and G at the same
xi, line 18); the server sets x = (1/N) sum x^i and W[m] = y = (1/N) sum y^i (lines 6-7). Each
client reports its local losses of the broadcast x and y (line 9); the server folds the one
with the lower mean loss into predictor m (lines 10-12, `flnet.learn.predictors`).

Choices (documented, tested):
- One round trip a round. The losses of the models broadcast after round t (line 9) travel
  with round t + 1's upload: a client computes them, on its rows of round t's block, when the
  models arrive, before it trains; the server folds the winner into round t's block's predictor
  when they arrive. So a round's download is x and the separate model whose loss is asked (2
  models; 3 at a block switch, whose new chain starts from W[m1], lines 13-16) and its upload 2
  models and 2 losses: twice MM-PSGD's model traffic, plus the switch's model. The last
  round's models are never folded (no round follows to report their losses).
- A loss is the mean cross-entropy on `loss_batch_size` of the client's rows of that block,
  drawn with replacement from stream BLOCK_LOSS keyed (round, client), forward only (the paper
  says "over its local data"; a minibatch keeps the cost bounded); the mean over the delivered
  clients is unweighted (1/N as written); a tie picks the mixed model.
- The mean of the models is over the delivered clients, unweighted (the paper's 1/N).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from flnet.algorithms.base import Steps
from flnet.algorithms.configs import McPsgdConfig as Config
from flnet.learn import predictors
from flnet.learn.aggregate import mean
from flnet.rng import Stream
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner

NO_BLOCK = -1  # before round 1: no models to fold yet


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global block-mixed model
    w: torch.Tensor  # [M, P] W: the latest block-separate model of each block
    predictors: torch.Tensor  # [M, P] U = (u_1 .. u_M)
    weights: torch.Tensor  # [M] float64: each predictor's total weight
    block: int = NO_BLOCK  # the block of round `round` (NO_BLOCK: it had no new models)
    separate_wins: int = 0  # rounds whose separate model had the lower loss (a diagnostic)


class Down(NamedTuple):
    """The broadcast: x and the separate model whose loss is asked (and, at a block switch,
    the new block's W[m1])."""

    x: torch.Tensor
    y: torch.Tensor
    switch: torch.Tensor  # [P] at a block switch, else [0]


class Up(NamedTuple):
    x: torch.Tensor  # [P] x^i
    y: torch.Tensor  # [P] y^i
    losses: torch.Tensor  # [2] the client's losses of the broadcast x and y


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    m = 1 if learn.clock is None else learn.clock.num_blocks
    return State(0, x, x.expand(m, -1).clone(), *predictors.init(x, m))


def progress(state: State) -> Progress:
    """Block m's rounds are judged on predictor m."""
    return Progress(
        state.round,
        state.predictors[max(state.block, 0)],
        state,
        figures={"separate_wins": float(state.separate_wins)},
    )


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    x, w, models, weights = state.x, state.w, state.predictors, state.weights
    last, wins = state.block, state.separate_wins
    base = predictors.base_of(cfg.averaging, cfg.averaging_base)
    separate = cfg.local.model_copy(update={"lr": cfg.separate_lr or cfg.local.lr})
    k = cfg.cohort.k(world.num_clients)
    for t in world.steps(state.round):
        m = learn.block(t, world.now) or 0
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection)
        asked = w[max(last, 0)]  # y broadcast after the last round (= W[last], line 7)
        y = w[m]  # the separate chain of block m resumes from W[m] (lines 13-16)
        switch = y if last not in (m, NO_BLOCK) else y.new_zeros(0)
        losses = torch.stack(
            [
                learn.query_losses(cohort, model, cfg.loss_batch_size, t, Stream.BLOCK_LOSS, last)
                if last != NO_BLOCK
                else x.new_zeros(len(cohort))
                for model in (x, asked)
            ],
            1,
        )  # [C, 2] line 9 (none before round 1)
        mixed = learn.local_train(cohort, x, cfg.local, t, block=m)
        chain = learn.local_train(cohort, y, separate, t, block=m)  # same minibatches: same xi
        queried = cfg.loss_batch_size * 2 if last != NO_BLOCK else 0
        flops = mixed.flops + chain.flops + learn.forward_flops(queried)
        done = yield from round_trip(
            world,
            cohort,
            Packet(Down(x, asked, switch), learn.bits(Down(x, asked, switch))),
            flops,
            Packet((mixed.params, chain.params, losses), learn.bits(Up(x, y, losses[0]))),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
        )
        if len(done.positions):
            delivered = torch.as_tensor(np.sort(done.positions), device=x.device)
            if last != NO_BLOCK:  # lines 10-12 for the models broadcast after the last round
                mean_loss = losses.index_select(0, delivered.cpu()).mean(0)
                better_separate = bool(mean_loss[1] < mean_loss[0])
                wins += better_separate
                chosen = asked if better_separate else x
                models, weights = predictors.fold(models, weights, last, chosen, base)
            x = mean(mixed.params.index_select(0, delivered))  # line 6
            w = w.clone()
            w[m] = mean(chain.params.index_select(0, delivered))  # line 7
            last = m  # round t's models await their losses
        else:  # nothing new: the last models were folded already
            last = NO_BLOCK
        state = State(t, x, w, models, weights, last, wins)
        world.publish(Progress(t, models[m], state, figures={"separate_wins": float(wins)}))
