"""Partial work (FedProx, Li et al. 2020, Section 5.2): the steps that fit before a deadline,
by hand from a client's rates and step time; charged for those steps; FedProx aggregates the
partial update and FedAvg drops it; the code's random stragglers."""

import numpy as np
import pytest
import torch
from harness import run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import fedavg, fedprox, partial
from flnet.errors import ScenarioError
from flnet.learn.aggregate import weighted_mean
from flnet.rng import Stream, generator
from flnet.scenario import load_scenario
from flnet.sim.radio import shannon_rate_bps, snr_hz_direct

CPU_HZ = [1.0e9, 2.0e6]  # client 1 is the straggler
B, TAU, LR, MU = 4, 6, 0.1, 0.3


def deadline_scenario(scenario, name):
    return scenario(
        model={"kind": "logistic"},
        algorithm={
            "name": name,
            "cohort": {"clients_per_round": 2, "deadline_s": 1.0},  # replaced below
            "partial_work": {"kind": "deadline"},
            "local": {"steps": TAU, "batch_size": B, "lr": LR},
            **({"mu": MU} if name == "fedprox" else {}),
        },
        clients={"count": 2, "cpu_hz": {"kind": "per_client", "values": CPU_HZ}},
        radio={
            "mode": "direct",
            "uplink_snr_db": 10,
            "downlink_snr_db": 20,
            "uplink": {"bandwidth_hz": 1e6, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": 1e6, "sharing": "dedicated"},
        },
    )


def one_round(scenario, name, fits):
    """Round 1 under a deadline that leaves client 1 room for `fits` + 0.5 steps; the rest
    of the hand computation (link and step times from the scenario's numbers)."""
    from flnet.runner import build

    sc = deadline_scenario(scenario, name)
    world, learn = build(sc)
    x0 = learn.model.init_params()
    bits = x0.numel() * 32
    down_s = bits / shannon_rate_bps(1e6, float(snr_hz_direct(20.0, 1e6)))
    up_s = bits / shannon_rate_bps(1e6, float(snr_hz_direct(10.0, 1e6)))
    step_s = B * learn.flops_per_sample / (4.0 * CPU_HZ[1])  # flops_per_cycle 4 (default)
    deadline_s = down_s + up_s + (fits + 0.5) * step_s
    cfg = sc.algorithm.model_copy(
        update={"cohort": sc.algorithm.cohort.model_copy(update={"deadline_s": deadline_s})}
    )
    module = fedprox if name == "fedprox" else fedavg
    state = module.init(learn, cfg)
    (seen,) = run_protocol(world, 1, module.protocol(world, learn, cfg, state))
    return world, learn, x0, seen


def test_a_straggler_under_a_deadline_does_the_steps_that_fit_and_fedprox_keeps_them(scenario):
    world, learn, x0, seen = one_round(scenario, "fedprox", fits=3)
    assert learn.last_steps.tolist() == [TAU, 3]  # the fast client does its full work
    rows = world.ledger.frame()
    compute = rows[rows.kind == "compute"].set_index("node")
    flops_per_step = B * learn.flops_per_sample
    assert compute.flops[0] == pytest.approx(TAU * flops_per_step, rel=1e-12)
    assert compute.flops[1] == pytest.approx(3 * flops_per_step, rel=1e-12)  # charged 3 steps
    assert (rows.outcome == "ok").all()  # both delivered before the deadline
    # FedProx aggregates the partial update: the weighted mean of each client trained alone
    alone = [
        learn.local_train(
            np.array([k]),
            x0,
            deadline_scenario_local(),
            1,
            loss_fn=fedprox.proximal_loss(MU, x0),
            steps=np.array([s]),
        ).params[0]
        for k, s in ((0, TAU), (1, 3))
    ]
    expected = weighted_mean(torch.stack(alone), learn.num_samples[[0, 1]])
    assert_tensors_close(seen.model, expected)


def deadline_scenario_local():
    from flnet.config import LocalConfig

    return LocalConfig(steps=TAU, batch_size=B, lr=LR)


def test_fedavg_drops_the_straggler_at_the_deadline(scenario):
    world, learn, x0, seen = one_round(scenario, "fedavg", fits=3)
    assert learn.last_steps.tolist() == [TAU, TAU]  # FedAvg asks for the full work ...
    rows = world.ledger.frame()
    late = rows[rows.node == 1]
    assert late.outcome.iloc[-1] == "deadline"  # ... and cuts the straggler at the deadline
    alone = learn.local_train(np.array([0]), x0, deadline_scenario_local(), 1).params[0]
    assert_tensors_close(seen.model, alone)  # the model is client 0's alone


def test_steps_that_fit_by_hand():
    got = partial.steps_that_fit(
        10.0,
        np.array([1.0, 1.0, 1.0, 9.5]),
        np.array([1.0, 2.0, 1.0, 1.0]),
        np.array([0.5, 3.0, 0.01, 1.0]),
        np.array([20, 20, 20, 20]),
    )
    # (10-2)/0.5 = 16; (10-3)/3 = 2.33 -> 2; 8/0.01 = 800 -> capped at 20; none fits -> 1
    assert got.tolist() == [16, 2, 20, 1]


def test_stragglers_are_the_codes_random_share_with_random_epochs(scenario):
    """fraction 0.5 of a cohort of 4: round(4 * 0.5) = 2 active; the other 2 draw their
    epochs uniformly from [1, E] from (seed, PARTIAL_WORK, round, client)."""
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "fedprox",
            "cohort": {"clients_per_round": 4},
            "partial_work": {"kind": "stragglers", "fraction": 0.5},
            "local": {"steps": None, "epochs": 5, "batch_size": 8},
        },
        clients={"count": 8},
    )
    world, learn = build(sc)
    cohort = np.array([1, 3, 4, 6])
    full = learn.full_steps(cohort, sc.algorithm.local)
    plan = partial.plan(
        world, learn, sc.algorithm.partial_work, sc.algorithm.local, cohort, 7, 1, None
    )
    assert plan.straggles.sum() == 2
    for pos in range(4):
        if plan.straggles[pos]:
            epochs = int(generator(0, Stream.PARTIAL_WORK, 7, cohort[pos]).integers(1, 6))
            assert plan.steps[pos] == full[pos] // 5 * epochs
        else:
            assert plan.steps[pos] == full[pos]


def test_fedavg_trains_only_the_active_clients(scenario):
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "fedavg",
            "cohort": {"clients_per_round": 5},
            "partial_work": {"kind": "stragglers", "fraction": 0.6},
        }
    )
    world, learn = build(sc)
    run_protocol(
        world, 1, fedavg.protocol(world, learn, sc.algorithm, fedavg.init(learn, sc.algorithm))
    )
    trained = set(world.ledger.frame().query("kind == 'compute'").node)
    assert len(trained) == 2  # round(5 * 0.4)


def test_partial_work_under_a_deadline_needs_one():
    with pytest.raises(ScenarioError, match="cohort.deadline_s"):
        load_scenario(data={"algorithm": {"name": "fedprox", "partial_work": {"kind": "deadline"}}})
    with pytest.raises(ScenarioError, match="fraction"):
        load_scenario(
            data={
                "algorithm": {
                    "name": "fedprox",
                    "partial_work": {"kind": "stragglers", "fraction": 2},
                }
            }
        )


def test_fedavg_with_every_client_straggling_trains_nobody_and_keeps_its_model(scenario):
    from flnet.runner import build

    sc = scenario(
        algorithm={"name": "fedavg", "partial_work": {"kind": "stragglers", "fraction": 1}}
    )
    world, learn = build(sc)
    state = fedavg.init(learn, sc.algorithm)
    seen = run_protocol(world, 2, fedavg.protocol(world, learn, sc.algorithm, state))
    # a round with nobody to train costs nothing and lasts IDLE_RETRY_S (the server waits)
    assert len(world.ledger) == 0 and [p.sim_time_s for p in seen] == [60.0, 120.0]
    assert torch.equal(seen[-1].model, state.x)


def test_the_partial_work_scenario_runs_with_partial_steps(tmp_path):
    from flnet.runner import run

    res = run(
        "scenarios/partial_work.yaml",
        overrides=["run.rounds=4", "run.eval_every=1", f"output.dir={tmp_path}"],
    )
    steps = res.records.local_steps_mean.iloc[1:]
    assert (steps < 20).any() and (steps >= 1).all()  # some clients did only part of 20 steps
    assert res.records.test_accuracy.iloc[-1] > res.records.test_accuracy.iloc[0]
