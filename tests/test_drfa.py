"""DRFA and DRDM: the simplex projection by hand, lambda on the simplex, the draws from lambda
(chi-square), the bits and FLOPs of a round against FedAvg's, DRDM's correction on a
quadratic, and checkpoint/resume of the four new algorithms."""

import numpy as np
import pytest
import torch
from conftest import BASE
from hypothesis import given
from hypothesis import strategies as st

from flnet.algorithms import drdm, drfa
from flnet.learn import simplex
from flnet.runner import Run, run
from flnet.scenario import load_scenario, merge
from flnet.sim.world import World


def test_projection_by_hand():
    # u = (1, 0.5, -0.5): u_j - (cumsum_j - 1) / j = 1, 0.25, -0.5 -> rho = 2, theta = 0.25
    assert simplex.project(np.array([1.0, 0.5, -0.5])).tolist() == [0.75, 0.25, 0.0]
    # a point already on the simplex is its own projection; a shift along (1, ..., 1) is undone
    p = np.array([0.2, 0.3, 0.5])
    np.testing.assert_allclose(simplex.project(p), p)
    np.testing.assert_allclose(simplex.project(p + 7.0), p)


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=12))
def test_projection_is_on_the_simplex_and_closest(values):
    v = np.array(values)
    p = simplex.project(v)
    assert (p >= 0).all() and p.sum() == pytest.approx(1.0)
    # optimality: <v - p, q - p> <= 0 for every vertex q of the simplex
    for i in range(len(v)):
        q = np.eye(len(v))[i]
        assert (v - p) @ (q - p) <= 1e-9


def test_entropy():
    assert simplex.entropy(np.full(4, 0.25)) == pytest.approx(np.log(4))
    assert simplex.entropy(np.array([1.0, 0.0])) == 0.0


def world_of(n: int) -> World:
    sc = load_scenario(
        data=merge(
            BASE, {"clients": {"count": n}, "algorithm": {"cohort": {"clients_per_round": 1}}}
        )
    )
    return World(sc.clients, sc.radio, sc.seed)


def test_draw_counts_follow_lambda():
    """4000 draws with replacement: Pearson's chi-square against lambda within sampling error
    (below chi2.ppf(0.999, df=3) = 16.27), and every round's draws keyed by the round."""
    world = world_of(4)
    lam = np.array([0.5, 0.3, 0.15, 0.05])
    draws = np.concatenate([world.sample_weighted(20, r, lam) for r in range(1, 201)])
    expected = lam * len(draws)
    chi2 = (((np.bincount(draws, minlength=4) - expected) ** 2) / expected).sum()
    assert chi2 < 16.27
    assert np.array_equal(
        world.sample_weighted(20, 7, lam), world_of(4).sample_weighted(20, 7, lam)
    )
    d = drfa.draw(world, lam, 20, 3, "dedup_weighted")
    assert d.draws.sum() == 20 and (d.state_updates == 1).all()
    assert np.array_equal(d.clients, np.unique(d.clients))
    r = drfa.draw(world, lam, 20, 3, "with_replacement")
    assert np.array_equal(r.state_updates, r.draws)
    assert (
        len(drfa.draw(world, np.array([0.5, 0.5, 0, 0]), 3, 3, "without_replacement").clients) == 2
    )


def test_the_dual_draw_has_its_own_key():
    from flnet.rng import Stream

    world = world_of(50)
    first = world.sample_clients(5, 1)
    dual = world.sample_clients(5, 1, stream=Stream.DUAL_SELECTION)
    assert not np.array_equal(first, dual)
    assert np.array_equal(world.sample_clients(5, 1), first)  # the cache keeps both


SMALL = {
    "data": {"dataset": "digits"},
    "model": {"kind": "mlp", "hidden": [16]},
    "clients": {"count": 6},
    "run": {"rounds": 1},
}
LOCAL = {"steps": 3, "batch_size": 4}


def simulated(algorithm: dict):
    sc = load_scenario(data=merge(BASE, merge(SMALL, {"algorithm": algorithm})))
    sim = Run(sc, write=False)

    class Last:
        def on_start(self, world):
            pass

        def on_progress(self, world, progress, stopping):
            sim.state = progress.state

        def on_end(self, world, reason):
            pass

    sim.world.observers.append(Last())
    sim.simulate()
    return sim


@pytest.mark.parametrize("name", ["drfa", "drdm"])
def test_bits_and_flops_of_a_round_against_fedavgs(name):
    """Participants: the model and t' (32 bits) down, two models up; the dual step: the model
    down to m clients, a forward-only minibatch each, one 32-bit loss up each."""
    m = 3
    fedavg = simulated({"name": "fedavg", "cohort": {"clients_per_round": m}, "local": LOCAL})
    ref = fedavg.result().ledger
    model_bits = ref[ref.kind == "upload"].bits.iloc[0]
    train_flops = ref[ref.kind == "compute"].flops.iloc[0]
    sim = simulated({"name": name, "clients_per_round": m, "local": LOCAL})
    ledger = sim.result().ledger
    state = sim.state
    distinct = len(sim.learner.tables[drdm.TABLE]) if name == "drdm" else None
    up = sorted(ledger[ledger.kind == "upload"].bits.tolist())
    down = sorted(ledger[ledger.kind == "download"].bits.tolist())
    flops = sorted(ledger[ledger.kind == "compute"].flops.tolist())
    participants = len(up) - m
    assert 1 <= participants <= m
    assert distinct in (None, participants)
    assert up == [32] * m + [2 * model_bits] * participants
    assert down == [model_bits] * m + [model_bits + 32] * participants
    forward = 4 * sim.learner.model.forward_flops_per_sample()
    assert flops == pytest.approx([forward] * m + [train_flops] * participants, rel=1e-12)
    lam = state.lam.numpy()
    assert (lam >= 0).all() and lam.sum() == pytest.approx(1.0)
    assert not np.allclose(lam, 1 / 6)  # the dual step moved it


def test_drdm_server_by_hand_on_one_round():
    """With every client drawn once (m = N distinct, without replacement), lines 17-20 are
    FedDyn's server step at the last iterate and at the snapshot."""
    sim = simulated(
        {
            "name": "drdm",
            "mu": 0.5,
            "clients_per_round": 6,
            "sampling": "without_replacement",
            "local": LOCAL,
        }
    )
    x0 = sim.learner.model.init_params()
    g = sim.learner.tables[drdm.TABLE].rows(np.arange(6))
    # line 10: g_i = -mu (w_i - w_bar), so w_i = x0 - g_i / mu; line 18: c = mean_i g_i (N = 6)
    w = x0 - g / 0.5
    c = sim.state.c
    torch.testing.assert_close(c, g.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sim.state.x, w.mean(0) - c / 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["feddyn", "moon", "drfa", "drdm"])
def test_scenario_runs_and_resumes_to_the_same_records(tmp_path, name):
    """Each algorithm's server state and client tables go through a checkpoint exactly."""
    small = ["clients.count=10", "run.eval_every=2"]
    small.append(
        "algorithm.clients_per_round=4"
        if name in ("drfa", "drdm")
        else "algorithm.cohort.clients_per_round=4"
    )
    every = [*small, "run.checkpoint_every=2"]
    path = f"scenarios/{name}.yaml"
    whole = run(path, overrides=[*every, "run.rounds=4", f"output.dir={tmp_path / 'a'}"])
    loss = whole.records.test_loss
    assert loss.iloc[-1] < loss.iloc[0]  # it trains (the full scenarios reach 0.9 accuracy)
    part = [*every, f"output.dir={tmp_path / 'b'}"]
    run(path, overrides=[*part, "run.rounds=2"])
    resumed = run(path, overrides=[*part, "run.rounds=4"], resume=True)
    assert resumed.records.equals(whole.records)
    assert resumed.ledger.equals(whole.ledger)
    if name in ("drfa", "drdm"):
        assert {"lambda_entropy", "lambda_max"} <= set(whole.records.columns)
