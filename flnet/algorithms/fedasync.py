"""FedAsync: Xie, Koyejo and Gupta, "Asynchronous Federated Optimization", 2019 (arXiv
1903.03934), Algorithm 1.

Clients train concurrently, at most `concurrency` at a time, with no round barrier
(`flnet.sim.patterns.stream`, as FedBuff). A worker receives the server model x_tau with its
version tau and runs `local.steps` steps on the regularized objective
    g_x_tau(x; z) = f(x; z) + (rho / 2) ||x - x_tau||^2
(the proximal term of FedProx, `cohort.ProximalLoss`), then pushes (x_new, tau). The server
applies every arrival at once:
    alpha_t = alpha * s(t - tau),   x_t = (1 - alpha_t) x_{t-1} + alpha_t x_new,
one server update (the progress unit) per arrival. s is constant, polynomial or hinge
(`flnet.algorithms.staleness`, which says how t - tau is counted). The paper's scheduler
triggers workers at random; here a free slot of the concurrency limit is filled with an idle
client picked uniformly, as FedBuff's stream does.

The paper is not in ../shared/papers/: Algorithm 1, the staleness functions and the defaults
(alpha 0.6, rho 0.005, Poly a = 0.5, Hinge a = 10 and b = 4) follow its published version as
quoted by the public implementations we searched, not a local copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from flnet.algorithms import deferred, staleness
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import FedAsyncConfig as Config
from flnet.algorithms.train_loss import Upload, arrived
from flnet.learn.cohort import LossFn, ProximalLoss
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Arrival, Member, Packet, Work, stream
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner, LocalWork


class State(NamedTuple):
    round: int  # server updates done (t)
    x: torch.Tensor  # [P] server model x_t
    flight: dict | None = None  # the stream's work under way, frozen at each server update


def init(learn: Learner, cfg: Config) -> State:
    return State(0, learn.model.init_params())


def progress(state: State, figures: dict | None = None) -> Progress:
    """After server update `state.round`; `figures`: the update's staleness and alpha_t."""
    return Progress(state.round, state.x, state, pattern="stream", figures=figures)


def mixing_weight(tau: int, cfg: Config) -> float:
    """alpha_t = alpha * s(t - tau), `tau` the updates the worker missed."""
    return cfg.alpha * staleness.weight(tau, cfg.staleness)


def receive(state: State, x_new: torch.Tensor, tau: int, cfg: Config) -> State:
    """x_t = (1 - alpha_t) x_{t-1} + alpha_t x_new."""
    a = mixing_weight(tau, cfg)
    return state._replace(round=state.round + 1, x=(1.0 - a) * state.x + a * x_new)


class Server:
    """FedAsync's side of the stream. `loss_fn`, if given, replaces the workers' regularized
    loss (tests)."""

    def __init__(
        self,
        learn: Learner,
        cfg: Config,
        state: State,
        loss_fn: LossFn | None = None,
    ) -> None:
        self.learn, self.cfg, self.loss_fn = learn, cfg, loss_fn
        self.state = state._replace(flight=None)  # the stream holds what is under way
        self.model_bits = learn.bits(ModelMessage(state.x))
        self.batches = deferred.Batches(
            learn, cfg.local, self._train, lambda done, starts: done.params, self.model_bits
        )

    @property
    def version(self) -> int:
        return self.state.round

    def regularized(self, x_tau: torch.Tensor) -> LossFn | None:
        """f + (rho / 2) ||x - x_tau||^2 (on the model's hand-written engine where it has
        one, `cohort.ProximalLoss`); with rho = 0 the plain loss (None)."""
        return ProximalLoss(self.cfg.rho, x_tau) if self.cfg.rho > 0 else None

    def _train(
        self, clients: np.ndarray, counts: np.ndarray, starts: torch.Tensor, version: int
    ) -> LocalWork:
        """Local steps of works started from the rows of `starts` [C, P] (`deferred`), each
        on its own g_x_tau: the proximal term's anchors are the start rows (`aux`)."""
        own = ProximalLoss(self.cfg.rho, None) if self.cfg.rho > 0 else None
        return self.learn.local_train(
            clients,
            starts,
            self.cfg.local,
            version,
            loss_fn=self.loss_fn or own,
            aux=starts,
            work_counts=counts,
        )

    def work(self, clients: np.ndarray, counts: np.ndarray) -> list[Work]:
        """Each worker's local steps on g_x_tau from x_tau = the current x: trained when first
        needed with the other works pending then (`deferred`), else now in one call."""
        x = self.state.x
        if deferred.LAZY:
            later = self.batches.start(clients, counts, x, self.state.round)
            if later is not None:
                return later
        done = self.learn.local_train(
            clients,
            x,
            self.cfg.local,
            self.state.round,
            loss_fn=self.loss_fn or self.regularized(x),
            work_counts=counts,
        )
        return [
            Work(
                Packet(x, self.model_bits),
                flops,
                # x_new, its own storage, with its local loss (the records')
                Packet(Upload(done.params[i].clone(), done.loss[i].clone()), self.model_bits),
                state=Member.of(done.keep, i),  # persisted optimizer
            )
            for i, flops in enumerate(done.flops.tolist())
        ]

    def receive(self, arrival: Arrival) -> Progress:
        tau = arrival.staleness
        payload = deferred.received(arrival.payload)
        self.state = receive(self.state, arrived(self.learn, payload), tau, self.cfg)
        figures = {"staleness_mean": float(tau), "staleness_max": tau}
        return progress(self.state, {**figures, "alpha_t": mixing_weight(tau, self.cfg)})


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    loss_fn: LossFn | None = None,
) -> Steps:
    """Resumes a checkpoint's stream exactly: `state.flight` is what was under way then."""
    server = Server(learn, cfg, state, loss_fn)
    yield from stream(
        world,
        server,
        range(world.num_clients),
        concurrency=cfg.concurrency,
        resume=server.batches.resumed(state.flight),
    )


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import fedasync as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
