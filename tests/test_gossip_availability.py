"""Gossip nodes that are offline or opted out by their battery sit the iteration out
(`flnet.sim.patterns.exchange`): no compute, no sends, no ledger rows, exactly their previous
models, and their neighbours mix without them (hand mixes on a 3-4 node graph); C-DFL refuses
availability and batteries; a diurnal gossip run resumes to the bit."""

import numpy as np
import pandas as pd
import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from test_patterns import CPU, FLOPS, Commits, gossip_world, run_exchange
from tolerance import PARAM_RTOL, assert_records_close, assert_tensors_close

from flnet.algorithms import decentralized, dfedavg, dfedavgm, dfl, dpsgd, oledfl
from flnet.errors import ScenarioError
from flnet.rng import Stream, generator
from flnet.sim.patterns import IDLE_RETRY_S

P_ONLINE, N, ROUNDS, LR = 0.5, 4, 5, 0.1


def half_square(model, params, x, y, aux=None):
    """f(x) = ||x||^2 / 2 at every node: the gradient is x itself."""
    return 0.5 * params.square().sum(dim=1)


def online_by_hand(seed, k, n=N, p=P_ONLINE):
    """Bernoulli availability as documented: online iff the AVAILABILITY draw (seed, k, c) < p."""
    return np.array([generator(seed, Stream.AVAILABILITY, k, c).random() < p for c in range(n)])


def test_an_offline_node_sends_receives_and_computes_nothing(scenario, monkeypatch):
    """Path 0 - 1 - 2 with node 1 offline: every edge touches it, so nothing arrives; 0 and 2
    compute (0.5 s, 0.125 s) and only they are committed; node 1 has no ledger row."""
    world = gossip_world(scenario)
    monkeypatch.setattr(world, "online_clients", lambda ids, draw: np.asarray(ids) != 1)
    hook = Commits([])
    done, led = run_exchange(world, client_state=hook)
    assert list(done.present) == [True, False, True] and list(done.computed) == [True, False, True]
    assert not done.arrived.any() and hook.seen == [[0, 2]]
    assert set(led.node) == {0, 2} and set(led.kind) == {"compute"}  # no send to or from 1
    assert done.end_s == pytest.approx(1e9 / min(CPU[0], CPU[2]))
    assert led.flops.sum() == pytest.approx(2 * FLOPS)


def test_an_iteration_with_nobody_online_waits_and_charges_nothing(scenario, monkeypatch):
    world = gossip_world(scenario)
    monkeypatch.setattr(world, "online_clients", lambda ids, draw: np.zeros(len(ids), bool))
    done, led = run_exchange(world)
    assert done.end_s - done.start_s == IDLE_RETRY_S and len(led) == 0
    assert not done.present.any() and not done.computed.any() and not done.arrived.any()


def dpsgd_run(scenario, clients, rounds=ROUNDS):
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "dpsgd",
            "local": {"steps": 1, "lr": LR, "batch_size": 4},
            "topology": {"kind": "ring"},
        },
        clients={"count": N, **clients},
    )
    world, learn = build(sc)
    x0 = torch.randn(N, learn.model.num_params, generator=torch.Generator().manual_seed(0))
    proto = dpsgd.protocol(world, learn, sc.algorithm, dpsgd.State(0, x0), loss_fn=half_square)
    seen = run_protocol(world, rounds, proto)
    w = dpsgd.schedule_of(world, sc.algorithm).at(1).dense()
    return x0, seen, world.ledger.frame(), w, sc


def hand_dpsgd(w, x, present):
    """One D-PSGD iteration by hand: a present node mixes the present neighbours' x_j (an
    absent one's weight stays on its own x_i), then steps -lr x_i; an absent node keeps x_i."""
    x = x.double()
    out = x.clone()
    for i in np.flatnonzero(present):
        own = w[i, i] + sum(w[i, j] for j in range(N) if j != i and not present[j])
        mixed = own * x[i] + sum(w[i, j] * x[j] for j in range(N) if j != i and present[j])
        out[i] = mixed - LR * x[i]
    return out


def test_dpsgd_offline_nodes_keep_their_model_and_neighbours_mix_without_them(scenario):
    x0, seen, led, w, sc = dpsgd_run(scenario, {"availability": {"kind": "bernoulli", "p": 0.5}})
    x, mixed_rounds = x0, 0
    for k, p in enumerate(seen, start=1):
        present = online_by_hand(sc.seed, k)
        new = p.state.x
        for i in np.flatnonzero(~present):
            assert torch.equal(new[i], x[i])  # exactly its previous model
        assert_tensors_close(new, hand_dpsgd(w, x, present))
        rows = led[led["round"] == k]
        absent = set(np.flatnonzero(~present).tolist())
        assert not absent & set(rows.node) and not absent & set(rows.peer)
        assert set(rows[rows.kind == "compute"].node) == set(np.flatnonzero(present).tolist())
        assert p.figures["nodes_offline"] == len(absent)
        mixed_rounds += 0 < len(absent) < N
        x = new
    assert mixed_rounds >= 2  # the draws give iterations with some nodes on, some off


def test_a_battery_limited_node_stops_gossiping(scenario):
    """A round costs each node about 0.46 mJ; node 2 starts at 0.23 of 10 mJ (threshold 0.2):
    after iteration 1 it is below its threshold and sits every later iteration out."""
    battery = {
        "capacity_j": 0.01,
        "initial_soc": {"kind": "per_client", "values": [1.0, 1.0, 0.23, 1.0]},
        "threshold_soc": 0.2,
        "charging_start_hour": 12.0,  # no charging during the run (near 00:00 UTC)
        "charging_end_hour": 13.0,
    }
    x0, seen, led, w, _ = dpsgd_run(scenario, {"battery": battery}, rounds=3)
    assert set(led[led["round"] == 1].node) == {0, 1, 2, 3}
    later = led[led["round"] > 1]
    assert 2 not in set(later.node) and 2 not in set(later.peer) and len(later)
    assert [p.figures["nodes_offline"] for p in seen] == [0, 1, 1]
    assert torch.equal(seen[2].state.x[2], seen[0].state.x[2])
    present = np.array([True, True, False, True])
    assert_tensors_close(seen[1].state.x, hand_dpsgd(w, seen[0].state.x, present))


@pytest.mark.parametrize(
    "module,alg",
    [
        (dfedavg, {"name": "dfedavg"}),
        (dfedavgm, {"name": "dfedavgm", "momentum": 0.5}),
        (oledfl, {"name": "oledfl_sgd", "beta": 0.3}),
        (dfl, {"name": "dfl", "gossip_steps": 2}),
    ],
)
def test_local_step_algorithms_hold_an_absent_nodes_state_exactly(scenario, module, alg):
    """DFedAvg(M), OledFL (x and z) and DFL: an absent node ends the round with its state to
    the bit; DFedAvg's present nodes mix only what arrived (W Z by hand, absent j -> own z_i)."""
    from flnet.runner import build

    k_steps = 2
    sc = scenario(
        algorithm={**alg, "local": {"steps": k_steps, "lr": LR, "batch_size": 4}},
        clients={"count": N, "availability": {"kind": "bernoulli", "p": 0.7}},
    )
    world, learn = build(sc)
    state = module.init(learn, sc.algorithm)
    x0 = torch.randn(N, learn.model.num_params, generator=torch.Generator().manual_seed(1))
    state = state._replace(**{f: x0.clone() for f in ("x", "z") if f in state._fields})
    proto = module.protocol(world, learn, sc.algorithm, state, loss_fn=half_square)
    seen = run_protocol(world, 3, proto)
    w = decentralized.Gossip(world, sc.algorithm, algorithm="test").at(1).w.dense()
    prev = state
    for t, p in enumerate(seen, start=1):
        present = online_by_hand(sc.seed, t, p=0.7)  # node 2 mixes with 3, then sits out
        for field in prev._fields[1:]:
            for i in np.flatnonzero(~present):
                assert torch.equal(getattr(p.state, field)[i], getattr(prev, field)[i])
        assert p.figures["nodes_offline"] == int((~present).sum())
        if module is dfedavg:  # W Z by hand on the present rows, Z = (1 - lr)^K X
            z = (1 - LR) ** k_steps * prev.x.double()
            hand = hand_dpsgd(w, z, present) + LR * z
            assert_tensors_close(p.state.x[present], hand[present])
        prev = p.state


@pytest.mark.parametrize(
    "clients,field",
    [
        ({"availability": {"kind": "diurnal"}}, "clients.availability.kind"),
        ({"battery": {"capacity_j": 1000.0}}, "clients.battery"),
    ],
)
def test_cdfl_refuses_nodes_that_may_sit_a_step_out(scenario, clients, field):
    with pytest.raises(ScenarioError, match=f"{field}.*cdfl.*public copies"):
        scenario(algorithm={"name": "cdfl"}, clients={"count": N, **clients})


def test_a_diurnal_gossip_run_resumes_to_the_bit(scenario, tmp_path):
    def make(name):
        return scenario(
            algorithm={
                "name": "dpsgd",
                "local": {"steps": 1, "batch_size": 8},
                "topology": {"kind": "ring"},
            },
            clients={
                "count": 6,
                "availability": {"kind": "diurnal", "mean_online": 0.5},
                "battery": {"capacity_j": 50.0, "threshold_soc": 0.2},
            },
            run={
                "rounds": 6,
                "eval_every": 3,
                "checkpoint_every": None,
                "checkpoint_interval_s": None,
            },
            output={"dir": str(tmp_path / name)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(3))
    offline = whole.records.nodes_offline
    assert (offline > 0).any() and (offline < 6).any()


def train_everyone(world, learn, nodes, start, local, t, *, optimizer=None, loss_fn=None):
    """The path before `train_online`: every node trains, `exchange` discards the absent."""
    work = learn.local_train(nodes, start, local, t, optimizer=optimizer, loss_fn=loss_fn)
    present = np.asarray(world.online_clients(nodes, t), dtype=bool)
    learn.train_loss.add(work.loss[torch.as_tensor(present)])  # the records': the online's
    return decentralized.Work(work.params, work.flops, work.keep, present)


@pytest.mark.parametrize(
    "alg",
    [
        {"name": "dpsgd", "topology": {"kind": "ring"}, "local": {"steps": 1}},
        {"name": "dfedavg", "local": {"steps": 2}},
        {"name": "dfedavg", "local": {"steps": 2, "path": "sequential"}},
    ],
)
def test_only_online_nodes_train_and_the_run_is_unchanged(scenario, monkeypatch, tmp_path, alg):
    """Training only the nodes online (`train_online`) gives the run of training every node and
    discarding the absent (the path before): the same ledger to the bit, the same records,
    with optimizer state persisted (the commits go to the right rows); the learner trains
    exactly the nodes online, counted. The records' local steps describe the nodes that
    trained (0 in a round with nobody online). The sequential path trains each node alone:
    its records are the same to the bit; the batched kernels round differently at another
    cohort size (4 nodes against 8), so there the models agree to rounding
    (tests/tolerance.py)."""
    from flnet.learn.local import Learner
    from flnet.runner import run

    trained = []
    local_train = Learner.local_train

    def counting(self, clients, *args, **kwargs):
        trained.append(np.asarray(clients).copy())
        return local_train(self, clients, *args, **kwargs)

    monkeypatch.setattr(Learner, "local_train", counting)

    def make(name):
        return scenario(
            algorithm={
                **alg,
                "local": {
                    **alg["local"],
                    "lr": 0.05,
                    "batch_size": 8,
                    "optimizer": {"name": "sgd", "momentum": 0.9},
                    "optimizer_state": "persist",
                },
            },
            clients={"count": 8, "availability": {"kind": "bernoulli", "p": 0.5}},
            run={"rounds": 4, "eval_every": 1},
            output={"dir": str(tmp_path / name)},
        )

    sc = make("online")
    new = run(sc)
    counted = trained[:]
    with monkeypatch.context() as m:
        m.setattr(decentralized, "train_online", train_everyone)
        m.setattr(dpsgd, "train_online", train_everyone)
        old = run(make("everyone"))
    steps = [c for c in new.records.columns if c.startswith("local_steps")]
    a, b = new.records.drop(columns=steps), old.records.drop(columns=steps)
    if alg["local"].get("path") == "sequential":
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    else:
        np.testing.assert_allclose(a.consensus_distance, b.consensus_distance, rtol=PARAM_RTOL)
        assert_records_close(
            a.drop(columns="consensus_distance"), b.drop(columns="consensus_distance"), eval_rows=30
        )
    pd.testing.assert_frame_equal(new.ledger, old.ledger, check_exact=True)
    online = [np.flatnonzero(online_by_hand(sc.seed, t, n=8)) for t in range(1, 5)]
    assert [c.tolist() for c in counted] == [o.tolist() for o in online]
    assert 0 < sum(map(len, online)) < 4 * 8  # some nodes sat rounds out
    k = alg["local"]["steps"]
    assert new.records.local_steps_max.tolist() == [0] + [k if len(o) else 0 for o in online]
