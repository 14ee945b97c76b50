"""MM-PSGD: Ding et al., "Distributed Optimization over Block-Cyclic Data", Algorithm 1
(Multi-Model Parallel SGD).

Training is FedAvg's chain: each round every client of the cohort starts from the global model
x, takes I local SGD steps on its rows of the block in force (`Learner.block`: the round's block
by rounds or simulated time, data.blocks) and the server sets x = (1/N) sum_i x^i (line 5). In
addition the server keeps one predictor per block and folds x into the current block's
predictor m (line 8, `flnet.learn.predictors`: uniform, eq. 7, or the experiments' exponential
average). Block m is served by predictor m: it is the model the run is judged on in block m's
rounds (the records also hold every predictor on its own block's test rows and on the whole
test set, `Evaluator.blocks`).

Choices (documented, tested):
- Each round is "I local steps, then aggregate" (the paper's loop aggregates at t mod I = 0,
  which gives the first round I - 1 steps).
- The mean is over the delivered clients, unweighted (the paper's 1/N: client weights are in the
  local objectives, eq. 3); with full participation and no deadline that is all N. `server`
  takes another rule (`flnet.algorithms.server`; weighted_mean by the block's rows).
- Without data.blocks there is one block: MM-PSGD is FedAvg (uniform mean) with a predictor that
  averages its global models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import delivery, server, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import MmPsgdConfig as Config
from flnet.learn import predictors
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global block-mixed model
    predictors: torch.Tensor  # [M, P] X = (x_1 .. x_M)
    weights: torch.Tensor  # [M] float64: each predictor's total weight (flnet.learn.predictors)
    block: int = 0  # the block of round `round` (the predictor judged)


OWN_RULE = "mean"  # line 5: x = (1/N) sum_i x^i


def num_blocks(learn: Learner) -> int:
    return 1 if learn.clock is None else learn.clock.num_blocks


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    return State(0, x, *predictors.init(x, num_blocks(learn)))


def progress(state: State) -> Progress:
    """Block m's rounds are judged on predictor m, the model that serves block m."""
    return Progress(state.round, state.predictors[state.block], state)


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    x, models, weights = state.x, state.predictors, state.weights
    base = predictors.base_of(cfg.averaging, cfg.averaging_base)
    rule = server.from_config(cfg.server, None, OWN_RULE)
    k = cfg.cohort.k(world.num_clients)
    for t in world.steps(state.round):
        block = learn.block(t, world.now)  # None: data without blocks
        m = block or 0  # the current block index
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection)
        x_bits = learn.bits(ModelMessage(x))
        work = learn.local_train(cohort, x, cfg.local, t, block=m)
        done = yield from round_trip(
            world,
            cohort,
            Packet(x, x_bits),
            work.flops,
            Packet(work.params, x_bits),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
            client_state=work.keep,
        )
        got = delivery.delivered(done, cohort, learn.samples_in(block))
        train_loss.delivered(learn, got, work, "uniform")
        if got is not None:
            x = server.aggregate(rule, got.rows(work.params), got)  # line 5
            models, weights = predictors.fold(models, weights, m, x, base)  # line 8
        world.publish(progress(State(t, x, models, weights, m)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import mm_psgd as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
