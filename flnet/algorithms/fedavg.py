"""FedAvg: McMahan et al., "Communication-Efficient Learning of Deep Networks from
Decentralized Data", AISTATS 2017, Algorithm 1 (FederatedAveraging).

Each round t the server picks S_t, sends x_t; each client k in S_t runs tau local SGD steps
from x_t (ClientUpdate) and returns x^k_{t+1}; the server sets
x_{t+1} = sum_{k in S_t} (n_k / m_t) x^k_{t+1} with m_t = sum_{k in S_t} n_k (the arXiv v4
form of line 8). Only clients whose upload was delivered count: a client dropped at the
deadline, or beyond the first K under over-selection, is left out of the sum and out of m_t.
The sum runs over the delivered clients in cohort order (the set S_t has no order), so which
upload arrived first never changes the model's last bits.

With `server_optimizer` (Reddi et al. 2021, `flnet.learn.server_optim`) the server instead
takes a step of that optimizer along the delivered clients' mean delta, x^k_{t+1} - x_t.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from flnet.algorithms import partial
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import FedAvgConfig as Config
from flnet.algorithms.configs import FedProxConfig, MoonConfig
from flnet.learn import server_optim
from flnet.learn.aggregate import delivered_rows, weighted_mean
from flnet.learn.cohort import LossFn
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global model
    server: Any = None  # the server optimizer's state (None: no server optimizer)


def init(learn: Learner, cfg: Config | FedProxConfig | MoonConfig) -> State:
    x = learn.model.init_params()
    return State(0, x, server_optim.init(server_optim.from_config(cfg.server_optimizer), x))


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the global model is the one judged."""
    return Progress(state.round, state.x, state)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config | FedProxConfig,
    state: State,
    local_loss: Callable[[torch.Tensor], LossFn] | None = None,
    partial_updates: bool = False,
) -> Steps:
    """`local_loss(x_t)`, if given, is the clients' loss in round t (FedProx adds a term).
    With `cfg.partial_work`, clients that cannot do their full work (`partial.plan`) do the
    steps they can when `partial_updates` (FedProx), else they are dropped (FedAvg: the
    stragglers do not train; under a deadline they do the full work and are cut)."""
    x, server = state.x, state.server
    opt = server_optim.from_config(cfg.server_optimizer)
    k = cfg.cohort.k(world.num_clients)
    for t in world.steps(state.round):
        block = learn.block(t, world.now)  # block-cyclic data: the block of this round
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection)  # S_t
        x_bits = learn.bits(ModelMessage(x))
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
                cohort = cohort[~p.straggles]
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
        if len(done.positions):
            # in cohort order, not arrival order: the sum's rounding never depends on timing
            # (so radio settings cannot change the model; flnet.reuse relies on it)
            positions = np.sort(done.positions)
            x, server = server_step(
                opt,
                x,
                delivered_rows(work.params, positions),
                learn.samples_in(block)[cohort[positions]],
                server,
            )
        world.publish(progress(State(t, x, server)))


def server_step(
    opt: server_optim.ServerOptimizer | None,
    x: torch.Tensor,
    models: torch.Tensor,
    n_k: np.ndarray,
    server: Any,
) -> tuple[torch.Tensor, Any]:
    """The new x from the delivered models [D, P] (in cohort order) and their sample counts:
    line 8's weighted mean, or a step of the server optimizer along their deltas."""
    if opt is None:
        return weighted_mean(models, n_k), server  # line 8
    return server_optim.step(opt, x, models - x, n_k, server)


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import fedavg as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
