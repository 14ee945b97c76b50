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
- Only what a client uses travels. Round 1 asks no losses and every chain starts at x_0 (the
  paper initialises X, Y and W alike), so its download is x alone and its upload carries no
  losses. After a round with no deliveries nothing is asked either (x and W did not change);
  the download is x and W[m], where the round's separate chain starts.
- The model judged in round t (the live record and `progress`, the same) is predictor m of
  round t's block: the paper serves and tests block m with predictor m. It holds the winners
  folded so far, i.e. up to round t - 1's models (their losses come with round t's upload).
- A loss is the mean cross-entropy on `loss_batch_size` of the client's rows of that block,
  drawn with replacement from stream BLOCK_LOSS keyed (round, client), forward only (the paper
  says "over its local data"; a minibatch keeps the cost bounded); the mean over the delivered
  clients is unweighted (1/N as written); a tie picks the mixed model.
- The mean of the models is over the delivered clients, unweighted (the paper's 1/N); `server`
  takes another rule for both chains (`flnet.algorithms.server`); the losses' mean stays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import delivery, server, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import McPsgdConfig as Config
from flnet.learn import predictors
from flnet.rng import Stream
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global block-mixed model
    w: torch.Tensor  # [M, P] W: the latest block-separate model of each block
    predictors: torch.Tensor  # [M, P] U = (u_1 .. u_M)
    weights: torch.Tensor  # [M] float64: each predictor's total weight
    block: int = 0  # the block of round `round`: its predictor is the model judged
    separate_wins: int = 0  # rounds whose separate model had the lower loss (a diagnostic)
    asking: bool = False  # round `round` delivered new x, W[block]: their losses are asked next


class Down(NamedTuple):
    """The broadcast: x, the separate model whose loss is asked (W[last block], line 8) and
    W[m], where the round's separate chain starts, where the client has it from neither."""

    x: torch.Tensor
    asked: torch.Tensor  # [P], or [0] when no losses are asked (round 1, after an empty round)
    start: torch.Tensor  # [P] at a block switch or after an empty round, else [0]


class Up(NamedTuple):
    x: torch.Tensor  # [P] x^i
    y: torch.Tensor  # [P] y^i
    losses: torch.Tensor  # [2] the client's losses of the broadcast x and y, or [0]: none asked


OWN_RULE = "mean"  # lines 6-7: (1/N) sum


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    m = 1 if learn.clock is None else learn.clock.num_blocks
    return State(0, x, x.expand(m, -1).clone(), *predictors.init(x, m))


def progress(state: State) -> Progress:
    """Block m's rounds are judged on predictor m, the model that serves block m (the live
    record of every round is this)."""
    return Progress(
        state.round,
        state.predictors[state.block],
        state,
        figures={"separate_wins": float(state.separate_wins)},
    )


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    x, w, models, weights = state.x, state.w, state.predictors, state.weights
    last, asking, wins = state.block, state.asking, state.separate_wins
    base = predictors.base_of(cfg.averaging, cfg.averaging_base)
    rule = server.from_config(cfg.server, None, OWN_RULE)
    separate = cfg.local.model_copy(update={"lr": cfg.separate_lr or cfg.local.lr})
    k = cfg.cohort.k(world.num_clients)
    none = x.new_zeros(0)
    for t in world.steps(state.round):
        block = learn.block(t, world.now)  # None: data without blocks
        m = block or 0  # the current block index
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection)
        asked = w[last] if asking else none  # y broadcast after the last round (line 7-8)
        y = w[m]  # the separate chain of block m resumes from W[m] (lines 13-16)
        start = none if (asking and last == m) or t == 1 else y  # round 1: y = x = x_0
        losses = (
            torch.stack(
                [
                    learn.query_losses(
                        cohort, model, cfg.loss_batch_size, t, Stream.BLOCK_LOSS, last
                    )
                    for model in (x, asked)
                ],
                1,
            )
            if asking
            else x.new_zeros(len(cohort), 0)
        )  # [C, 2] line 9, or [C, 0]: nothing asked
        mixed = learn.local_train(cohort, x, cfg.local, t, block=m)
        chain = learn.local_train(cohort, y, separate, t, block=m)  # same minibatches: same xi
        queried = cfg.loss_batch_size * 2 if asking else 0
        flops = mixed.flops + chain.flops + learn.forward_flops(queried)
        down = Down(x, asked, start)
        done = yield from round_trip(
            world,
            cohort,
            Packet(down, learn.bits(down)),
            flops,
            Packet((mixed.params, chain.params, losses), learn.bits(Up(x, y, losses[0]))),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
        )
        got = delivery.delivered(done, cohort, learn.samples_in(block))
        train_loss.delivered(learn, got, mixed, "uniform")  # x's chain
        asking = got is not None
        if got is not None:
            if losses.shape[1]:  # lines 10-12 for the models broadcast after the last round
                mean_loss = got.rows(losses).mean(0)
                better_separate = bool(mean_loss[1] < mean_loss[0])
                wins += better_separate
                chosen = asked if better_separate else x
                models, weights = predictors.fold(models, weights, last, chosen, base)
            x = server.aggregate(rule, got.rows(mixed.params), got)  # line 6
            w = w.clone()
            w[m] = server.aggregate(rule, got.rows(chain.params), got)  # line 7
        # else nothing new: the last models' losses were lost with the round
        last = m
        state = State(t, x, w, models, weights, m, wins, asking)
        world.publish(progress(state))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import mc_psgd as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
