"""FedAvg's round (McMahan et al. 2017, Algorithm 1), which FedAvg and FedProx run, and the
state of a server that keeps one model (FedAvg, FedProx, MOON): written once, below the
algorithms, so that none imports another.

Round t: the server picks S_t (by `cohort.sampling`, `selection`) and sends x_t; each client
runs its local work from x_t (with the algorithm's loss, and with partial work where the
scenario asks, `partial`) and uploads its model; the server steps over the delivered models in
cohort order (`delivery`, `server`), weighed as the sampling says (`selection.delivered`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from flnet.algorithms import partial, selection, server, train_loss
from flnet.algorithms.base import Steps
from flnet.learn.cohort import LossFn
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # annotations only
    from flnet.algorithms.configs import FedAvgConfig, FedProxConfig, MoonConfig
    from flnet.learn.local import Learner

OWN_RULE = "weighted_mean"  # line 8: x_{t+1} = sum_k (n_k / m_t) x^k_{t+1}


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global model
    server: Any = None  # the server optimizer's state (None: no server optimizer)


def server_of(cfg: FedAvgConfig | FedProxConfig | MoonConfig) -> server.Server:
    """The scenario's server rule or optimizer; FedAvg's weighted mean by default."""
    return server.from_config(cfg.server, cfg.server_optimizer, OWN_RULE)


def init(learn: Learner, cfg: FedAvgConfig | FedProxConfig | MoonConfig) -> State:
    x = learn.model.init_params()
    return State(0, x, server.init(server_of(cfg), x))


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the global model is the one judged."""
    return Progress(state.round, state.x, state)


def rounds(
    world: AbstractWorld,
    learn: Learner,
    cfg: FedAvgConfig | FedProxConfig,
    state: State,
    local_loss: Callable[[torch.Tensor], LossFn] | None = None,
    partial_updates: bool = False,
) -> Steps:
    """`local_loss(x_t)`, if given, is the clients' loss in round t (FedProx adds a term).
    With `cfg.partial_work`, clients that cannot do their full work (`partial.plan`) do the
    steps they can when `partial_updates` (FedProx), else they are dropped (FedAvg: the
    stragglers do not train; under a deadline they do the full work and are cut)."""
    x, opt_state = state.x, state.server
    rule = server_of(cfg)
    k = cfg.cohort.k(world.num_clients)
    sampler = selection.Sampler(cfg.cohort)
    for t in world.steps(state.round):
        block = learn.block(t, world.now)  # block-cyclic data: the block of this round
        sizes = learn.samples_in(block)
        x_bits = learn.bits(ModelMessage(x))
        expected = selection.expected_work(learn, cfg.local, x_bits, x_bits, block)
        drawn = sampler.draw(world, k, t, sizes, expected)  # S_t
        cohort = drawn.clients
        steps = None
        if cfg.partial_work is not None:
            p = partial.plan(
                world,
                learn,
                cfg.partial_work,
                cfg.local,
                cohort,
                t,
                x_bits,
                cfg.cohort.deadline_s,
                block,
            )
            if partial_updates:
                steps = p.steps
            elif cfg.partial_work.kind == "stragglers":
                drawn = drawn.subset(~p.straggles)
                cohort = drawn.clients
        work = learn.local_train(
            cohort,
            x,
            cfg.local,
            t,  # ClientUpdate(k, x_t)
            loss_fn=local_loss(x) if local_loss else None,
            steps=steps,
            block=block,
        )
        done = yield from round_trip(
            world,
            cohort,
            Packet(x, x_bits),
            work.flops,
            Packet(work.params, x_bits),  # each x^k_{t+1} is shaped as x_t
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
            client_state=work.keep,
        )
        got = selection.delivered(done, drawn, sizes)
        train_loss.delivered(learn, got, work, "samples")
        if got is not None:  # line 8, over the delivered clients
            x, opt_state = server.step(rule, x, got.rows(work.params), got, opt_state)
        # the trained models are folded into x: let go of them before the next cohort trains,
        # whose trainer then writes into their memory again (`cohort.Trainer._output`)
        del work, done, got
        world.publish(progress(State(t, x, opt_state)))
