"""Device classes (`clients.device_classes`): drawn with their shares into one int8 column,
overriding the device distributions they give, and the records' energy per class."""

import math

import numpy as np
import pytest

from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.sim.population import build, device_classes
from tests.test_availability import (
    BITS,
    CPU_HZ,
    FLOPS,
    FPC,
    KAPPA,
    RATE_BPS,
    RX_W,
    TX_W,
    one_round,
    world_of,
)

FAST_HZ = 2e9
CLASSES = [
    {"name": "phone", "share": 0.5},
    {"name": "tablet", "share": 0.5, "cpu_hz": FAST_HZ},
]


def test_energy_per_class_is_the_hand_computation_and_the_ledgers_sum(scenario):
    """One round of 6 clients: each member spends a download, its compute (kappa cycles f^2:
    4x for the tablets' doubled f) and an upload; each class's total is its members' count
    times that, and exactly math.fsum of its rows in the ledger."""
    world = world_of(scenario, 6, device_classes=CLASSES)
    column = world.population.device_class
    assert column.dtype == np.int8 and len(column) == 6
    assert world.devices.cpu_hz.tolist() == [(CPU_HZ, FAST_HZ)[k] for k in column]
    _, led = one_round(world, np.arange(6))
    link_j = RX_W * BITS / RATE_BPS + TX_W * BITS / RATE_BPS
    figures = world.class_energy.figures()
    assert set(figures) == {"energy_j_phone", "energy_j_tablet"}
    for k, (name, f_hz) in enumerate((("phone", CPU_HZ), ("tablet", FAST_HZ))):
        members = int((column == k).sum())
        by_hand = members * (link_j + KAPPA * FLOPS / FPC * f_hz**2)
        assert figures[f"energy_j_{name}"] == pytest.approx(by_hand, rel=1e-12)
        rows = led[np.isin(led.node, np.flatnonzero(column == k))]
        assert figures[f"energy_j_{name}"] == math.fsum(rows.energy_j)
    assert 0 < (column == 1).sum() < 6  # both classes are there to check


def test_shares_are_drawn_as_configured_and_other_columns_are_unchanged(scenario):
    """20,000 clients, shares 0.7 / 0.2 / 0.1: each class's count within 4 sigma of its
    share; one byte a client; columns no class overrides are the draw without classes."""
    n = 20_000
    shares = [0.7, 0.2, 0.1]
    classes = [{"name": f"c{k}", "share": s} for k, s in enumerate(shares)]
    classes[2]["kappa"] = 5e-28
    with_classes = scenario(clients={"count": n, "device_classes": classes})
    plain = scenario(clients={"count": n})
    column = device_classes(with_classes.clients, with_classes.seed)
    for k, share in enumerate(shares):
        sigma = math.sqrt(n * share * (1 - share))
        assert abs((column == k).sum() - n * share) < 4 * sigma
    pop, base = (build(s.clients, s.radio, s.seed) for s in (with_classes, plain))
    assert pop.nbytes - base.nbytes == n
    assert np.array_equal(pop.cpu_hz, base.cpu_hz)
    assert np.array_equal(pop.up_snr_hz, base.up_snr_hz)
    assert (pop.kappa[column == 2] == 5e-28).all()
    assert np.array_equal(pop.kappa[column != 2], base.kappa[column != 2])


def test_a_class_battery_capacity_replaces_the_default(scenario):
    classes = [
        {"name": "phone", "share": 0.5},
        {"name": "watch", "share": 0.5, "battery_capacity_j": 123.0},
    ]
    world = world_of(scenario, 40, device_classes=classes, battery={"capacity_j": 1e4})
    column = world.population.device_class
    capacity = [world.battery.cell(c).capacity_j for c in range(40)]
    assert capacity == [(1e4, 123.0)[k] for k in column]


def test_records_carry_energy_per_class_and_resume_identically(scenario, tmp_path):
    """Records' energy_j_<name> add up to the clients' energy; a resumed run's records are
    the uninterrupted run's, bit for bit (the totals are rebuilt from the journal)."""
    sections = dict(
        clients={"count": 8, "device_classes": CLASSES},
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 3}},
        model={"kind": "logistic"},
    )
    whole = run(scenario(**sections, run={"rounds": 4}, output={"dir": str(tmp_path / "a")}))
    part = dict(sections, output={"dir": str(tmp_path / "b")})
    run(scenario(**part, run={"rounds": 2, "checkpoint_every": 1}))
    resumed = run(scenario(**part, run={"rounds": 4, "checkpoint_every": 1}), resume=True)
    assert whole.records.equals(resumed.records)
    rec = whole.records.iloc[-1]
    clients_j = math.fsum(whole.ledger.energy_j[whole.ledger.node >= 0])
    assert rec.energy_j_phone + rec.energy_j_tablet == pytest.approx(clients_j, rel=1e-12)
    assert whole.summary["energy_j_tablet"] == rec.energy_j_tablet > 0


@pytest.mark.parametrize(
    "classes, words",
    [
        ([{"name": "a", "share": 0.5}, {"name": "b", "share": 0.4}], "share.*sum to 0.9"),
        ([{"name": "a", "share": 0.5}, {"name": "a", "share": 0.5}], "name.*unique"),
        ([{"name": "Phone-1", "share": 1.0}], "device_classes.*name"),
        ([{"name": "a", "share": 1.0, "battery_capacity_j": 5.0}], "needs clients.battery"),
        (
            [{"name": "a", "share": 1.0, "cpu_hz": {"kind": "per_client", "values": [1.0]}}],
            "per_client",
        ),
        ([], "device_classes"),
    ],
)
def test_bad_device_classes_are_refused_naming_the_field(scenario, classes, words):
    with pytest.raises(ScenarioError, match=words):
        scenario(clients={"count": 3, "device_classes": classes})


def test_a_class_cannot_set_device_columns_a_capacity_trace_replaces(scenario):
    trace = {"path": "speeds.csv", "compute_power_w": 1.0}
    fast = [{"name": "a", "share": 1.0, "kappa": 1e-27}]
    with pytest.raises(ScenarioError, match="device_classes.kappa.*capacity trace replaces"):
        scenario(clients={"count": 3, "device_classes": fast, "capacity_trace": trace})
