"""Batteries fed by the ledger (flnet.sim.battery): the charge after hand-built rows and a
charging window, opting out below the threshold until recharged, work stopped where the
battery runs empty, and identical charge after a resume."""

import math

import numpy as np
import pytest

from flnet.runner import run
from flnet.scenario import BatteryConfig
from flnet.sim.availability import Diurnal
from flnet.sim.battery import Battery
from flnet.sim.ledger import Tag
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

H = 3600.0


def battery(zone_h=0.0, **fields):
    cfg = BatteryConfig(**fields)
    return Battery(cfg, seed=0, zone_h=lambda c: zone_h)


def test_charge_after_rows_and_a_charging_window_is_the_hand_computation():
    """1000 J, 30 % at t = 0, threshold 20 % (resume at 30 %), idle 0.01 W, 0.03 W charging
    22:00-07:00. By hand, in J: 0-7 h charging +0.02 W: 300 + 504 = 804; 7-10 h idle -108:
    696; a 100 J row at 10 h: 596; 10-22 h idle -432: 164, below 200: opted out; 22-23 h
    +72: 236, still out (resume at 300); a 50 J row at 23 h: 186; 23-31 h +576: 762, back in;
    31-32 h -36: 726. In zone +2 h the window is 20:00-05:00 UTC instead."""
    b = battery(
        capacity_j=1000.0,
        initial_soc=0.3,
        threshold_soc=0.2,
        resume_margin_soc=0.1,
        idle_power_w=0.01,
        charging_power_w=0.03,
    )
    assert b.level(7, 10 * H).charge_j == pytest.approx(696.0)
    b.spend(7, 10 * H, 100.0, "ok")
    at_23 = b.level(7, 23 * H)
    assert at_23.charge_j == pytest.approx(236.0) and at_23.locked
    assert b.optouts_s == []  # idle drain opted it out, no row did
    b.spend(7, 23 * H, 50.0, "ok")
    assert b.level(7, 30 * H).locked is False
    end = b.level(7, 32 * H)
    assert end.charge_j == pytest.approx(726.0) and not end.locked
    assert len(b) == 1 and b.level(8, 0.0).charge_j == pytest.approx(300.0)  # others: drawn
    east = battery(2.0, capacity_j=1000.0, initial_soc=0.3, charging_power_w=0.03)
    # 0-5 h UTC charging (+0.03 W, no idle drain): 300 + 540 = 840; then flat until 20 h
    assert east.level(0, 19 * H).charge_j == pytest.approx(840.0)
    assert east.level(0, 21 * H).charge_j == pytest.approx(840.0 + 108.0)


def test_a_device_below_its_threshold_is_not_selected_until_it_recharges(scenario):
    """Client 0 at 500 J of 1000 spends 400 J at t = 0: 100 J, below 200 J, opted out.
    Charging at 1 W from 01:00 it reaches the resume level, 300 J, at 01:00 + 200 s."""
    cfg = {
        "capacity_j": 1000.0,
        "initial_soc": 0.5,
        "threshold_soc": 0.2,
        "charging_power_w": 1.0,
        "charging_start_hour": 1.0,
        "charging_end_hour": 2.0,
    }
    world = world_of(scenario, 3, battery=cfg)
    assert world.sample_clients(3, round=1).tolist() == [0, 1, 2]
    world.ledger.add(Tag("round_trip", 1), 0, -1, "upload", 0.0, 0.0, 400.0)
    assert world.battery.optouts_s == [0.0] and world.battery.limited == {0}
    for r, t_s, chosen in ((2, 0.0, [1, 2]), (3, H + 199.0, [1, 2]), (4, H + 201.0, [0, 1, 2])):
        world.env.run(until=t_s) if t_s > world.now else None
        assert world.sample_clients(3, round=r).tolist() == chosen, t_s


def test_an_upload_that_would_run_the_battery_empty_is_charged_up_to_its_end(scenario):
    """The battery holds the download's, the compute's and 40 % of the upload's joules: the
    upload stops (outcome battery) at 40 % of its time, charged up to there, and the battery
    is empty."""
    down_s = up_s = BITS / RATE_BPS
    compute_s = FLOPS / FPC / CPU_HZ
    compute_j = KAPPA * FLOPS / FPC * CPU_HZ**2
    have_j = RX_W * down_s + compute_j + 0.4 * TX_W * up_s
    cfg = {"capacity_j": have_j, "initial_soc": 1.0, "threshold_soc": 0.0, "charging_power_w": 0}
    world = world_of(scenario, 1, battery=cfg)
    done, led = one_round(world, np.array([0]))
    assert done.outcomes == ["battery"] and len(done.positions) == 0
    up = led.set_index("kind").loc["upload"]
    assert up.outcome == "battery"
    assert up.end_s == pytest.approx(down_s + compute_s + 0.4 * up_s)
    assert up.energy_j == pytest.approx(0.4 * TX_W * up_s)
    assert up.bits == pytest.approx(0.4 * BITS)
    assert world.battery.level(0, world.now).charge_j == pytest.approx(0.0, abs=1e-12)
    assert world.battery.empty_stops == 1 and world.battery.limited == {0}


BATTERY_RUN = dict(
    clients={
        "count": 40,
        "availability": {"kind": "diurnal", "session_mean_s": 600.0, "time_zones_h": [0, 8]},
        "battery": {
            "capacity_j": {"kind": "uniform", "low": 3e-5, "high": 2e-4},  # a few uploads
            "initial_soc": {"kind": "uniform", "low": 0.3, "high": 1.0},
            "threshold_soc": 0.3,
            "idle_power_w": 1e-6,
            "charging_power_w": 1e-3,
            "charging_start_hour": 6.0,  # rounds of milliseconds from 00:00: never charging
        },
    },
    algorithm={
        "name": "fedavg",
        "cohort": {"clients_per_round": 4, "deadline_s": 120.0},
        "local": {"steps": 2, "batch_size": 8},
    },
    model={"kind": "logistic"},
)


class Charges:
    """Observer: every stored battery level at the run's end."""

    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        return None

    def on_end(self, world, reason):
        self.levels = dict(world.battery._levels)


def test_charge_is_identical_after_resume(scenario, tmp_path):
    """The charge is a function of the ledger's rows, replayed from the journal on resume:
    every stored level, the records' battery columns and the ledger come out identical."""
    whole_obs, resumed_obs = Charges(), Charges()
    whole = run(
        scenario(**BATTERY_RUN, run={"rounds": 6}, output={"dir": str(tmp_path / "a")}),
        observers=(whole_obs,),
    )
    part = dict(BATTERY_RUN, output={"dir": str(tmp_path / "b")})
    run(scenario(**part, run={"rounds": 3, "checkpoint_every": 1}))
    resumed = run(
        scenario(**part, run={"rounds": 6, "checkpoint_every": 1}),
        resume=True,
        observers=(resumed_obs,),
    )
    assert whole_obs.levels == resumed_obs.levels and len(whole_obs.levels) > 0
    # the batteries' caches (drawn columns, zones, the availability's answers at an instant)
    # change no number: a fresh Battery fed the ledger's rows holds the same levels
    sc = scenario(**BATTERY_RUN)
    fresh = Battery(sc.clients.battery, sc.seed, Diurnal(sc.clients.availability, sc.seed).zone_h)
    for row in whole.ledger[whole.ledger.node >= 0].itertuples():
        fresh.spend(row.node, row.end_s, row.energy_j, row.outcome)
    assert fresh._levels == whole_obs.levels
    assert whole.records.equals(resumed.records)
    assert whole.ledger.equals(resumed.ledger)
    rec = whole.records.iloc[-1]
    assert rec.battery_limited_clients > 0 and 0 <= rec.soc_min <= rec.soc_mean <= 1
    assert math.isfinite(rec.soc_mean)


@pytest.mark.parametrize(
    "battery, words",
    [
        ({"capacity_j": -1.0}, "capacity_j"),
        ({"resume_margin_soc": 2.0}, "resume_margin_soc"),
        ({"charging_start_hour": 24.0}, "charging_start_hour"),
        ({"initial_soc": {"kind": "per_client", "values": [0.5]}}, "clients.battery.initial_soc"),
    ],
)
def test_bad_battery_is_refused_naming_the_field(scenario, battery, words):
    from flnet.errors import ScenarioError

    with pytest.raises(ScenarioError, match=words):
        scenario(clients={"count": 3, "battery": battery})


def test_nothing_is_stored_for_clients_that_have_not_taken_part(scenario):
    """100,000 registered clients with batteries, a selection asked about many of them and a
    round of 10: the batteries hold entries for those 10 only."""
    world = world_of(scenario, 100_000, battery={"capacity_j": 1e3})
    cohort = world.sample_clients(10, round=1)
    assert len(world.battery) == 0
    one_round(world, cohort)
    assert sorted(world.battery._levels) == cohort.tolist()


CHARGING_TRACE = """client,online_from_s,online_until_s,period_s,charging
0,0,3600,,1
0,7200,10800,,0
0,14400,18000,,1
1,0,7200,10000,1
"""


def test_charging_follows_the_traces_flag(scenario, tmp_path):
    """Charging at 0.05 W while the trace's charging flag is 1, idle drain 0.01 W always;
    2000 J, 15 % (300 J) at t = 0. By hand, in J: client 0 charges on [0, 1 h) and [4 h, 5 h)
    (its 2-3 h interval is online, not charging): at 20,000 s it has charged 7,200 s (+0.04 W,
    +288) and idled 12,800 s (-128): 460. Client 1 charges on [0, 7200) of every 10,000 s
    period: by 25,000 s it has charged 7200 + 7200 + 5000 s (+776) and idled 2 x 2800 s (-56):
    1020."""
    path = tmp_path / "trace.csv"
    path.write_text(CHARGING_TRACE)
    world = world_of(
        scenario,
        2,
        availability={"kind": "trace", "path": str(path), "mapping": "in_order"},
        battery={
            "capacity_j": 2000.0,
            "initial_soc": 0.15,
            "threshold_soc": 0.0,
            "idle_power_w": 0.01,
            "charging_power_w": 0.05,
            "charging": "trace",
        },
    )
    assert world.battery.level(0, 20_000.0).charge_j == pytest.approx(460.0)
    assert world.battery.level(1, 25_000.0).charge_j == pytest.approx(1020.0)
    world.ledger.add(Tag("round_trip", 1), 0, -1, "upload", 3600.0, 3600.0, 100.0)
    assert world.battery.level(0, 20_000.0).charge_j == pytest.approx(360.0)


def test_charging_from_a_trace_needs_a_trace_with_the_flag(scenario, tmp_path):
    from flnet.errors import ScenarioError
    from flnet.sim.traces import TraceError

    with pytest.raises(ScenarioError, match="clients.battery.charging"):
        scenario(clients={"availability": {"kind": "diurnal"}, "battery": {"charging": "trace"}})
    bare = tmp_path / "bare.csv"
    bare.write_text("client,online_from_s,online_until_s\n0,0,10\n")
    with pytest.raises(TraceError, match="no charging column") as e:
        world_of(
            scenario,
            1,
            availability={"kind": "trace", "path": str(bare)},
            battery={"charging": "trace"},
        )
    assert e.value.field == "clients.battery.charging"
    bad = tmp_path / "bad.csv"
    bad.write_text("client,online_from_s,online_until_s,charging\n0,0,10,yes\n")
    with pytest.raises(TraceError, match="line 2: charging must be 0 or 1"):
        world_of(scenario, 1, availability={"kind": "trace", "path": str(bad)})


@pytest.mark.parametrize("window_h", [(22.0, 7.0), (1.0, 2.5), (23.0, 0.5)])
def test_the_records_levels_for_all_clients_at_once_are_each_clients_level(window_h):
    """`levels_at` walks every client's timeline at once; it gives, bit for bit, what `level`
    gives one client at a time: random rows over three days, four zones, drain and charging
    crossing the threshold both ways."""
    start_h, end_h = window_h
    cfg = BatteryConfig(
        capacity_j={"kind": "uniform", "low": 500.0, "high": 2000.0},
        idle_power_w=0.002,
        charging_power_w=0.05,
        charging_start_hour=start_h,
        charging_end_hour=end_h,
    )
    b = Battery(cfg, seed=3, zone_h=lambda c: (-5.0, 1.0, 8.0, 5.5)[c % 4])
    rng = np.random.default_rng(0)
    times = np.sort(rng.uniform(0, 2 * 86_400.0, 400))
    for t_s, client in zip(times.tolist(), rng.integers(60, size=400).tolist()):
        b.spend(client, t_s, float(rng.exponential(100.0)), "ok")
    out = []
    for t_s in (times[-1], 2.5 * 86_400.0, 3 * 86_400.0 + 1234.5):
        charge, capacity, locked = b.levels_at(t_s)
        one = [b.level(c, t_s) for c in b._levels]
        assert charge.tolist() == [lv.charge_j for lv in one]
        assert locked.tolist() == [lv.locked for lv in one]
        assert capacity.tolist() == [b.cell(c).capacity_j for c in b._levels]
        out.append(int(locked.sum()))
    assert 0 < max(out) and min(out) < len(locked)


def test_a_results_unread_ledger_does_not_keep_the_world_alive(scenario):
    """The ledger feeds the batteries through the world while the run goes; a Result holds the
    ledger until its table is read, and the world (its columns, its batteries) is freed."""
    import gc
    import weakref

    class Held:
        def on_start(self, world):
            self.world = weakref.ref(world)

        def on_progress(self, world, progress, stopping):
            return None

        def on_end(self, world, reason):
            pass

    held = Held()
    res = run(scenario(**BATTERY_RUN, run={"rounds": 2}), write=False, observers=(held,))
    gc.collect()
    assert callable(res.ledger_table) and held.world() is None
    assert len(res.ledger) > 0
