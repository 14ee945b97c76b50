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

from typing import TYPE_CHECKING, NamedTuple

import torch

from flnet.algorithms import delivery, distributional, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DrfaConfig as Config
from flnet.learn.aggregate import weighted_mean
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


def init(learn: Learner, cfg: Config) -> State:
    return State(
        0,
        learn.model.init_params(),
        *distributional.lam_fields(distributional.initial_lambda(learn, cfg)),
    )


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: the global model w is the one judged."""
    lam = distributional.lambda_of(state)
    return Progress(state.round, state.x, state, figures=distributional.lambda_figures(lam))


def protocol(world: AbstractWorld, learn: Learner, cfg: Config, state: State) -> Steps:
    x, lam = state.x, distributional.lambda_of(state)
    tau = cfg.local.steps
    assert tau is not None  # DrfaConfig refuses epochs
    for s in world.steps(state.round):
        d = distributional.draw(world, lam, cfg.clients_per_round, s, cfg.sampling)  # line 5
        t_snap = distributional.snapshot_step(world, s, tau)  # line 6
        work = learn.local_train(d.clients, x, cfg.local, s, snapshot_at=t_snap)  # lines 8-10
        done = yield from distributional.training_trip(
            world, learn, cfg, s, d, t_snap, x, work, work.keep
        )  # lines 7-11
        got = delivery.delivered(done, d.clients, learn.num_samples)
        train_loss.delivered(learn, got, work, d.draws)
        if got is not None:
            draws = d.draws[got.positions]
            w_snap = weighted_mean(got.rows(distributional.snapshots(work)), draws)  # line 19
            x = weighted_mean(got.rows(work.params), draws)  # line 20
            lam = yield from distributional.dual_step(world, learn, cfg, lam, w_snap, s)  # line 21
        world.publish(progress(State(s, x, *distributional.lam_fields(lam))))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import drfa as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
