"""The distributionally robust machinery DRFA and DRDM share (the DRDM paper's Algorithms 1-3,
`flnet.algorithms.drfa` says every choice): lambda on the simplex over all clients and its
checkpointed form, line 5's draws from it, line 6's snapshot step t', the messages of a
training round, and Algorithm 3's dual step as its own round trip.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import simpy
import torch

from flnet.learn import simplex
from flnet.learn.wire import ModelMessage
from flnet.rng import Stream
from flnet.sim.patterns import ClientState, Delivery, Packet, round_trip
from flnet.sim.world import AbstractWorld

if TYPE_CHECKING:  # annotations only
    from flnet.algorithms.configs import DrdmConfig, DrfaConfig
    from flnet.learn.local import Learner, LocalWork


def lam_fields(lam: simplex.Simplex) -> tuple[int, torch.Tensor, torch.Tensor, float]:
    """lambda as a State's lam_* fields."""
    return (
        lam.n,
        torch.from_numpy(lam.clients.copy()),
        torch.from_numpy(lam.values.copy()),
        lam.rest,
    )


def lam_of(n: int, clients: torch.Tensor, values: torch.Tensor, rest: float) -> simplex.Simplex:
    """lambda from a State's lam_* fields."""
    return simplex.Simplex(
        int(n), clients.numpy().astype(np.int64), values.numpy().astype(np.float64), float(rest)
    )


class HoldsLambda(Protocol):
    """A State with lambda in its lam_* fields (DRFA's, DRDM's)."""

    @property
    def lam_n(self) -> int: ...

    @property
    def lam_clients(self) -> torch.Tensor: ...

    @property
    def lam_values(self) -> torch.Tensor: ...

    @property
    def lam_rest(self) -> float: ...


def lambda_of(state: HoldsLambda) -> simplex.Simplex:
    """lambda from `state`'s lam_* fields."""
    return lam_of(state.lam_n, state.lam_clients, state.lam_values, state.lam_rest)


class Down(NamedTuple):
    """Server -> participant (lines 6-7): the model and the snapshot step t'."""

    x: torch.Tensor  # [P]
    snapshot_step: torch.Tensor  # int32 scalar t'


class Up(NamedTuple):
    """Participant -> server (line 11)."""

    last: torch.Tensor  # [P] w_i after tau steps
    snapshot: torch.Tensor  # [P] w_i after t' steps


class Draw(NamedTuple):
    """Line 5: the distinct clients drawn, how often each was drawn, and how often each one's
    client state is updated (its draws with `with_replacement`, once otherwise)."""

    clients: np.ndarray  # [C] sorted
    draws: np.ndarray  # [C] multiplicity
    state_updates: np.ndarray  # [C]


def initial_lambda(learn: Learner, cfg: DrfaConfig | DrdmConfig) -> simplex.Simplex:
    """lambda^(0): 1/N each (one number), or n_i / n (an entry per client)."""
    if cfg.lambda_init == "samples":
        lam = np.asarray(learn.num_samples, dtype=np.float64)
        return simplex.Simplex.of(lam / lam.sum())
    return simplex.Simplex.uniform(len(learn.num_samples))


def lambda_figures(lam: simplex.Simplex) -> dict[str, float]:
    """The records' lambda columns: its entropy in nats (ln N when uniform) and largest entry."""
    return {"lambda_entropy": lam.entropy(), "lambda_max": lam.max()}


def draw(world: AbstractWorld, lam: simplex.Simplex, m: int, round: int, sampling: str) -> Draw:
    """Line 5 under the scenario's `sampling` (see the module's docstring)."""
    drawn = world.sample_weighted(m, round, lam, replace=sampling != "without_replacement")
    clients, counts = np.unique(drawn, return_counts=True)
    updates = counts if sampling == "with_replacement" else np.ones_like(counts)
    return Draw(clients, counts, updates)


def snapshot_step(world: AbstractWorld, round: int, tau: int) -> int:
    """Line 6: t' uniform on 1..tau, from the stream (seed, SNAPSHOT, round)."""
    return int(world.generator(Stream.SNAPSHOT, round).integers(1, tau + 1))


def snapshots(work: LocalWork) -> torch.Tensor:
    """The drawn clients' iterates after t' steps [C, P] (asked for; none when no client
    online was drawn, and then work.params is [0, P] too)."""
    return work.params if work.snapshot is None else work.snapshot


def training_trip(
    world: AbstractWorld,
    learn: Learner,
    cfg: DrfaConfig | DrdmConfig,
    round: int,
    d: Draw,
    t_snap: int,
    x: torch.Tensor,
    work: LocalWork,
    client_state: ClientState | None,
) -> Generator[simpy.Event, Any, Delivery]:
    """Lines 7-11 as round `round`'s trip: w = x and t' down to each drawn client, its local
    `work`, its last iterate and its snapshot up (two models)."""
    down = Down(x, torch.tensor(t_snap, dtype=torch.int32))
    return (
        yield from round_trip(
            world,
            d.clients,
            Packet(down, learn.bits(down)),  # line 7
            work.flops,
            Packet(Up(work.params, snapshots(work)), learn.bits(Up(x, x))),  # line 11
            tag=round,
            deadline_s=cfg.deadline_s,
            client_state=client_state,
        )
    )


def dual_step(
    world: AbstractWorld,
    learn: Learner,
    cfg: DrfaConfig | DrdmConfig,
    lam: simplex.Simplex,
    w_snapshot: torch.Tensor,
    round: int,
) -> Generator[simpy.Event, Any, simplex.Simplex]:
    """Algorithm 3 as a round trip; its value is lambda^(s+1)."""
    n = world.num_clients
    uniform = world.sample_clients(cfg.clients_per_round, round, stream=Stream.DUAL_SELECTION)
    if len(uniform) == 0:
        # nobody online to report a loss of w(t'): no ascent direction (v = 0), so lambda stays.
        # Nothing is sent or computed (no ledger row) and the clock does not move: the step is
        # not retried, so waiting for someone to come online would serve nothing.
        return lam
    batch = cfg.local.batch_size
    losses = learn.query_losses(uniform, w_snapshot, batch, round)  # line 5, [m]
    done = yield from round_trip(
        world,
        uniform,
        Packet(w_snapshot, learn.bits(ModelMessage(w_snapshot))),  # line 3
        learn.forward_flops(np.full(len(uniform), batch)),
        Packet(losses, learn.bits(losses[0])),  # one 32-bit loss each
        tag=round,
        deadline_s=cfg.deadline_s,
    )
    positions = np.sort(done.positions)
    v = n / len(uniform) * losses.double().cpu().numpy()[positions]  # line 7 (0 elsewhere)
    tau = cfg.local.steps
    assert tau is not None  # DrfaConfig refuses epochs
    return lam.ascent(uniform[positions], tau * cfg.dual_lr * v)  # line 8
