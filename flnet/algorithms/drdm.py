"""DRDM: Krouka, Ben Issaid and Bennis, "Distributionally Robust Federated Learning with Client
Drift Minimization", arXiv 2505.15371, Algorithms 1-3.

DRFA (`flnet.algorithms.drfa`: lambda-sampling, the snapshot step t', the dual step, shared in
`flnet.algorithms.distributional`) whose clients minimise FedDyn's dynamically regularised
objective (Eq. 3, `flnet.learn.dynamic.dynamic_loss`) and whose server corrects both averages
with c (FedDyn's h). Round s:
  5-7  draw D from lambda, t' from 1..tau; send w_bar and t' to D;
  9    each client takes tau steps of d = grad l_i(w) - g_i + mu (w - w_bar) (Eq. 6), keeping
       its iterate after t' steps;
  10   g_i <- g_i - mu (w_i - w_bar)  (the stored "lagged gradient", 0 at first);
  11   upload w_i and w_i(t');
  17   c(t') = c - (mu / N) sum_{i in D} (w_i(t') - w_bar);
  18   c     = c - (mu / N) sum_{i in D} (w_i - w_bar);
  19   w(t') = mean_D w_i(t') - c(t') / mu;
  20   w_bar = mean_D w_i - c / mu;
  21   lambda <- DualVariableUpdate(gamma, tau, w(t'), lambda)  (Algorithm 3, `dual_step`).

Fixes of the paper's text (digest drdm.md 2.6, applied here):
- Lines 17-18 print "sum w_i - w_bar", subtracting w_bar once; the analysis (proof of Lemma 3.10)
  uses sum (w_i - w_bar), which is implemented (FedDyn's h-update, `dynamic.server_h`).
- g_i is a stored vector updated by line 10, not a gradient recomputed at w_bar (Algorithm 2
  line 3 read literally would do that; line 10 and footnote 1 make it FedDyn's state).
- c(t') is a temporary: c^(s+1) is computed from c^(s), not from c(t').
- Sampling: with `dedup_weighted` (default) each distinct client's g_i and its term in c are
  updated once (the digest's pilot diverged when each draw updated g_i); `with_replacement`
  updates them once per draw; the means in lines 19-20 weigh each client by its draws.
Everything else (delivery, the dual step's costs, lambda) is as `flnet.algorithms.drfa` says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from flnet.algorithms import delivery, distributional, train_loss
from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DrdmConfig as Config
from flnet.learn.aggregate import weighted_mean
from flnet.learn.cohort import LossFn, cross_entropy
from flnet.learn.dynamic import client_gradient, dynamic_loss, server_h, server_model
from flnet.learn.table import Keep, Keeps
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner

TABLE = "drdm.grad"  # per client: g_i, its lagged gradient grad f_i(w_i)


class State(NamedTuple):
    round: int
    x: torch.Tensor  # [P] global model w_bar
    lam_n: int  # lambda on the simplex, as drfa.State holds it (`distributional.lam_fields`)
    lam_clients: torch.Tensor
    lam_values: torch.Tensor
    lam_rest: float
    c: torch.Tensor  # [P] the server's correction


def init(learn: Learner, cfg: Config) -> State:
    x = learn.model.init_params()
    return State(
        0,
        x,
        *distributional.lam_fields(distributional.initial_lambda(learn, cfg)),
        torch.zeros_like(x),
    )


def progress(state: State) -> Progress:
    """What observers see after round `state.round`: w_bar is the one judged."""
    lam = distributional.lambda_of(state)
    return Progress(state.round, state.x, state, figures=distributional.lambda_figures(lam))


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    base_loss: LossFn = cross_entropy,
) -> Steps:
    """`base_loss` replaces the clients' l_i (tests use a quadratic)."""
    x, c = state.x, state.c
    lam = distributional.lambda_of(state)
    mu, n = cfg.mu, world.num_clients
    grads = learn.client_table(TABLE, torch.zeros_like(x))  # rows only once written
    tau = cfg.local.steps
    assert tau is not None  # DrfaConfig refuses epochs
    for s in world.steps(state.round):
        d = distributional.draw(world, lam, cfg.clients_per_round, s, cfg.sampling)  # line 5
        t_snap = distributional.snapshot_step(world, s, tau)  # line 6
        g = grads.rows(d.clients)  # [C, P]
        work = learn.local_train(
            d.clients,
            x,
            cfg.local,
            s,
            loss_fn=dynamic_loss(mu, x, base_loss),  # Eq. 6
            aux=g,
            snapshot_at=t_snap,
        )  # line 9
        # counts only where a client's state is updated more than once (with_replacement)
        repeated = bool((np.asarray(d.state_updates) != 1).any())
        updates = torch.as_tensor(d.state_updates, device=x.device) if repeated else None
        g_new = client_gradient(g, mu, work.params, x, updates)  # line 10
        keep = Keeps(Keep(grads, d.clients, g_new), work.keep)
        done = yield from distributional.training_trip(
            world, learn, cfg, s, d, t_snap, x, work, keep
        )  # lines 7-11
        got = delivery.delivered(done, d.clients, learn.num_samples)
        train_loss.delivered(learn, got, work, d.draws)
        if got is not None:
            last, snap = got.rows(work.params), got.rows(distributional.snapshots(work))
            once = None if updates is None else got.rows(updates)
            c_snap = server_h(c, mu, n, snap, x, once)  # line 17
            c = server_h(c, mu, n, last, x, once)  # line 18
            draws = d.draws[got.positions]
            w_snap = server_model(weighted_mean(snap, draws), c_snap, mu)  # line 19
            x = server_model(weighted_mean(last, draws), c, mu)  # line 20
            lam = yield from distributional.dual_step(world, learn, cfg, lam, w_snap, s)  # line 21
        world.publish(progress(State(s, x, *distributional.lam_fields(lam), c)))


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import drdm as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
