"""Serverless rounds, local steps then gossip: the mechanics that DFedAvg, DFedAvgM, DFedSAM,
OledFL, DFL and C-DFL share, written once.

A round t: every node i starts its local work from a point its algorithm chooses (x_i for
DFedAvg, the opposite lookahead point for OledFL), takes ``local`` steps on minibatches keyed
(seed, t, i), and once its compute is done sends the result z_i to its out-neighbours
(`exchange` with ``send_after_work``); then it mixes what arrived, x_i <- sum_j W_t[i, j] z_j
(`flnet.sim.topology.effective_mixing`: a lost message's weight stays on the node's own
model). DFL adds tau2 - 1 pure gossip steps, each one more exchange without compute; C-DFL sends
compressed innovations instead of models. Every step's ledger rows carry the round t.

The model judged is the nodes' average x_bar = (1/n) sum_i x_i of the post-mix models (OledFL's
output, DFL's u_t); records add the consensus distance (1/n) sum_i ||x_i - x_bar||^2 and the
per-node accuracy over the evaluation sample (`flnet.learn.evaluate`).

Availability (`exchange`): a node offline at a step's start (or opted out by its battery) sits
it out: it ends the step with exactly the models it had (`hold`; its optimizer state is not
committed), and its neighbours mix without it: its edges count as not arrived, so its weight
W_ij in neighbour i's row goes to i's own model (`topology.effective_mixing`; rows stay
stochastic, a symmetric W stays symmetric, the online nodes' average is kept). Records add
`nodes_offline`, the nodes that sat out the round's local step. Who is online is asked before
the local work (`train_online`), so only the nodes that take part train. A node whose compute
drops out (`clients.dropout_probability`, `exchange`) is treated as one the timeout cut: it
sends nothing, keeps its start as its z and mixes what arrived.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import simpy
import torch

from flnet.learn.aggregate import mix
from flnet.learn.cohort import LossFn
from flnet.learn.optim import GradientTransformation
from flnet.learn.wire import ModelMessage
from flnet.sim import topology
from flnet.sim.patterns import ClientState, Packet, exchange
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:
    from flnet.config import LocalConfig, TopologyConfig
    from flnet.learn.local import Learner


class GossipConfig(Protocol):
    """The fields these mechanics read from an algorithm's `Config`."""

    @property
    def topology(self) -> TopologyConfig: ...

    @property
    def local(self) -> LocalConfig: ...


class TimedGossipConfig(GossipConfig, Protocol):
    """With a timeout: a node stops waiting for messages this long after a step starts."""

    @property
    def timeout_s(self) -> float | None: ...


# What these methods ask of W: row-stochastic to run as written (each mix a weighted average),
# connected to reach consensus; their analyses (OledFL's Definition 1, the DFL paper's
# Assumption 1.6, Sun et al.'s) assume it symmetric and doubly stochastic: a W without those
# runs with a warning (`flnet.sim.topology.check_properties`).
NEEDS = ("row_stochastic", "connected")
ASSUMES = ("symmetric", "doubly_stochastic")


class Graph(NamedTuple):
    """One round's graph: the nodes (every client, in order), W kept sparse, its edges [M, 2]."""

    nodes: np.ndarray
    w: topology.Mixing
    links: np.ndarray


class Gossip:
    """The W of every round: `topology.Schedule` (built once, or drawn afresh each round for a
    time-varying topology, keyed by the round), or one W given directly (tests)."""

    def __init__(
        self,
        world: AbstractWorld,
        cfg: GossipConfig,
        *,
        algorithm: str,
        mixing: topology.Mixing | None = None,
    ) -> None:
        n = world.num_clients
        self.nodes = np.arange(n)
        self.schedule = (
            None
            if mixing is not None
            else topology.Schedule(
                world, cfg.topology, n, algorithm=algorithm, needs=NEEDS, assumes=ASSUMES
            )
        )
        self._last = Graph(self.nodes, mixing, mixing.links()) if mixing is not None else None

    def at(self, t: int) -> Graph:
        """Round t's graph (the same object round after round when W is static)."""
        w = self.schedule.at(t) if self.schedule is not None else None
        if self._last is None or (w is not None and w is not self._last.w):
            assert w is not None
            self._last = Graph(self.nodes, w, w.links())
        return self._last

    def eigenvalues(self, w: topology.Mixing) -> np.ndarray:
        """W's eigenvalues, the schedule's kept ones (`topology.Schedule.eigenvalues`)."""
        if self.schedule is not None:
            return self.schedule.eigenvalues(w)
        return topology.eigenvalues(w)

    def figures(self, g: Graph) -> dict[str, float]:
        """The round's W's spectral gap, for the records (`Schedule.figures`)."""
        return self.schedule.figures(g.w) if self.schedule is not None else {}


def check(world: AbstractWorld, cfg: GossipConfig, algorithm: str) -> None:
    """What a gossip protocol checks before its first round, without running it (`flnet
    validate`): round 1's W against NEEDS (an error) and ASSUMES (a warning), as `Gossip`."""
    Gossip(world, cfg, algorithm=algorithm)


def same_start(learn: Learner) -> torch.Tensor:
    """[n, P]: every node starts from the same x_0 (the papers' initialisation)."""
    x0 = learn.model.init_params()
    return x0.expand(learn.data.num_clients, -1).clone()


class Sent(NamedTuple):
    """How one gossip step ended."""

    arrived: np.ndarray | None  # [M] bool per edge of the graph; None: every message arrived
    computed: np.ndarray  # [n] bool per node: its compute completed (a timeout may cut it)
    present: np.ndarray  # [n] bool per node: online at the step's start (False: sat it out)


def hold(present: np.ndarray, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """[n, P]: `new`, except that a node that sat the step out (not `present`) keeps its row
    of `old` exactly (a mix would give W_ii' x_i, whose weights need not sum to 1.0 to the bit).
    """
    if present.all():
        return new
    return torch.where(torch.as_tensor(present, device=new.device).unsqueeze(1), new, old)


class Work(NamedTuple):
    """A round's local work, for every node in `nodes` order, computed for the online ones."""

    params: torch.Tensor  # [n, P]: an absent node's row is its start
    flops: np.ndarray  # [n]: 0.0 for an absent node (it computes nothing)
    keep: ClientState | None  # persisted optimizer states, committed by node position
    present: np.ndarray  # [n] bool: online at the step's start (what `exchange` is told)


def train_online(
    world: AbstractWorld,
    learn: Learner,
    nodes: np.ndarray,
    start: torch.Tensor,
    local: LocalConfig,
    t: int,
    *,
    optimizer: GradientTransformation | None = None,
    loss_fn: LossFn | None = None,
) -> Work:
    """Local work from `start` [n, P] for the nodes online at round t's start (asked as
    `exchange` asks: `world.online_clients(nodes, t)`, availability and battery opt-out), the
    only ones whose work is used: a node's minibatches are keyed by (seed, t, node), so the
    rows trained are those a run training every node computes, without the CPU of the rest
    (to the bit on the sequential path; the batched kernels may round differently at another
    cohort size, `tests/tolerance.py`). Their local losses go to the records' `train_loss`,
    uniformly (`flnet.algorithms.train_loss`)."""
    present = np.asarray(world.online_clients(nodes, t), dtype=bool)
    if present.all():
        work = learn.local_train(nodes, start, local, t, optimizer=optimizer, loss_fn=loss_fn)
        learn.train_loss.add(work.loss)  # the mean over the nodes that trained
        return Work(work.params, work.flops, work.keep, present)
    on = np.flatnonzero(present)
    rows = torch.as_tensor(on, device=start.device)
    work = learn.local_train(
        nodes[on], start.index_select(0, rows), local, t, optimizer=optimizer, loss_fn=loss_fn
    )
    learn.train_loss.add(work.loss)
    flops = np.zeros(len(nodes))
    flops[on] = work.flops
    keep = None if work.keep is None else Subset(work.keep, on, len(nodes))
    return Work(start.index_copy(0, rows, work.params), flops, keep, present)


class Subset:
    """A `ClientState` computed for the nodes at positions `on` of n, committed by position
    among the n (`exchange` commits the nodes whose compute completed, all of them online)."""

    def __init__(self, state: ClientState, on: np.ndarray, n: int) -> None:
        self.state = state
        self.within = np.full(n, -1, dtype=np.int64)
        self.within[on] = np.arange(len(on))

    def commit(self, positions: np.ndarray) -> None:
        inner = self.within[np.asarray(positions, dtype=np.int64)]
        assert (inner >= 0).all(), "a node that sat the step out cannot commit its state"
        self.state.commit(inner)


def offline(present: np.ndarray) -> dict[str, float]:
    """The records' count of nodes that sat the step out."""
    return {"nodes_offline": float(len(present) - int(present.sum()))}


def send(
    world: AbstractWorld,
    g: Graph,
    payload: torch.Tensor,
    bits: float | np.ndarray,
    flops: np.ndarray | float,
    t: int,
    timeout_s: float | None,
    *,
    substep: int = 0,
    client_state: ClientState | None = None,
    present: np.ndarray | None = None,
) -> Generator[simpy.Event, Any, Sent]:
    """Gossip step `substep` of round t in time: each node computes `flops`, then sends its
    row of `payload` (`bits`: one number or [n] per sender) along its out-edges;
    `client_state` is committed for the nodes whose compute completed. `present`: who is
    online, when the caller asked already (`train_online`)."""
    per_edge = bits if np.ndim(bits) == 0 else np.asarray(bits, dtype=float)[g.links[:, 0]]
    done = yield from exchange(
        world,
        g.nodes,
        g.links,
        Packet(payload, per_edge),
        np.broadcast_to(np.asarray(flops, dtype=float), g.nodes.shape),
        tag=t,
        timeout_s=timeout_s,
        send_after_work=True,
        client_state=client_state,
        substep=substep,
        present=present,
    )
    return Sent(None if done.arrived.all() else done.arrived, done.computed, done.present)


def local_then_mix(
    world: AbstractWorld,
    learn: Learner,
    local: LocalConfig,
    g: Graph,
    x: torch.Tensor,
    t: int,
    timeout_s: float | None,
    *,
    start: torch.Tensor | None = None,
    last_z: torch.Tensor | None = None,
    optimizer: GradientTransformation | None = None,
    loss_fn: LossFn | None = None,
) -> Generator[simpy.Event, Any, tuple[torch.Tensor, torch.Tensor, np.ndarray]]:
    """Local work from `start` [n, P] (default: the models `x`), then one gossip mix of the
    results: (Z, W_t Z, present). A node whose compute the timeout cut sends nothing and keeps
    its start as its z (no local step). A node that sat the round out keeps its x and, as its
    z, its `last_z` (default: its start) exactly."""
    start = x if start is None else start
    work = train_online(
        world, learn, g.nodes, start, local, t, optimizer=optimizer, loss_fn=loss_fn
    )
    z = work.params
    sent = yield from send(
        world,
        g,
        z,
        learn.bits(ModelMessage(z[0])),
        work.flops,
        t,
        timeout_s,
        client_state=work.keep,  # persisted optimizer states of the nodes that computed
        present=work.present,
    )
    if not sent.computed.all():
        z = torch.where(torch.as_tensor(sent.computed, device=z.device).unsqueeze(1), z, start)
    mixed = hold(sent.present, mix(topology.effective_mixing(g.w, sent.arrived), z), x)
    return hold(sent.present, z, start if last_z is None else last_z), mixed, sent.present


def gossip(
    world: AbstractWorld,
    learn: Learner,
    g: Graph,
    x: torch.Tensor,
    t: int,
    timeout_s: float | None,
    substep: int,
) -> Generator[simpy.Event, Any, torch.Tensor]:
    """Pure gossip step `substep` of round t (no compute): every node online sends x_i,
    X <- W_t X; a node offline keeps its x_i."""
    sent = yield from send(
        world, g, x, learn.bits(ModelMessage(x[0])), 0.0, t, timeout_s, substep=substep
    )
    return hold(sent.present, mix(topology.effective_mixing(g.w, sent.arrived), x), x)


def progress(t: int, x: torch.Tensor, state: Any, figures: dict | None = None) -> Progress:
    """The model judged is the nodes' average; the nodes' models go along; `figures` the
    round's W's spectral gap."""
    return Progress(t, x.mean(dim=0), state, pattern="exchange", nodes=x, figures=figures)
