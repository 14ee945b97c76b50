"""DRFA: Deng, Kamani and Mahdavi, "Distributionally Robust Federated Averaging", NeurIPS 2020,
as the DRDM paper (Krouka et al. 2025, arXiv 2505.15371) writes it: its Algorithms 1-3 without
the dynamic regulariser (mu = 0, no c, no per-client gradient term; digest drdm.md 2.8).

The server keeps the model w and lambda on the simplex over all N clients (the agnostic-FL
min-max: min_w max_lambda sum_i lambda_i f_i(w)). Round s:
  5  draw D, m clients, from lambda (with replacement);
  6  draw t' uniformly from 1..tau (the snapshot step, sent with the model before training);
  7-11 each client takes tau local SGD steps from w and uploads its last iterate w_i and its
     iterate after t' steps w_i(t');
  19-20 w(t') = mean of the w_i(t'), w = mean of the w_i (each client weighted by its draws);
  21 DualVariableUpdate (Algorithm 3): m clients U drawn uniformly receive w(t') and upload
     their loss on one minibatch l_i; v_i = (N / m) l_i on U, 0 elsewhere;
     lambda <- Pi_simplex(lambda + tau * gamma * v).

Choices and fixes (documented, tested):
- Sampling (the paper is silent; digest 2.6.3): `dedup_weighted` (default) trains each distinct
  client once and weights its model by its multiplicity; `with_replacement` is the same for
  DRFA (no client state; in DRDM each draw updates the state); `without_replacement` draws m
  distinct clients in proportion to lambda. A client drawn several times trains, is charged
  and uploads once (its copies would draw the same minibatches, keyed by (round, client)).
- v_i = (N / m) l_i as Algorithm 3 line 7 (not the notation paragraph's v_i = l_i): what makes
  the snapshot estimator unbiased under uniform U (digest 2.6.4; DRFA's code does the same).
- lambda^(0) uniform (the paper gives none); `lambda_init: samples` is DRFA's code (n_i / n).
  DRFA's code's gamma decay and lambda floor are not applied (not in the DRDM paper).
- t' goes down with the model (32 bits), before training (digest 2.6.7): the client must know
  when to keep its snapshot. Each participant uploads two models. The dual step is its own
  round trip: w(t') down to each client of U, a forward-only minibatch loss (charged as forward
  FLOPs), a 32-bit loss up.
- Under an availability model the draws of line 5 are lambda restricted to the clients online
  at the round's start (`World.sample_weighted`, as `sample_clients` picks only online ones:
  an offline device cannot be trained); a draw that finds nobody online trains nobody.
- Only delivered uploads count: the means run over the delivered clients (with their draws);
  a dual-step loss that is not delivered counts as v_i = 0; with no model delivered the round
  leaves w and lambda as they were. A dual step whose uniform draw finds nobody online leaves
  lambda as it was (no loss, no ascent direction) and takes no time and no ledger row.
- The records carry lambda's entropy (nats) and largest entry at every evaluation.
- lambda is kept as `flnet.learn.simplex.Simplex`: an entry per client that has had a loss
  queried in a dual step, one shared value for all others, so neither memory nor time grows with
  registered clients that never take part (except with ``lambda_init: samples``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import simpy
import torch

from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DrdmConfig
from flnet.algorithms.configs import DrfaConfig as Config
from flnet.learn import simplex
from flnet.learn.aggregate import weighted_mean
from flnet.learn.wire import ModelMessage
from flnet.rng import Stream
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global model w
    # lambda on the simplex (`simplex.Simplex`, as tensors and numbers for checkpoints):
    lam_n: int  # N
    lam_clients: torch.Tensor  # [K] int64: clients with their own entry
    lam_values: torch.Tensor  # [K] float64: their entries
    lam_rest: float  # every other client's entry


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


def initial_lambda(learn: Learner, cfg: Config | DrdmConfig) -> simplex.Simplex:
    """lambda^(0): 1/N each (one number), or n_i / n (an entry per client)."""
    if cfg.lambda_init == "samples":
        lam = np.asarray(learn.num_samples, dtype=np.float64)
        return simplex.Simplex.of(lam / lam.sum())
    return simplex.Simplex.uniform(len(learn.num_samples))


def init(learn: Learner, cfg: Config) -> State:
    return State(0, learn.model.init_params(), *lam_fields(initial_lambda(learn, cfg)))


def lambda_figures(lam: simplex.Simplex) -> dict[str, float]:
    """The records' lambda columns: its entropy in nats (ln N when uniform) and largest entry."""
    return {"lambda_entropy": lam.entropy(), "lambda_max": lam.max()}


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the global model w is the one judged."""
    lam = lam_of(state.lam_n, state.lam_clients, state.lam_values, state.lam_rest)
    return Progress(state.round, state.x, state, figures=lambda_figures(lam))


def draw(world: AbstractWorld, lam: simplex.Simplex, m: int, round: int, sampling: str) -> Draw:
    """Line 5 under the scenario's `sampling` (see the module's docstring)."""
    drawn = world.sample_weighted(m, round, lam, replace=sampling != "without_replacement")
    clients, counts = np.unique(drawn, return_counts=True)
    updates = counts if sampling == "with_replacement" else np.ones_like(counts)
    return Draw(clients, counts, updates)


def snapshot_step(world: AbstractWorld, round: int, tau: int) -> int:
    """Line 6: t' uniform on 1..tau, from the stream (seed, SNAPSHOT, round)."""
    return int(world.generator(Stream.SNAPSHOT, round).integers(1, tau + 1))


def dual_step(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config | DrdmConfig,
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


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    x, lam = state.x, lam_of(state.lam_n, state.lam_clients, state.lam_values, state.lam_rest)
    tau = cfg.local.steps
    assert tau is not None  # DrfaConfig refuses epochs
    for s in world.steps(state.round):
        d = draw(world, lam, cfg.clients_per_round, s, cfg.sampling)  # line 5
        t_snap = snapshot_step(world, s, tau)  # line 6
        work = learn.local_train(d.clients, x, cfg.local, s, snapshot_at=t_snap)  # lines 8-10
        # asked for; none when no client online was drawn (then work.params is [0, P] too)
        snapshots = work.params if work.snapshot is None else work.snapshot
        down = Down(x, torch.tensor(t_snap, dtype=torch.int32))
        done = yield from round_trip(
            world,
            d.clients,
            Packet(down, learn.bits(down)),  # line 7
            work.flops,
            Packet(Up(work.params, snapshots), learn.bits(Up(x, x))),  # line 11
            tag=s,
            deadline_s=cfg.deadline_s,
            client_state=work.keep,
        )
        if len(done.positions):
            # cohort order, not arrival order: timing never changes the means' rounding
            positions = np.sort(done.positions)
            arrived = torch.as_tensor(positions, device=x.device)
            draws = d.draws[positions]
            w_snap = weighted_mean(snapshots.index_select(0, arrived), draws)  # line 19
            x = weighted_mean(work.params.index_select(0, arrived), draws)  # line 20
            lam = yield from dual_step(world, learn, cfg, lam, w_snap, s)  # line 21
        world.publish(progress(State(s, x, *lam_fields(lam))))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import drfa as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
