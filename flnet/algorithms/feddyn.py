"""FedDyn: Acar et al., "Federated Learning Based on Dynamic Regularization", ICLR 2021,
Algorithm 1.

The server keeps theta and h (h^0 = 0); each client k keeps its gradient term grad L_k(theta_k)
(0 before its first round). Each round the server sends theta^{t-1} to P_t; client k takes its
local steps on the dynamically regularised loss
    L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + (alpha / 2) ||theta - theta^{t-1}||^2,
sets grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1}) and
uploads theta_k^t. The server sets
    h^t = h^{t-1} - (alpha / m) sum_{k in P_t} (theta_k^t - theta^{t-1}),
    theta^t = (1 / |P_t|) sum_{k in P_t} theta_k^t - (1 / alpha) h^t.

Choices (documented, tested):
- m in the h-update is the number of *all* clients, as the paper's notation (m devices) and the
  authors' code have it; the paper's line reads "(1/m)(sum theta_k - theta^{t-1})", a typo
  that subtracts theta^{t-1} once instead of once per active client (digest drdm.md 2.6.2);
  tests/test_feddyn.py's two-client hand computation tells the two readings apart.
- The local objective is minimised by the scenario's local steps (the paper's experiments:
  SGD); its two extra terms are part of the loss, so every optimizer sees them where it
  evaluates a gradient (as FedProx's proximal term).
- The gradient term follows simulated time (as SCAFFOLD's c_i): it changes when the client's
  compute completes; only delivered uploads enter h and the mean.
- No `server` rule (`flnet.algorithms.server`): theta is the plain mean of the models less
  h / alpha, h summing the same deltas; another rule would break that correction. The maths is
  `flnet.learn.dynamic`, which DRDM shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import delivery, selection, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import FedDynConfig as Config
from flnet.learn.aggregate import mean
from flnet.learn.cohort import LossFn, cross_entropy
from flnet.learn.dynamic import client_gradient, dynamic_loss, server_h, server_model
from flnet.learn.table import Keep, Keeps
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner

TABLE = "feddyn.grad"  # per client: grad L_k(theta_k), the "lagged gradient"


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] server model theta
    h: torch.Tensor  # [P] server state h


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    return State(0, x, torch.zeros_like(x))


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the server model theta is the one judged."""
    return Progress(state.round, state.x, state)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    base_loss: LossFn = cross_entropy,
) -> Steps:
    """`base_loss` replaces the clients' L_k (tests use a quadratic)."""
    x, h = state.x, state.h
    grads = learn.client_table(TABLE, torch.zeros_like(x))  # rows only once written
    k = cfg.cohort.k(world.num_clients)
    for t in world.steps(state.round):
        x_bits = learn.bits(ModelMessage(x))
        expected = selection.expected_work(learn, cfg.local, x_bits, x_bits)
        cohort = world.sample_clients(k, t, cfg.cohort.over_selection, work=expected)  # P_t
        g = grads.rows(cohort)  # [C, P]
        work = learn.local_train(
            cohort, x, cfg.local, t, loss_fn=dynamic_loss(cfg.alpha, x, base_loss), aux=g
        )
        done = yield from round_trip(
            world,
            cohort,
            Packet(x, learn.bits(ModelMessage(x))),
            work.flops,
            Packet(work.params, learn.bits(ModelMessage(work.params[0]))),
            tag=t,
            deadline_s=cfg.cohort.deadline_s,
            keep=k,
            client_state=Keeps(
                Keep(grads, cohort, client_gradient(g, cfg.alpha, work.params, x)), work.keep
            ),
        )
        got = delivery.delivered(done, cohort, learn.num_samples)
        train_loss.delivered(learn, got, work, "samples")
        if got is not None:
            theta = got.rows(work.params)
            h = server_h(h, cfg.alpha, world.num_clients, theta, x)
            x = server_model(mean(theta), h, cfg.alpha)
        world.publish(progress(State(t, x, h)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import feddyn as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
