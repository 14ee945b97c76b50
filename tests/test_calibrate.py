"""Compute-speed calibration: the measured FLOPs are the trained model's, and the cpu_hz it
prints makes a simulated client's local work take the measured time (a fake clock here: the
tests never depend on how fast this machine is)."""

import pytest

from flnet.calibrate import measure, setting
from flnet.cli import main
from flnet.runner import run
from flnet.scenario import load_scenario

STEPS, BATCH = 3, 8


def fake_clock(*times):
    ticks = iter(times)
    return lambda: next(ticks)


@pytest.fixture
def small(scenario):
    def make(**over):
        return scenario(algorithm={"local": {"steps": STEPS, "batch_size": BATCH}}, **over)

    return make


def test_measure_counts_the_trained_models_flops_even_when_charged_as_another(small):
    plain = measure(small(), repeats=4, clock=fake_clock(10.0, 12.0))
    stand_in = measure(
        small(model={"kind": "mlp", "costs_as": "cnn_kmnist"}),
        repeats=4,
        clock=fake_clock(0.0, 2.0),
    )
    own = 2 * 2 * (64 * 64 + 64 * 10) + 2 * 64 * 10  # digits MLP 64-64-10, by hand
    assert plain.samples == 4 * STEPS * BATCH and plain.seconds == 2.0
    assert plain.flops == 4 * STEPS * BATCH * own
    assert stand_in.flops == plain.flops  # not the reference's 10.6 MFLOP a sample
    assert plain.flops_per_s == plain.flops / 2.0


def test_the_calibrated_cpu_hz_makes_simulated_compute_take_the_measured_time(small):
    scenario = small(clients={"flops_per_cycle": 4.0})
    m = measure(scenario, repeats=5, clock=fake_clock(0.0, 0.0075))  # 1.5 ms a local work
    over = setting(scenario, m)
    assert over == {"clients.cpu_hz": pytest.approx(m.flops_per_s / 4.0, rel=1e-15)}
    res = run(
        small(clients={"flops_per_cycle": 4.0, "cpu_hz": over["clients.cpu_hz"]}), write=False
    )
    compute = res.ledger[res.ledger.kind == "compute"]
    assert len(compute) and (compute.end_s - compute.start_s).to_numpy() == pytest.approx(0.0015)


def test_a_spread_of_flops_per_cycle_is_replaced_by_one_flop_a_cycle(small):
    scenario = small(clients={"flops_per_cycle": {"kind": "uniform", "low": 1, "high": 8}})
    m = measure(scenario, repeats=1, clock=fake_clock(0.0, 0.5))
    assert setting(scenario, m) == {
        "clients.flops_per_cycle": 1.0,
        "clients.cpu_hz": pytest.approx(m.flops / 0.5),
    }


def test_the_command_prints_a_setting_the_scenario_takes(tmp_path, capsys):
    code = main(["calibrate", "scenarios/quickstart.yaml", "--repeats", "1"])
    printed = capsys.readouterr().out
    assert code == 0 and "FLOP/s" in printed
    words = printed.split()
    sets = [words[i + 1] for i, w in enumerate(words) if w == "--set"]
    assert [s.split("=")[0] for s in sets] == ["clients.cpu_hz"]
    scenario = load_scenario("scenarios/quickstart.yaml", sets)
    assert scenario.clients.cpu_hz.value > 0
