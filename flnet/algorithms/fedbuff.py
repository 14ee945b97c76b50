"""FedBuff: Nguyen et al., "Federated Learning with Buffered Asynchronous Aggregation",
AISTATS 2022, Algorithm 1.

Clients train concurrently, at most `concurrency` at a time, with no round barrier
(`flnet.sim.patterns.stream`). A client starts from the server model current when it starts
(y_0 = x^{t_start}), takes `local.steps` steps and uploads Delta_i = y_Q - y_0 (the paper sends
y_0 - y_Q and subtracts; the same update). The server adds each arriving delta to its buffer;
once K have arrived it applies
    x <- x + eta_g * (1/K) sum_{i in buffer} s(tau_i) Delta_i
clears the buffer and counts one server update (the progress unit). tau_i, the staleness, is
the number of server updates between the client's start and its delta's arrival.

Staleness weighting `s`: ``sqrt`` (default) is s(tau) = 1 / sqrt(1 + tau), the polynomial
down-weighting of stale updates (FedAsync's, Xie et al. 2019, with exponent 1/2; FLSim, the
authors' framework, has it as PolynomialStalenessWeight) that we read the paper's experiments
to use; ``none`` is s = 1, the plain mean of Algorithm 1. The paper is not in
../shared/papers/, so this follows its published Algorithm 1 as we know it, not a local copy:
check the default against the paper before relying on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from flnet.algorithms import deferred, staleness
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import FedBuffConfig as Config
from flnet.algorithms.train_loss import Upload, arrived
from flnet.learn.cohort import LossFn
from flnet.learn.wire import ModelMessage
from flnet.sim.patterns import Arrival, Member, Packet, Work, stream
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner, LocalWork


class State(NamedTuple):
    round: int  # server updates done (the model's version)
    x: torch.Tensor  # [P] server model
    buffer: torch.Tensor  # [P] sum of s(tau_i) Delta_i since the last server update
    buffered: int  # deltas in the buffer
    staleness_sum: int = 0  # of the buffered deltas
    staleness_max: int = 0
    flight: dict | None = None  # the stream's work under way, frozen at each server update


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    return State(0, x, torch.zeros_like(x), 0)


def progress(state: State, figures: dict | None = None) -> Progress:
    """After server update `state.round`: the server model is judged; `figures` are the
    staleness of the K deltas it applied."""
    return Progress(state.round, state.x, state, pattern="stream", figures=figures)


def staleness_weight(tau: int, rule: str) -> float:
    """s(tau): 1/sqrt(1 + tau) (FedAsync's polynomial, a = 1/2) or 1."""
    return staleness.polynomial(tau, 0.5) if rule == "sqrt" else staleness.constant(tau)


def receive(state: State, delta: torch.Tensor, tau: int, cfg: Config) -> State:
    """One delta arrives: buffer it and, the K-th time, update the server model."""
    buffer = state.buffer + staleness_weight(tau, cfg.staleness_weighting) * delta
    buffered = state.buffered + 1
    if buffered < cfg.buffer_size:
        return state._replace(
            buffer=buffer,
            buffered=buffered,
            staleness_sum=state.staleness_sum + tau,
            staleness_max=max(state.staleness_max, tau),
        )
    x = state.x + cfg.server_lr / cfg.buffer_size * buffer
    return State(state.round + 1, x, torch.zeros_like(x), 0)


class Server:
    """FedBuff's side of the stream: a client's work from the current model, the buffer on
    each arrival. `loss_fn` replaces the clients' cross-entropy (tests)."""

    def __init__(
        self, learn: Learner, cfg: Config, state: State, loss_fn: LossFn | None = None
    ) -> None:
        self.learn, self.cfg, self.loss_fn = learn, cfg, loss_fn
        self.state = state._replace(flight=None)  # the stream holds what is under way
        self.model_bits = learn.bits(ModelMessage(state.x))
        self.waiting: list[Arrival] = []  # arrivals since the last update, not yet added
        self.batches = deferred.Batches(
            learn, cfg.local, self._train, self._deltas, self.model_bits
        )

    @property
    def version(self) -> int:
        return self.state.round

    def _train(
        self, clients: np.ndarray, counts: np.ndarray, starts: torch.Tensor, version: int
    ) -> LocalWork:
        """ClientUpdate of works started from the rows of `starts` [C, P] (`deferred`)."""
        local = self.cfg.local
        return self.learn.local_train(
            clients, starts, local, version, loss_fn=self.loss_fn, work_counts=counts
        )

    @staticmethod
    def _deltas(done: LocalWork, starts: torch.Tensor) -> torch.Tensor:
        return done.params - starts  # y_Q - y_0

    def work(self, clients: np.ndarray, counts: np.ndarray) -> list[Work]:
        """ClientUpdate from y_0 = the current x, each keyed by (client, count): trained when
        first needed with the other works pending then (`deferred`), else now in one call."""
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
            loss_fn=self.loss_fn,
            work_counts=counts,
        )
        deltas = done.params - x  # y_Q - y_0
        return [
            Work(
                Packet(x, self.model_bits),
                flops,
                # its own storage (checkpoints), with its local loss (the records')
                Packet(Upload(deltas[i].clone(), done.loss[i].clone()), self.model_bits),
                state=Member.of(done.keep, i),  # persisted optimizer
            )
            for i, flops in enumerate(done.flops.tolist())
        ]

    def receive(self, arrival: Arrival) -> Progress | None:
        """Keep the arrival; the K-th of a buffer adds them all to it, in arrival order (the
        same sums), and updates the server model. Nothing reads a delta before: lazily
        trained work (`deferred`) is first needed then, in fewer and larger batches."""
        self.waiting.append(arrival)
        if self.state.buffered + len(self.waiting) < self.cfg.buffer_size:
            return None
        for waited in self.waiting:
            before, tau = self.state, waited.staleness
            delta = arrived(self.learn, deferred.received(waited.payload))
            self.state = receive(before, delta, tau, self.cfg)
        self.waiting.clear()
        k = self.cfg.buffer_size
        return progress(
            self.state,
            {
                "staleness_mean": (before.staleness_sum + tau) / k,
                "staleness_max": max(before.staleness_max, tau),
            },
        )


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
    from flnet.algorithms import fedbuff as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
