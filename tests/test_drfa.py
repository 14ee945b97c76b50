"""DRFA and DRDM: the simplex projection by hand, lambda on the simplex, the draws from lambda
(chi-square), the bits and FLOPs of a round against FedAvg's, a dual step with nobody online,
DRDM's correction on a quadratic and its snapshot model w(t') by hand, and checkpoint/resume of
the four new algorithms."""

import numpy as np
import pytest
import torch
from conftest import BASE
from hypothesis import given
from hypothesis import strategies as st
from tolerance import assert_tensors_close

from flnet.algorithms import distributional, drdm
from flnet.learn import simplex
from flnet.learn.dynamic import dynamic_loss
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
    assert simplex.Simplex.uniform(1000).entropy() == pytest.approx(np.log(1000))
    assert simplex.Simplex.uniform(1000).max() == pytest.approx(1e-3)


@given(
    st.lists(st.integers(0, 11), min_size=1, max_size=6, unique=True),
    st.lists(st.floats(-2, 2), min_size=6, max_size=6),
    st.lists(st.integers(0, 11), max_size=4, unique=True),
)
def test_sparse_ascent_is_the_dense_projection(clients, steps, known):
    """lambda stored as explicit entries plus one shared value projects exactly as the dense
    vector does, and stays on the simplex."""
    start = simplex.Simplex.uniform(12)
    if known:  # some clients already have their own entry
        start = start.ascent(np.array(known), np.linspace(0.1, 0.3, len(known)))
    steps = np.array(steps[: len(clients)])
    dense = start.dense()
    dense[clients] += steps
    after = start.ascent(np.array(clients), steps)
    np.testing.assert_allclose(after.dense(), simplex.project(dense), atol=1e-12)
    assert after.dense().min() >= 0 and after.dense().sum() == pytest.approx(1.0)
    assert after.entropy() == pytest.approx(simplex.entropy(after.dense()))
    assert after.max() == pytest.approx(after.dense().max())


def test_a_million_clients_cost_only_the_entries_touched():
    """theta = (1.6 - 1) / N: the two entries and the shared value move by it, nothing else is
    stored; draws from the shared block land on clients without an entry."""
    lam = simplex.Simplex.uniform(1_000_000).ascent(np.array([3, 999_999]), np.array([0.5, 0.1]))
    assert lam.clients.tolist() == [3, 999_999]
    np.testing.assert_allclose(lam.values, [0.5000004, 0.1000004], rtol=1e-12)
    assert lam.rest == pytest.approx(4e-7, rel=1e-9)
    draws = lam.sample(np.random.default_rng(0), 2000)
    others = draws[(draws != 3) & (draws != 999_999)]
    assert abs(len(others) / 2000 - 0.4) < 0.05  # the block's mass: (N - 2) * 4e-7
    assert len(np.unique(others)) > 0.9 * len(others)  # uniform over 999,998 clients


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
    p = np.array([0.5, 0.3, 0.15, 0.05])
    lam = simplex.Simplex.of(p)
    # the same lambda with client 0 explicit and the others reading one shared value
    shared = simplex.Simplex(4, np.array([0]), np.array([0.4]), 0.2)
    for weights, q in ((lam, p), (shared, np.array([0.4, 0.2, 0.2, 0.2]))):
        draws = np.concatenate([world.sample_weighted(20, r, weights) for r in range(1, 201)])
        expected = q * len(draws)
        chi2 = (((np.bincount(draws, minlength=4) - expected) ** 2) / expected).sum()
        assert chi2 < 16.27
    assert np.array_equal(
        world.sample_weighted(20, 7, lam), world_of(4).sample_weighted(20, 7, lam)
    )
    d = distributional.draw(world, lam, 20, 3, "dedup_weighted")
    assert d.draws.sum() == 20 and (d.state_updates == 1).all()
    assert np.array_equal(d.clients, np.unique(d.clients))
    r = distributional.draw(world, lam, 20, 3, "with_replacement")
    assert np.array_equal(r.state_updates, r.draws)
    half = simplex.Simplex.of(np.array([0.5, 0.5, 0, 0]))
    assert distributional.draw(world, half, 3, 3, "without_replacement").clients.tolist() == [0, 1]


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


def simulated(algorithm: dict, seed: int = 0):
    sc = load_scenario(data=merge(BASE, merge(SMALL, {"algorithm": algorithm, "seed": seed})))
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
    lam = distributional.lam_of(
        state.lam_n, state.lam_clients, state.lam_values, state.lam_rest
    ).dense()
    assert (lam >= 0).all() and lam.sum() == pytest.approx(1.0)
    assert not np.allclose(lam, 1 / 6)  # the dual step moved it


@pytest.mark.parametrize("name", ["drfa", "drdm"])
def test_a_dual_step_with_nobody_online_keeps_lambda_and_the_run_goes_on(name, monkeypatch):
    """The uniform draw U of the dual step finds nobody online (its stream only: training draws
    as usual): no loss, no ascent direction, so lambda stays uniform (entropy ln 6, largest entry
    1/6) through both rounds, while the model trains; the ledger holds no dual-step row."""
    from flnet.rng import Stream

    sc = load_scenario(
        data=merge(
            BASE,
            merge(
                SMALL,
                {
                    "algorithm": {"name": name, "clients_per_round": 3, "local": LOCAL},
                    "run": {"rounds": 2, "eval_every": 1},
                },
            ),
        )
    )
    sim = Run(sc, write=False)
    sample = sim.world.sample_clients

    def nobody_at_the_dual_step(k, round, over_selection=1.0, stream=Stream.SELECTION):
        if stream == Stream.DUAL_SELECTION:
            return np.zeros(0, dtype=np.int64)
        return sample(k, round, over_selection, stream)

    monkeypatch.setattr(sim.world, "sample_clients", nobody_at_the_dual_step)
    sim.simulate()
    res = sim.result()
    assert res.records["round"].tolist()[-1] == 2
    np.testing.assert_allclose(res.records.lambda_entropy, np.log(6), rtol=1e-12)
    np.testing.assert_allclose(res.records.lambda_max, 1 / 6, rtol=1e-12)
    assert res.records.test_loss.iloc[-1] != res.records.test_loss.iloc[0]  # w moved
    work = res.ledger[res.ledger.kind != "evaluate"]
    assert set(work["round"]) == {1, 2}  # both rounds trained
    up, down = work[work.kind == "upload"], work[work.kind == "download"]
    assert len(up) == len(down) and (up.bits == up.bits.iloc[0]).all()  # no 32-bit loss
    evaluated = res.ledger[res.ledger.kind == "evaluate"].set_index("round").start_s
    for r, rows in work.groupby("round"):  # the dual step took no time
        assert evaluated[r] == rows.end_s.max()


@pytest.mark.parametrize("sampling", ["without_replacement", "dedup_weighted", "with_replacement"])
def test_drdm_round_by_hand(sampling):
    """One DRDM round on 6 clients, m = 6 draws: lines 10, 18 and 20 from local models trained
    again here (g = 0 and w_bar = x0 at the start): g_i = -u_i mu (w_i - x0) with u_i the state
    updates (1, or the draws with `with_replacement`), c = -(mu / N) sum u_i (w_i - x0), and
    w_bar = sum_i draws_i w_i / m - c / mu."""
    mu = 0.5
    sim = simulated(
        {"name": "drdm", "mu": mu, "clients_per_round": 6, "sampling": sampling, "local": LOCAL}
    )
    learn, cfg = sim.learner, sim.scenario.algorithm
    x0 = learn.model.init_params()
    d = distributional.draw(sim.world, simplex.Simplex.uniform(6), 6, 1, sampling)
    if sampling == "without_replacement":
        assert d.draws.tolist() == [1] * 6
    w = learn.local_train(
        d.clients,
        x0,
        cfg.local,
        1,
        loss_fn=dynamic_loss(mu, x0),
        aux=torch.zeros(len(d.clients), len(x0)),
    ).params
    u = torch.as_tensor(d.state_updates, dtype=w.dtype)[:, None]
    g = learn.tables[drdm.TABLE].rows(d.clients)
    torch.testing.assert_close(g, -u * mu * (w - x0))
    c = -(mu / 6) * (u * (w - x0)).sum(0)
    torch.testing.assert_close(sim.state.c, c)
    draws = torch.as_tensor(d.draws, dtype=w.dtype)[:, None]
    torch.testing.assert_close(sim.state.x, (draws * w).sum(0) / 6 - c / mu)


@pytest.mark.parametrize("sampling", ["without_replacement", "dedup_weighted", "with_replacement"])
def test_drdm_snapshot_model_by_hand(sampling, monkeypatch):
    """Lines 17 and 19 of a round as `test_drdm_round_by_hand`'s: the snapshots w_i(t') are the
    local models after t' = 2 < tau = 3 steps (trained again here with t' steps: the same
    minibatches come first), c(t') = 0 - (mu / N) sum u_i (w_i(t') - x0) from c = 0 (not from
    line 18's c), and the model the dual step evaluates is
    w(t') = sum_i draws_i w_i(t') / m - c(t') / mu."""
    mu, tau = 0.5, LOCAL["steps"]
    passed = []
    dual_step = distributional.dual_step

    def spy(world, learn, cfg, lam, w_snapshot, round):
        passed.append(w_snapshot.clone())
        return (yield from dual_step(world, learn, cfg, lam, w_snapshot, round))

    monkeypatch.setattr(distributional, "dual_step", spy)
    sim = simulated(
        {"name": "drdm", "mu": mu, "clients_per_round": 6, "sampling": sampling, "local": LOCAL},
        seed=1,  # whose t' is 2 of tau = 3 (seed 0's is 3: w(t') would be w_bar)
    )
    learn, cfg = sim.learner, sim.scenario.algorithm
    t_snap = distributional.snapshot_step(sim.world, 1, tau)
    assert t_snap == 2
    x0 = learn.model.init_params()
    d = distributional.draw(sim.world, simplex.Simplex.uniform(6), 6, 1, sampling)
    w_snap = learn.local_train(
        d.clients,
        x0,
        cfg.local.model_copy(update={"steps": t_snap}),
        1,
        loss_fn=dynamic_loss(mu, x0),
        aux=torch.zeros(len(d.clients), len(x0)),
    ).params
    u = torch.as_tensor(d.state_updates, dtype=w_snap.dtype)[:, None]
    c_snap = -(mu / 6) * (u * (w_snap - x0)).sum(0)
    draws = torch.as_tensor(d.draws, dtype=w_snap.dtype)[:, None]
    assert len(passed) == 1
    assert_tensors_close(passed[0], (draws * w_snap).sum(0) / 6 - c_snap / mu)


def test_dual_step_by_hand():
    """Algorithm 3: m uniform clients (their own key), each one's cross-entropy of w(t') on B
    rows drawn from (seed, DUAL_BATCH, round, client), v_i = (N / m) l_i, and
    lambda = Pi(lambda + tau gamma v)."""
    from torch.nn import functional as F

    from flnet.rng import Stream, generator

    sim = simulated({"name": "drfa", "clients_per_round": 3, "dual_lr": 0.05, "local": LOCAL})
    learn, world, cfg = sim.learner, sim.world, sim.scenario.algorithm
    w = learn.model.init_params() * 0.5
    lam = simplex.Simplex.of(np.array([0.3, 0.1, 0.1, 0.2, 0.2, 0.1]))
    proc = world.env.process(distributional.dual_step(world, learn, cfg, lam, w, 9))
    world.env.run(proc)
    uniform = world.sample_clients(3, 9, stream=Stream.DUAL_SELECTION)
    data = learn.data
    v = np.zeros(6)
    for client in uniform:
        views, n = data.client_indices, data.num_samples[client]
        start = views.offsets[views.slot(np.array([client]))[0]]
        rows = views.indices[start + generator(0, Stream.DUAL_BATCH, 9, client).integers(0, n, 4)]
        logits = learn.model.forward(w, data.x_train[rows])
        v[client] = 6 / 3 * F.cross_entropy(logits, data.y_train[rows]).item()
    expected = simplex.project(lam.dense() + 3 * 0.05 * v)
    np.testing.assert_allclose(proc.value.dense(), expected, rtol=1e-6)
    ledger = world.ledger.frame()
    dual = ledger[(ledger["round"] == 9)]
    assert sorted(dual[dual.kind == "upload"].node.tolist()) == sorted(uniform.tolist())


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


def test_bad_settings_are_refused_by_field():
    from flnet.errors import ScenarioError

    base = merge(BASE, {"clients": {"count": 6}})
    with pytest.raises(ScenarioError, match="algorithm.clients_per_round.*clients.count is 6"):
        load_scenario(data=merge(base, {"algorithm": {"name": "drfa", "clients_per_round": 7}}))
    with pytest.raises(ScenarioError, match="algorithm.local.epochs"):
        load_scenario(
            data=merge(
                base,
                {"algorithm": {"name": "drdm", "local": {"epochs": 1, "steps": None}}},
            )
        )
    with pytest.raises(ScenarioError, match="algorithm.sampling"):
        load_scenario(data=merge(base, {"algorithm": {"name": "drfa", "sampling": "lottery"}}))


def test_weighted_draws_pick_only_online_clients_by_lambda_restricted_to_them():
    """Under an availability model the draws are lambda restricted to the clients online at
    the round's start, renormalised (as `sample_clients` picks among online clients): no
    offline client, and the counts within sampling error of that law (chi-square, df = 3,
    below chi2.ppf(0.999, 3) = 16.27); without replacement, distinct online clients."""
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "clients": {"count": 4, "availability": {"kind": "bernoulli", "p": 0.6}},
                "algorithm": {"cohort": {"clients_per_round": 1}},
            },
        )
    )
    world = World(sc.clients, sc.radio, sc.seed)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    lam = simplex.Simplex.of(p)
    counts, expected = np.zeros(4), np.zeros(4)
    for r in range(1, 301):
        online = world.online_clients(np.arange(4), r)
        drawn = world.sample_weighted(20, r, lam)
        assert online[drawn].all() and len(drawn) == (20 if online.any() else 0)
        counts += np.bincount(drawn, minlength=4)
        if online.any():
            expected += 20 * np.where(online, p, 0) / p[online].sum()
        distinct = world.sample_weighted(3, r, lam, replace=False)
        assert online[distinct].all() and len(np.unique(distinct)) == len(distinct)
        assert len(distinct) == min(3, online.sum())
    assert (((counts - expected) ** 2) / expected).sum() < 16.27


@pytest.mark.parametrize("name", ["drfa", "drdm"])
def test_under_availability_only_online_clients_work_and_an_empty_draw_passes(name):
    """Bernoulli p = 0.2 on 10 clients: every download (the training round's and the dual
    step's) goes to a client online in that round (stream AVAILABILITY keyed by (round,
    client)), and a round whose draw found nobody online leaves the run going."""
    from flnet.rng import Stream, generator

    p = 0.2
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {"name": name, "clients_per_round": 3},
                "clients": {"count": 10, "availability": {"kind": "bernoulli", "p": p}},
                "run": {"rounds": 6},
            },
        )
    )
    res = run(sc, write=False)
    assert res.summary["status"] == "completed" and res.records["round"].iloc[-1] == 6
    down = res.ledger[res.ledger.kind == "download"]
    for r, c in zip(down["round"].tolist(), down["node"].tolist()):
        assert generator(sc.seed, Stream.AVAILABILITY, r, c).random() < p, (r, c)
    assert set(down["round"]) != set(range(1, 7))  # some round drew nobody online


@pytest.mark.parametrize("name", ["drfa", "drdm"])
def test_a_round_trains_the_online_clients_lambda_weighs_by_hand(name, monkeypatch):
    """By hand: lambda puts 0.9 on client 0, which is offline; of the others only client 2 is
    online. lambda restricted to the online clients is then all on client 2: each training
    round draws it m = 3 times (it trains and uploads once, weighted 3) and no offline client
    gets a byte or a row; the dual step's uniform draw finds client 2 alone too."""
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {"name": name, "clients_per_round": 3},
                "clients": {"count": 4, "availability": {"kind": "bernoulli", "p": 0.5}},
                "run": {"rounds": 2},
            },
        )
    )
    r = Run(sc, write=False)
    monkeypatch.setattr(r.world, "_online", lambda clients, t_s, draw: np.asarray(clients) == 2)
    lam = simplex.Simplex.of(np.array([0.9, 0.05, 0.03, 0.02]))
    assert r.world.sample_weighted(3, 1, lam).tolist() == [2, 2, 2]
    d = distributional.draw(r.world, lam, 3, 1, "dedup_weighted")
    assert d.clients.tolist() == [2] and d.draws.tolist() == [3]
    r.simulate()
    ledger = r.result().ledger
    assert set(ledger[ledger.kind != "evaluate"].node) == {2}
    assert set(ledger["round"]) == {0, 1, 2}
