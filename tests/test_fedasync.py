"""FedAsync (Xie, Koyejo and Gupta 2019): the staleness functions and the mixing weight by
hand, the server update x_t = (1 - alpha_t) x_{t-1} + alpha_t x_new, a two-client stream in
simulated time, batched stream starts equal to one by one, and exact resume."""

import numpy as np
import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import deferred, fedasync, fedbuff, staleness
from flnet.config import ConstantStaleness, HingeStaleness, PolynomialStaleness


@pytest.mark.parametrize(
    "fn, tau, s",
    [
        (ConstantStaleness(kind="constant"), 0, 1.0),
        (ConstantStaleness(kind="constant"), 7, 1.0),
        (PolynomialStaleness(a=0.5), 0, 1.0),  # (0 + 1)^-0.5
        (PolynomialStaleness(a=0.5), 3, 0.5),  # (3 + 1)^-0.5
        (PolynomialStaleness(a=2.0), 4, 1 / 25),  # (4 + 1)^-2
        (HingeStaleness(kind="hinge"), 4, 1.0),  # <= b = 4
        (HingeStaleness(kind="hinge"), 6, 1 / 21),  # 1 / (10 (6 - 4) + 1)
        (HingeStaleness(kind="hinge", a=0.5, b=1), 3, 0.5),  # 1 / (0.5 (3 - 1) + 1)
    ],
)
def test_mixing_weight_follows_the_staleness_function(fn, tau, s):
    cfg = fedasync.Config(alpha=0.8, staleness=fn)
    assert staleness.weight(tau, fn) == pytest.approx(s, rel=1e-15)
    assert fedasync.mixing_weight(tau, cfg) == pytest.approx(0.8 * s, rel=1e-15)


def test_the_papers_defaults():
    cfg = fedasync.Config()
    assert (cfg.alpha, cfg.rho, cfg.staleness.kind, cfg.staleness.a) == (
        0.6,
        0.005,
        "polynomial",
        0.5,
    )
    hinge = HingeStaleness(kind="hinge")
    assert (hinge.a, hinge.b) == (10.0, 4)


def test_fedbuffs_sqrt_weight_is_the_polynomial_with_a_half():
    for tau in range(6):
        assert fedbuff.staleness_weight(tau, "sqrt") == staleness.polynomial(tau, 0.5)


def test_server_update_by_hand():
    """alpha 0.6, polynomial a = 0.5, staleness 3: alpha_t = 0.3;
    x = 0.7 (1, 1) + 0.3 (3, -1) = (1.6, 0.4)."""
    cfg = fedasync.Config(alpha=0.6)
    s = fedasync.receive(
        fedasync.State(5, torch.tensor([1.0, 1.0])), torch.tensor([3.0, -1.0]), 3, cfg
    )
    assert s.round == 6
    assert_tensors_close(s.x, torch.tensor([1.6, 0.4]))


A = 0.5  # every client minimises 0.5 ||x - A||^2: one SGD step from x moves it by -lr (x - A)
LR, ALPHA = 0.1, 0.6


def quadratic(model, params, x, y, aux=None):
    return 0.5 * (params - A).square().sum(dim=1)


def test_two_clients_in_simulated_time_by_hand(scenario):
    """Client 0 takes T0 per work, client 1 T1 with 2 T0 < T1 < 3 T0; both start from x0 (in
    one batched call). Client 0 arrives at T0 (fresh): x1; restarts from x1, arrives at 2 T0
    (fresh): x2; client 1 arrives at T1 with its model from x0, two updates stale:
    alpha_3 = alpha / sqrt(3)."""
    from flnet.runner import build
    from flnet.sim.radio import shannon_rate_bps, snr_hz_direct

    cpu = [5.0e6, 2.0e6]
    sc = scenario(
        model={"kind": "logistic"},
        algorithm={
            "name": "fedasync",
            "concurrency": 2,
            "alpha": ALPHA,
            "local": {"steps": 1, "batch_size": 16, "lr": LR},
        },
        clients={"count": 2, "cpu_hz": {"kind": "per_client", "values": cpu}},
        radio={
            "mode": "direct",
            "uplink": {"bandwidth_hz": 20e6, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": 20e6, "sharing": "dedicated"},
        },
    )
    world, learn = build(sc)
    x0 = learn.model.init_params()
    link_s = x0.numel() * 32 / shannon_rate_bps(20e6, float(snr_hz_direct(20.0, 20e6)))
    t0, t1 = (2 * link_s + 16 * learn.flops_per_sample / (4 * f) for f in cpu)
    assert 2 * t0 < t1 < 3 * t0
    state = fedasync.init(learn, sc.algorithm)
    seen = run_protocol(world, 3, fedasync.protocol(world, learn, sc.algorithm, state, quadratic))

    def local(x):
        return x - LR * (x - A)

    def mix(x, x_new, a):
        return (1 - a) * x + a * x_new

    x1 = mix(x0, local(x0), ALPHA)
    x2 = mix(x1, local(x1), ALPHA)
    x3 = mix(x2, local(x0), ALPHA * 3**-0.5)
    assert [p.sim_time_s for p in seen] == pytest.approx([t0, 2 * t0, t1], rel=1e-12)
    for p, x in zip(seen, (x1, x2, x3)):
        assert_tensors_close(p.model, x)
    assert [p.figures["staleness_max"] for p in seen] == [0, 0, 2]
    assert seen[2].figures["alpha_t"] == pytest.approx(ALPHA / 3**0.5, rel=1e-15)


@pytest.mark.parametrize("name", ["fedasync", "fedbuff"])
def test_batched_starts_equal_one_by_one(scenario, name, monkeypatch):
    """On the eager path, clients starting at one instant train in one call: the same works
    (keys by client and work count) as each alone, within tolerance."""
    from flnet.runner import build

    monkeypatch.setattr(deferred, "LAZY", False)
    sc = scenario(
        algorithm={"name": name, "concurrency": 4, "local": {"steps": 3, "batch_size": 8}},
        clients={"count": 8},
    )
    world, learn = build(sc)
    module = fedasync if name == "fedasync" else fedbuff
    server = module.Server(learn, sc.algorithm, module.init(learn, sc.algorithm))
    clients, counts = np.array([5, 1, 6]), np.array([0, 2, 1])
    together = server.work(clients, counts)
    alone = [server.work(clients[i : i + 1], counts[i : i + 1])[0] for i in range(3)]
    assert len(together) == 3
    for a, b in zip(together, alone):
        assert_tensors_close(a.up.payload.model, b.up.payload.model)
        assert_tensors_close(a.up.payload.loss, b.up.payload.loss)  # the records' train_loss
        assert a.flops == b.flops and a.up.bits == b.up.bits
    # different keys train differently: the comparison is not vacuous
    assert not torch.allclose(together[0].up.payload.model, together[1].up.payload.model)


def test_an_interrupted_fedasync_stream_resumes_to_the_bit(scenario, tmp_path):
    def make(name):
        return scenario(
            algorithm={
                "name": "fedasync",
                "concurrency": 3,
                "staleness": {"kind": "hinge", "a": 2.0, "b": 1},
                "local": {"steps": 2, "batch_size": 8},
            },
            clients={"count": 6, "cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.3}},
            run={
                "rounds": 12,
                "eval_every": 1,
                "checkpoint_every": None,
                "checkpoint_interval_s": None,
            },
            output={"dir": str(tmp_path / name)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(5))
    assert whole.records.staleness_max.max() >= 1


def test_the_fedasync_scenario_runs(tmp_path):
    from flnet.runner import run

    res = run(
        "scenarios/fedasync.yaml",
        overrides=["run.rounds=30", "run.eval_every=15", f"output.dir={tmp_path}"],
    )
    assert list(res.records["round"]) == [0, 15, 30]
    assert res.records.events.iloc[-1] == 30  # one server update per arrival
    assert res.records.test_accuracy.iloc[-1] > res.records.test_accuracy.iloc[0]


def test_the_first_fill_trains_in_one_call_and_later_starts_alone(scenario, monkeypatch):
    """On the eager path (lazy batches: tests/test_deferred.py)."""
    from flnet.runner import build

    monkeypatch.setattr(deferred, "LAZY", False)
    sc = scenario(
        algorithm={"name": "fedasync", "concurrency": 4, "local": {"steps": 2, "batch_size": 8}},
        clients={"count": 8, "cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.5}},
    )
    world, learn = build(sc)
    sizes = []
    train = learn.local_train

    def counting(clients, *args, **kwargs):
        sizes.append(len(clients))
        return train(clients, *args, **kwargs)

    learn.local_train = counting
    run_protocol(
        world, 5, fedasync.protocol(world, learn, sc.algorithm, fedasync.init(learn, sc.algorithm))
    )
    assert sizes == [4, 1, 1, 1, 1]  # the fill in one call, then one per freed slot
