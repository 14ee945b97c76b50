import math

import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import fedbuff


def test_buffer_applies_the_weighted_mean_of_k_deltas_by_hand():
    """K = 2, eta_g = 0.5, sqrt weighting: deltas (2, 0) fresh and (0, 4) with staleness 3
    give x + 0.5 / 2 * (1 * (2, 0) + 1/2 * (0, 4)) = (1, 1) + (0.5, 0.5)."""
    cfg = fedbuff.Config(buffer_size=2, server_lr=0.5)
    s = fedbuff.State(0, torch.tensor([1.0, 1.0]), torch.zeros(2), 0)
    s = fedbuff.receive(s, torch.tensor([2.0, 0.0]), 0, cfg)
    assert s.round == 0 and s.buffered == 1 and torch.equal(s.x, torch.tensor([1.0, 1.0]))
    s = fedbuff.receive(s, torch.tensor([0.0, 4.0]), 3, cfg)
    assert s.round == 1 and s.buffered == 0 and torch.equal(s.buffer, torch.zeros(2))
    assert_tensors_close(s.x, torch.tensor([1.5, 1.5]))


def test_without_weighting_every_delta_counts_the_same():
    cfg = fedbuff.Config(buffer_size=3, server_lr=1.0, staleness_weighting="none")
    s = fedbuff.State(4, torch.zeros(1), torch.zeros(1), 0)
    for d, tau in ((3.0, 0), (6.0, 5), (0.0, 9)):
        s = fedbuff.receive(s, torch.tensor([d]), tau, cfg)
    assert s.round == 5
    assert_tensors_close(s.x, torch.tensor([3.0]))


@pytest.mark.parametrize("tau, weight", [(0, 1.0), (3, 0.5), (8, 1 / 3)])
def test_staleness_weight(tau, weight):
    assert fedbuff.staleness_weight(tau, "sqrt") == pytest.approx(weight, rel=1e-15)
    assert fedbuff.staleness_weight(tau, "none") == 1.0


A = 0.5  # every client minimises 0.5 ||x - A||^2: one SGD step from x moves it by -lr (x - A)
LR, ETA_G = 0.1, 0.8


def quadratic(model, params, x, y, aux=None):
    return 0.5 * (params - A).square().sum(dim=1)


def test_two_clients_concurrency_two_k_two_by_hand(scenario):
    """Client 0 takes T0 for a download, one step and an upload, client 1 T1 (2 T0 < T1 <
    3 T0). Both start from x0. Arrivals: client 0 at T0 (fresh) and again at 2 T0 (it restarted
    at T0 from x0, still version 0): update 1, x1 = x0 + eta_g D(x0), at 2 T0. Client 1 at T1
    (started at version 0, now 1: staleness 1, weight 1/sqrt 2); client 0 at 3 T0 (restarted
    at 2 T0 from x1): update 2, x2 = x1 + eta_g / 2 (D(x0) / sqrt 2 + D(x1)), at 3 T0."""
    from flnet.runner import build
    from flnet.sim.radio import shannon_rate_bps, snr_hz_direct

    cpu = [5.0e6, 2.0e6]  # client 1 computes 2.5 times longer
    sc = scenario(
        model={"kind": "logistic"},
        algorithm={
            "name": "fedbuff",
            "concurrency": 2,
            "buffer_size": 2,
            "server_lr": ETA_G,
            "local": {"steps": 1, "batch_size": 16, "lr": LR},
        },
        clients={"count": 2, "cpu_hz": {"kind": "per_client", "values": cpu}, "flops_per_cycle": 4},
        radio={
            "mode": "direct",
            "uplink_snr_db": 20,
            "downlink_snr_db": 20,
            "uplink": {"bandwidth_hz": 20e6, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": 20e6, "sharing": "dedicated"},
        },
    )
    world, learn = build(sc)
    x0 = learn.model.init_params()
    model_bits = x0.numel() * 32
    link_s = model_bits / shannon_rate_bps(20e6, float(snr_hz_direct(20.0, 20e6)))
    flops = 16 * learn.flops_per_sample  # one step of batch 16
    t0, t1 = (2 * link_s + flops / (4 * f) for f in cpu)
    assert 2 * t0 < t1 < 3 * t0
    state = fedbuff.init(learn, sc.algorithm)
    seen = run_protocol(world, 2, fedbuff.protocol(world, learn, sc.algorithm, state, quadratic))

    def delta(x):
        return -LR * (x - A)

    x1 = x0 + ETA_G * delta(x0)
    x2 = x1 + ETA_G / 2 * (delta(x0) / math.sqrt(2) + delta(x1))
    one, two = seen
    assert one.sim_time_s == pytest.approx(2 * t0, rel=1e-12)
    assert two.sim_time_s == pytest.approx(3 * t0, rel=1e-12)
    assert_tensors_close(one.model, x1)
    assert_tensors_close(two.model, x2)
    assert one.figures == {"staleness_mean": 0.0, "staleness_max": 0}
    assert two.figures == {"staleness_mean": 0.5, "staleness_max": 1}
    assert (one.events, two.events) == (2, 4)


def test_an_interrupted_stream_resumes_to_the_same_records_and_ledger(scenario, tmp_path):
    """request_stop ends the run at the next server update, with the stream's work under way
    frozen into the state; --resume thaws it (shared uplink, fading): the same records and
    ledger as a run never interrupted."""

    def make(name):
        return scenario(
            algorithm={
                "name": "fedbuff",
                "concurrency": 4,
                "buffer_size": 3,
                "local": {"steps": 2, "batch_size": 8},
            },
            clients={"count": 8, "cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.6}},
            radio={"rayleigh_fading": True},
            run={
                "rounds": 20,
                "eval_every": 4,
                "checkpoint_every": None,
                "checkpoint_interval_s": None,
            },
            output={"dir": str(tmp_path / name)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(7))
    assert whole.records.staleness_max.max() >= 1  # the stream really was asynchronous


def test_the_fedbuff_scenario_runs(tmp_path):
    from flnet.runner import run

    res = run(
        "scenarios/fedbuff.yaml",
        overrides=["run.rounds=4", "run.eval_every=2", f"output.dir={tmp_path}"],
    )
    assert list(res.records["round"]) == [0, 2, 4]
    assert res.records.events.iloc[-1] == 4 * 5  # K = 5 deltas per server update
    assert res.records.test_accuracy.iloc[-1] > res.records.test_accuracy.iloc[0]
