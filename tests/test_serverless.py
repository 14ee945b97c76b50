"""DFedAvg, DFedAvgM, DFedSAM, OledFL-SGD/SAM, DFL and C-DFL: each round against a hand
computation on 2-3 nodes (a loss with a known gradient), the papers' identities between them, the
bits their messages are charged, and resume."""

import warnings

import numpy as np
import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import cdfl, dfedavg, dfedavgm, dfedsam, dfl, oledfl, oledfl_sam
from flnet.errors import ScenarioError
from flnet.learn import compress as cp
from flnet.scenario import load_scenario
from flnet.sim import spectral
from flnet.sim import topology as topo

ETA, K = 0.1, 2
PATH3 = np.array([[2 / 3, 1 / 3, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 1 / 3, 2 / 3]])


def half_square(model, params, x, y, aux=None):
    """f(x) = ||x||^2 / 2 at every node: the gradient is x itself."""
    return 0.5 * params.square().sum(dim=1)


def simulate(scenario, module, name, rounds, x0=None, mixing=None, loss_fn=half_square, **alg):
    """Runs `module`'s protocol on len(x0) nodes (W `mixing`, default PATH3) from State(x0...)
    for `rounds` rounds; returns every round's state and the world."""
    from flnet.runner import build

    n = len(x0) if x0 is not None else 3 if mixing is None else mixing.num_nodes
    local = {"steps": K, "lr": ETA, "batch_size": 4, **alg.pop("local", {})}
    radio = alg.pop("radio", {})
    sc = scenario(
        algorithm={"name": name, "local": local, **alg}, clients={"count": n}, radio=radio
    )
    world, learn = build(sc)
    state = module.init(learn, sc.algorithm)
    if x0 is not None:
        state = state._replace(**{f: x0.clone() for f in ("x", "z") if f in state._fields})
    w = topo.from_dense(PATH3) if mixing is None else mixing
    proto = module.protocol(world, learn, sc.algorithm, state, loss_fn=loss_fn, mixing=w)
    return [p.state for p in run_protocol(world, rounds, proto)], world, learn


@pytest.fixture
def x0():
    return torch.randn(3, 4810, generator=torch.Generator().manual_seed(0), dtype=torch.float32)


W = torch.tensor(PATH3, dtype=torch.float64)


def test_dfedavg_is_k_local_steps_then_one_mix(scenario, x0):
    states, world, _ = simulate(scenario, dfedavg, "dfedavg", 2, x0)
    x = x0.double()
    for s in states:
        x = W @ ((1 - ETA) ** K * x)  # X^{t+1} = W Z^t, Z^t = (1 - eta)^K X^t
        assert_tensors_close(s.x, x)
    ledger = world.ledger.frame()
    sends = ledger[ledger.kind == "d2d"]
    assert len(sends) == 2 * 4 and (sends.bits == 32 * 4810).all()  # one exchange a round


def test_dfedavgm_steps_are_nesterovs_y_and_x(scenario, x0):
    """y_{k+1} = x_k - eta g(x_k), x_{k+1} = y_{k+1} + theta (y_{k+1} - y_k), y_0 = x_0; the
    momentum restarts each round."""
    theta = 0.5
    states, *_ = simulate(scenario, dfedavgm, "dfedavgm", 2, x0, momentum=theta)
    x = x0.double()
    for s in states:
        y_prev = x
        for _ in range(K):
            y = x - ETA * x
            x, y_prev = y + theta * (y - y_prev), y
        x = W @ x
        assert_tensors_close(s.x, x)


def test_dfedsam_steps_along_the_gradient_at_the_ascent_point(scenario, x0):
    rho = 0.05
    states, *_ = simulate(scenario, dfedsam, "dfedsam", 1, x0, local={"sam_rho": rho})
    x = x0.double()
    for _ in range(K):  # grad at x + rho x / ||x|| is that point itself
        x = x - ETA * (x + rho * x / x.norm(dim=1, keepdim=True))
    assert_tensors_close(states[0].x, W @ x)


@pytest.mark.parametrize(
    "module,name,sam", [(oledfl, "oledfl_sgd", None), (oledfl_sam, "oledfl_sam", 0.05)]
)
def test_oledfl_starts_from_the_opposite_lookahead_point(scenario, x0, module, name, sam):
    beta = 0.3
    states, *_ = simulate(scenario, module, name, 3, x0, beta=beta, local={"sam_rho": sam})
    x = z = x0.double()
    for s in states:
        start = x + beta * (x - z)  # line 3 (round 0: z = x, no move)
        z = start
        for _ in range(K):
            g = z if sam is None else z + sam * z / z.norm(dim=1, keepdim=True)
            z = z - ETA * g
        x = W @ z
        assert_tensors_close(s.x, x)
        assert_tensors_close(s.z, z)


def test_oledfl_with_beta_zero_is_dfedavg(scenario, x0):
    ole, *_ = simulate(scenario, oledfl, "oledfl_sgd", 3, x0, loss_fn=None, beta=0.0)
    avg, *_ = simulate(scenario, dfedavg, "dfedavg", 3, x0, loss_fn=None)
    for a, b in zip(ole, avg):
        assert torch.equal(a.x, b.x)  # the same code path: bit for bit


def test_oledfl_is_dfedavg_mixing_with_w_tilde(scenario, x0):
    """X_0^{t+1} = (1 + beta) W Z^t - beta Z^t = W~ Z^t: OledFL's start of round t + 1 is
    DFedAvg's model after round t when DFedAvg mixes with W~ = (1 + beta) W - beta I (real
    minibatch gradients; the same keys (round, node) on both)."""
    beta = 0.4
    w_tilde = topo.from_dense((1 + beta) * PATH3 - beta * np.eye(3))
    ole, *_ = simulate(scenario, oledfl, "oledfl_sgd", 4, x0, loss_fn=None, beta=beta)
    avg, *_ = simulate(scenario, dfedavg, "dfedavg", 4, x0, loss_fn=None, mixing=w_tilde)
    for a, b in zip(ole, avg):
        assert_tensors_close(oledfl.ole_start(a.x, a.z, beta), b.x)
    assert not torch.allclose(ole[-1].x, avg[-1].x)  # the published x = W Z differs


def test_an_unstable_beta_warns_when_the_run_starts(scenario):
    with pytest.warns(oledfl.OleWarning, match="unstable"):
        simulate(
            scenario,
            oledfl,
            "oledfl_sgd",
            1,
            mixing=topo.from_edges(topo.graph_edges("ring", 4), 4),
            beta=0.9,
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error", oledfl.OleWarning)
        simulate(scenario, oledfl, "oledfl_sgd", 1, beta=0.4)  # PATH3: lambda_min = 0


def test_oledfls_start_solves_ws_eigenvalues_once(scenario, monkeypatch):
    """The records' spectral gap and the beta check both need round 1's W's eigenvalues
    (seconds at 1000 nodes): one dense solve, kept by the schedule, and each answer the one a
    solve of its own gives."""
    from flnet.algorithms import decentralized
    from flnet.runner import build

    solves, eigvalsh = [], np.linalg.eigvalsh
    monkeypatch.setattr(np.linalg, "eigvalsh", lambda a: solves.append(1) or eigvalsh(a))
    sc = scenario(
        algorithm={"name": "oledfl_sgd", "beta": 0.3, "topology": {"kind": "ring"}},
        clients={"count": 6},
    )
    world, _ = build(sc)
    gossip = oledfl.checked_gossip(world, sc.algorithm)
    assert len(solves) == 1
    ring = gossip.at(1).w
    assert gossip.figures(gossip.at(1))["spectral_gap"] == pytest.approx(1 / 3)  # 1 - 2/3
    assert spectral.smallest_eigenvalue(ring, gossip.eigenvalues)[0] == pytest.approx(-1 / 3)
    assert len(solves) == 1  # the same W again: kept
    assert spectral.smallest_eigenvalue(ring) == spectral.smallest_eigenvalue(
        ring, gossip.eigenvalues
    )
    assert len(solves) == 2  # without the schedule: solved afresh
    # a W given directly (no schedule): nothing kept
    direct = decentralized.Gossip(world, sc.algorithm, algorithm="OledFL", mixing=ring)
    direct.eigenvalues(ring), direct.eigenvalues(ring)
    assert len(solves) == 4


def test_dfl_is_tau1_local_steps_then_tau2_gossip_steps(scenario, x0):
    states, world, _ = simulate(scenario, dfl, "dfl", 2, x0, gossip_steps=3)
    x = x0.double()
    for s in states:
        x = torch.linalg.matrix_power(W, 3) @ ((1 - ETA) ** K * x)
        assert_tensors_close(s.x, x)
    ledger = world.ledger.frame()
    assert len(ledger[ledger.kind == "d2d"]) == 2 * 3 * 4  # rounds x tau2 x edges
    assert set(ledger[ledger.kind == "d2d"]["round"]) == {1, 2}
    # only the tau1 local steps compute: one row per node and round, none for gossip steps 2-3
    compute = ledger[ledger.kind == "compute"]
    assert len(compute) == 2 * 3 and (compute.flops > 0).all()
    assert compute.groupby("round").node.apply(sorted).tolist() == [[0, 1, 2]] * 2


def choco_by_hand(x0, rounds, tau2, gamma, order):
    """Algorithm 2 with Q = identity, densely: lines 4, 6, 7, 11."""
    x, x_hat, out = x0.double(), torch.zeros_like(x0.double()), []
    for _ in range(rounds):
        x = (1 - ETA) ** K * x
        for _ in range(tau2):
            if order == "paper":
                x = x + gamma * (W @ x_hat - x_hat)
                x_hat = x_hat + (x - x_hat)
            else:
                x_hat = x_hat + (x - x_hat)
                x = x + gamma * (W @ x_hat - x_hat)
        out.append((x, x_hat))
    return out


@pytest.mark.parametrize("order", ["paper", "compress_first"])
def test_cdfl_gossip_steps_are_choco_gossip_on_public_copies(scenario, x0, order):
    states, *_ = simulate(
        scenario, cdfl, "cdfl", 3, x0, gossip_steps=2, consensus_step=0.5, order=order
    )
    for s, (x, x_hat) in zip(states, choco_by_hand(x0, 3, 2, 0.5, order)):
        assert_tensors_close(s.x, x)
        assert_tensors_close(s.x_hat, x_hat)


def test_cdfl_with_identity_and_gamma_one_is_dfl_in_chocos_order(scenario, x0):
    """Compress first (CHOCO-SGD's order): w_hat = w before each mix, so the step is W w."""
    c, *_ = simulate(
        scenario, cdfl, "cdfl", 3, x0, loss_fn=None, gossip_steps=3, order="compress_first"
    )
    d, *_ = simulate(scenario, dfl, "dfl", 3, x0, loss_fn=None, gossip_steps=3)
    for a, b in zip(c, d):
        assert_tensors_close(a.x, b.x)


def test_cdfl_in_the_papers_order_is_dfl_but_for_each_rounds_first_step(scenario, x0):
    """Algorithm 2 as written: the first gossip step of a round mixes the copies from before the
    local steps, w + (C - I) w_hat_prev; round 1 mixes zeros. Steps 2..tau2 are DFL's."""
    states, *_ = simulate(scenario, cdfl, "cdfl", 2, x0, gossip_steps=3)
    x_prev = x0.double()
    for t, s in enumerate(states):
        local = (1 - ETA) ** K * x_prev
        first = local if t == 0 else local + (W - torch.eye(3, dtype=W.dtype)) @ x_prev
        x_prev = W @ (W @ first)
        assert_tensors_close(s.x, x_prev)
    assert not torch.allclose(
        x_prev, torch.linalg.matrix_power(W, 3) @ ((1 - ETA) ** K * x0.double())
    )


@pytest.mark.parametrize(
    "compression,bits",
    [
        ({"kind": "top_k", "fraction": 0.01}, cp.top_k_bits(48, 4810)),
        ({"kind": "rand_k", "fraction": 0.25}, 32 * 1202 + 64),
        ({"kind": "qsgd", "levels": 7}, 32 + 4810 * (1 + 3)),
    ],
    ids=["top_k", "rand_k", "qsgd"],
)
def test_compressed_messages_are_charged_their_sizes(scenario, x0, compression, bits):
    _, world, _ = simulate(scenario, cdfl, "cdfl", 1, x0, gossip_steps=2, compression=compression)
    sends = world.ledger.frame().query("kind == 'd2d'")
    assert len(sends) == 2 * 4 and (sends.bits == bits).all()


def test_top_k_bits_by_hand():
    # k = 48 of d = 4810: 48 values and 48 positions of 13 bits (624 < the 4810-bit mask)
    assert cp.top_k_bits(48, 4810) == 32 * 48 + 48 * 13


def test_random_gossip_charges_a_skip_flag_for_a_node_that_does_not_send(scenario, x0):
    _, world, _ = simulate(
        scenario,
        cdfl,
        "cdfl",
        2,
        x0,
        gossip_steps=3,
        compression={"kind": "random_gossip", "p": 0.5},
    )
    sends = world.ledger.frame().query("kind == 'd2d'")
    assert set(sends.bits) == {1.0, 32.0 * 4810}
    per_step = sends.groupby(["round", "start_s", "node"]).bits.nunique()
    assert (per_step == 1).all()  # a node's coin decides all of its messages in a step


def test_cdfl_refuses_a_timeout():
    with pytest.raises(ScenarioError, match="timeout_s"):
        load_scenario(data={"algorithm": {"name": "cdfl", "timeout_s": 1.0}})


def test_sam_methods_need_a_radius_and_dfedavgm_its_own_momentum():
    with pytest.raises(ScenarioError, match="algorithm.local.sam_rho: DFedSAM takes SAM"):
        load_scenario(data={"algorithm": {"name": "dfedsam", "local": {"sam_rho": None}}})
    with pytest.raises(ScenarioError, match="algorithm.local.optimizer: DFedAvgM"):
        load_scenario(
            data={"algorithm": {"name": "dfedavgm", "local": {"optimizer": {"momentum": 0.9}}}}
        )
    with pytest.raises(ScenarioError, match="beta"):
        load_scenario(data={"algorithm": {"name": "oledfl_sgd", "beta": 1.0}})


@pytest.mark.parametrize("name", ["oledfl_sgd", "cdfl"])
def test_an_interrupted_run_resumes_to_the_same_records_and_ledger(scenario, tmp_path, name):
    """OledFL's z and C-DFL's public copies (and rand-k's keyed draws) go through a checkpoint."""
    extra = {"compression": {"kind": "rand_k", "fraction": 0.3}} if name == "cdfl" else {}

    def make(out):
        return scenario(
            algorithm={"name": name, "local": {"steps": 2, "batch_size": 8}, **extra},
            clients={"count": 5},
            run={
                "rounds": 6,
                "eval_every": 3,
                "checkpoint_every": None,
                "checkpoint_interval_s": None,
            },
            output={"dir": str(tmp_path / out)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(2))
    assert {"consensus_distance", "node_accuracy_mean", "node_accuracy_worst"} <= set(whole.records)


def test_cdfl_refuses_lossy_links():
    with pytest.raises(ScenarioError, match="radio.d2d.loss_probability: must be 0 for cdfl"):
        load_scenario(
            data={"algorithm": {"name": "cdfl"}, "radio": {"d2d": {"loss_probability": 0.1}}}
        )


def test_dfl_draws_each_gossip_steps_losses_afresh(scenario, x0):
    """Losses are keyed (round, gossip step): the tau2 steps of a round lose different edges."""
    _, world, _ = simulate(
        scenario, dfl, "dfl", 1, x0, gossip_steps=3, radio={"d2d": {"loss_probability": 0.5}}
    )
    rx = world.ledger.frame().query("kind == 'd2d_rx'").sort_values(["start_s", "node", "peer"])
    lost = rx.outcome.eq("lost").to_numpy().reshape(3, 4)  # steps x edges
    assert not (lost[0] == lost[1]).all() or not (lost[1] == lost[2]).all()


def test_cdfl_refuses_a_time_varying_graph():
    with pytest.raises(ScenarioError, match="algorithm.topology.kind: cdfl needs a fixed graph"):
        load_scenario(
            data={"algorithm": {"name": "cdfl", "topology": {"kind": "random_k", "k": 2}}}
        )


def test_a_time_varying_graph_is_drawn_afresh_each_round(scenario):
    """OledFL's default topology: each node picks k random neighbours every round (random_k,
    keyed by the round); the messages follow each round's graph."""
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "dfedavg",
            "topology": {"kind": "random_k", "k": 2},
            "local": {"steps": 1},
        },
        clients={"count": 6},
    )
    world, learn = build(sc)
    proto = dfedavg.protocol(world, learn, sc.algorithm, dfedavg.init(learn, sc.algorithm))
    with pytest.warns(topo.TopologyWarning, match="assumes a symmetric W"):  # directed
        run_protocol(world, 3, proto)
    sends = world.ledger.frame().query("kind == 'd2d'")
    links = [set(zip(r.node, r.peer)) for _, r in sends.groupby("round")]
    assert len(links) == 3 and not (links[0] == links[1] == links[2])
    assert all(len(pairs) == 6 * 2 for pairs in links)  # directed: each node hears k = 2 others


@pytest.mark.parametrize(
    "name", ["dfedavg", "dfedavgm", "dfedsam", "oledfl_sgd", "oledfl_sam", "dfl", "cdfl"]
)
def test_each_shipped_scenario_runs(name):
    from flnet.runner import run

    records = run(
        load_scenario(f"scenarios/{name}.yaml", ["run.rounds=2", "run.eval_every=1"]), write=False
    ).records
    assert records["round"].tolist() == [0, 1, 2] and (records.algorithm == name).all()
    assert (records.bits_d2d.diff().dropna() > 0).all() and (records.bits_up == 0).all()
    assert records.node_accuracy_worst.le(records.node_accuracy_mean).all()


def test_a_node_whose_work_the_timeout_cut_keeps_its_start(scenario, x0):
    """timeout_s far below one local step: no compute completes, nothing is sent, W_t = I, so
    every node keeps its start (OledFL's z too: the next Ole term is 0)."""
    states, world, _ = simulate(scenario, oledfl, "oledfl_sgd", 2, x0, beta=0.3, timeout_s=1e-9)
    for s in states:
        assert torch.equal(s.x, x0) and torch.equal(s.z, x0)
    assert (world.ledger.frame().query("kind == 'compute'").outcome == "timeout").all()
