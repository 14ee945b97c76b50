"""Trace replay (flnet.sim.traces) against a brute-force reading of the file, FedScale's traces
(flnet.fedscale) against FedScale's own rules, and the refusals: bad CSV lines, pickles that
hold anything but plain data."""

import math
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import yaml
from conftest import BASE

from flnet import fedscale
from flnet.cli import main
from flnet.errors import ScenarioError
from flnet.rng import Stream
from flnet.runner import run
from flnet.scenario import load_scenario, merge
from flnet.sim.traces import (
    TraceError,
    TraceMap,
    read_availability,
    read_capacity,
    trace_map,
)
from flnet.sim.world import World

# client 3: two touching intervals (one session), one later; client 8 at UTC+100 s; client 5
# never online; client 11: the whole period, always on
TRACE = """\
# a test trace
# period_s: 100
client,online_from_s,online_until_s,tz_offset_s
3,0,10,0
3,10,20,0
8,30,40,100
3,60,100,0
5,,,0
8,95,100,100
11,0,100,0
"""


def write(tmp_path, text, name="trace.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def on_by_hand(rows, tz, period, t):
    """Is a client with these [from, until) rows online at simulated time t (the rule, read
    literally from the file)?"""
    local = t + tz
    if math.isfinite(period):
        local %= period
    return any(a <= local < b for a, b in rows)


def until_by_hand(rows, tz, period, t, step=0.5):
    """When the session holding t ends, by walking forward in small steps (every interval
    bound of the test trace is a multiple of `step`)."""
    if not on_by_hand(rows, tz, period, t):
        return t
    s = math.floor(t / step) * step + step
    for _ in range(2000):
        if not on_by_hand(rows, tz, period, s):
            return s
        s += step
    return math.inf


BY_HAND = {
    3: ([(0, 10), (10, 20), (60, 100)], 0.0),
    5: ([], 0.0),
    8: ([(30, 40), (95, 100)], 100.0),
    11: ([(0, 100)], 0.0),
}


def test_replay_is_the_file_and_periodic_replay_wraps(tmp_path):
    trace = read_availability(write(tmp_path, TRACE))
    assert trace.ids.tolist() == [3, 5, 8, 11]
    assert trace.from_s.tolist() == [0, 60, 30, 95, 0]  # 3's touching rows merged
    replay_rows = np.arange(4)
    times = np.arange(0.0, 450.0, 1.3) + 0.1  # three periods and a half, off the bounds
    for t in times:
        on = trace.online(replay_rows, t)
        until = trace.online_until(replay_rows, t)
        for i, client in enumerate(trace.ids.tolist()):
            rows, tz = BY_HAND[client]
            assert on[i] == on_by_hand(rows, tz, 100.0, t), (client, t)
            assert until[i] == pytest.approx(until_by_hand(rows, tz, 100.0, t)), (client, t)
    # the session of client 3 that starts at 60 runs through the period's end into [0, 20)
    assert trace.online_until(np.array([0]), 170.0)[0] == pytest.approx(220.0)
    # exactly at a bound: [from, until) is half-open
    assert trace.online(np.array([0, 0]), 20.0).tolist() == [False, False]
    assert not trace.online(np.array([0]), 220.0)[0]
    assert trace.online(np.array([0]), 260.0)[0]


def test_a_trace_without_a_period_ends(tmp_path):
    trace = read_availability(write(tmp_path, "client,online_from_s,online_until_s\n1,5,7\n"))
    assert trace.online(np.zeros(4, dtype=int), 0).tolist() == [False] * 4
    assert trace.online(np.zeros(1, dtype=int), 6.0)[0]
    assert trace.online_until(np.zeros(1, dtype=int), 6.0)[0] == 7.0
    assert not trace.online(np.zeros(1, dtype=int), 107.0)[0]  # no repeats


def test_a_period_column_gives_each_client_its_own(tmp_path):
    text = "client,online_from_s,online_until_s,period_s\n1,0,5,10\n2,0,5,20\n"
    trace = read_availability(write(tmp_path, text))
    assert trace.online(np.array([0, 1]), 12.0).tolist() == [True, False]
    assert trace.online(np.array([0, 1]), 22.0).tolist() == [True, True]


def test_mapping_is_seeded_cyclic_and_stable(tmp_path):
    ids = np.array([3, 5, 8, 11, 20, 21, 40])
    m = len(ids)
    permuted = trace_map(ids, "permuted", seed=3, stream=Stream.TRACE_AVAILABILITY)
    assert sorted(permuted.order.tolist()) == list(range(m))
    again = trace_map(ids, "permuted", seed=3, stream=Stream.TRACE_AVAILABILITY)
    assert permuted.order.tolist() == again.order.tolist()  # a resumed run maps the same
    other = trace_map(ids, "permuted", seed=4, stream=Stream.TRACE_AVAILABILITY)
    assert other.order.tolist() != permuted.order.tolist()
    clients = np.arange(20)
    assert permuted(clients).tolist() == [permuted.order[k % m] for k in range(20)]
    assert trace_map(ids, "in_order", 0, Stream.TRACE_AVAILABILITY)(clients).tolist() == [
        k % m for k in range(20)
    ]
    by_id = trace_map(ids, "by_id", 0, Stream.TRACE_AVAILABILITY)
    assert by_id(np.array([3, 4, 40, 41, 0])).tolist() == [0, -1, 6, -1, -1]
    assert TraceMap(np.array([2, 0, 1]))(np.array([0, 4, 5])).tolist() == [2, 0, 1]
    for mapping in (permuted, by_id):  # one client at a time: the same rows
        asked = [3, 4, 40, 41, 0, 19, 7]
        assert [mapping.one(c) for c in asked] == mapping(np.array(asked)).tolist()


def test_by_id_clients_without_rows_are_never_online(tmp_path, scenario):
    s = scenario(
        clients={
            "count": 12,
            "availability": {
                "kind": "trace",
                "path": str(write(tmp_path, TRACE)),
                "mapping": "by_id",
            },
        }
    )
    world = World(s.clients, s.radio, s.seed)
    clients = np.arange(12)
    for t in (5.0, 35.0, 70.0):  # 3 online in [0, 20) and [60, 100); 8 in [30, 40) (its zone)
        on = set(clients[world.availability.online(clients, t, 0)].tolist())
        assert on == {c for c in (3, 8, 11) if on_by_hand(*BY_HAND[c], 100.0, t)} | {11}
    until = world.availability.online_until(np.array([0, 5, 11]), 70.0, 0)
    assert until.tolist() == [70.0, 70.0, math.inf]


def test_by_id_capacity_needs_every_client(tmp_path, scenario):
    path = write(
        tmp_path,
        "client,compute_s_per_sample,up_rate_bps,down_rate_bps\n0,1,1,1\n1,1,1,1\n3,1,1,1\n",
    )
    s = scenario(
        clients={
            "count": 3,
            "capacity_trace": {"path": str(path), "mapping": "by_id", "compute_power_w": 1.0},
        },
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 3}},
    )
    with pytest.raises(ScenarioError, match=r"clients.capacity_trace.mapping: .* no client 2"):
        World(s.clients, s.radio, s.seed, flops_per_sample=1.0)
    world = World(s.clients.model_copy(update={"count": 2}), s.radio, s.seed, flops_per_sample=1.0)
    assert world.speeds is not None and world.speeds.mapping(np.array([0, 1])).tolist() == [0, 1]


def test_the_world_puts_clients_online_when_the_trace_says(tmp_path, scenario):
    path = write(tmp_path, TRACE)
    s = scenario(
        clients={
            "count": 9,
            "availability": {"kind": "trace", "path": str(path), "mapping": "in_order"},
        }
    )
    world = World(s.clients, s.radio, s.seed)
    trace = read_availability(path)
    clients = np.arange(9)
    for t in (0.5, 25.0, 35.0, 70.0, 98.0):
        expect = trace.online(clients % 4, t)
        assert world.availability.online(clients, t, 0).tolist() == expect.tolist()
    world.env.run(until=70.0)  # selection asks at the World's now: client 3's [60, 100)
    chosen = world.sample_clients(9, round=1)
    assert set(chosen.tolist()) == {k for k in range(9) if k % 4 in (0, 3)}


# a session [0, 434.2) of local time at UTC+142.4 s: it ends at simulated 434.2 - 142.4, which
# online_until computes as 291.79999999999995; there, local time 291.79999999999995 + 142.4
# rounds to 434.19999999999993, 5.7e-14 s short of the end
SESSION_AT_ZONE = "client,online_from_s,online_until_s,tz_offset_s\n0,0,434.2,142.4\n"


def test_a_session_is_over_at_the_instant_it_was_computed_to_end(tmp_path):
    """[from, until) at both ends, across the two clocks: at the instant `online_until`
    gave, the client is offline (not online for the last 5.7e-14 s of rounding); an instant
    within the session is online, and the session's start is online."""
    trace = read_availability(write(tmp_path, SESSION_AT_ZONE))
    one = np.zeros(1, dtype=np.int64)
    end_s = float(trace.online_until(one, 0.0)[0])
    assert end_s == 291.79999999999995 and (end_s + 142.4) < 434.2  # the rounding
    assert not trace.online(one, end_s)[0] and trace.online_until(one, end_s)[0] == end_s
    assert trace.online(one, 291.7)[0] and trace.online_until(one, 291.7)[0] == pytest.approx(end_s)
    assert trace.online(one, -142.4)[0]  # local time 0: the session's first instant


@pytest.mark.filterwarnings("ignore::flnet.errors.UnitWarning")  # a slow device, on purpose
def test_a_round_starting_as_a_session_ends_starts_nobody_of_it(tmp_path):
    """Two clients replay that session (in_order over one trace client); round 1's member
    computes past the session's end and is interrupted there; round 2 starts at that instant,
    when the other client's session has ended too: nobody works (no zero-joule `interrupted`
    row), the round waits IDLE_RETRY_S."""
    from flnet.sim.patterns import IDLE_RETRY_S

    path = write(tmp_path, SESSION_AT_ZONE)
    sc = load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {"cohort": {"clients_per_round": 1}},
                "clients": {
                    "count": 2,
                    "cpu_hz": 1e6,  # 100 FLOP/s: local work cut by the session's end
                    "flops_per_cycle": 1e-4,
                    "availability": {"kind": "trace", "path": str(path), "mapping": "in_order"},
                },
                "run": {"rounds": 2},
            },
        )
    )
    res = run(sc, write=False)
    led = res.ledger[res.ledger.kind != "evaluate"]
    assert led["round"].tolist() == [1, 1]  # round 2: no row (it was a 0 J download)
    assert led.outcome.tolist() == ["ok", "interrupted"]  # download, then compute cut
    assert led.end_s.iloc[-1] == 291.79999999999995 and led.energy_j.iloc[-1] > 0
    assert res.records.sim_time_s.iloc[-1] == 291.79999999999995 + IDLE_RETRY_S


BAD = [
    ("client,online_from_s\n1,0\n", 1, "missing column(s) online_until_s"),
    ("client,online_from_s,online_until_s,colour\n", 1, "unknown column(s) colour"),
    ("client,online_from_s,online_until_s\n1,0,x\n", 2, "online_until_s is not a number"),
    ("client,online_from_s,online_until_s\n1,0,nan\n", 2, "must be finite"),
    ("client,online_from_s,online_until_s\none,0,1\n", 2, "client must be an integer"),
    ("client,online_from_s,online_until_s\n1,5,3\n", 2, "is not before online_until_s"),
    ("client,online_from_s,online_until_s\n1,-5,3\n", 2, "times must be >= 0"),
    ("client,online_from_s,online_until_s\n1,0,1,2\n", 2, "4 fields, the header has 3"),
    ("c\nclient,online_from_s,online_until_s\n", 1, "missing column(s)"),
    (
        "client,online_from_s,online_until_s\n1,0,10\n2,0,1\n\n1,5,20\n",
        5,
        "client 1's interval [5, 20) overlaps line 2's [0, 10)",
    ),
    (
        "client,online_from_s,online_until_s\n1,10,20\n1,0,5\n",
        3,
        "client 1's intervals are not in time order",
    ),
    ("# period_s: 50\nclient,online_from_s,online_until_s\n1,40,60\n", 3, "past the period"),
    (
        "client,online_from_s,online_until_s,tz_offset_s\n1,0,5,0\n1,6,7,3600\n",
        3,
        "one value per client",
    ),
]


@pytest.mark.parametrize("text,line,what", BAD, ids=[b[2][:30] for b in BAD])
def test_bad_csv_traces_are_refused_naming_file_and_line(tmp_path, text, line, what):
    path = write(tmp_path, text, "bad trace.csv")
    with pytest.raises(TraceError) as e:
        read_availability(path)
    assert f"{path}, line {line}: " in str(e.value)
    assert what in str(e.value)


def test_bad_files_are_refused_whole(tmp_path):
    with pytest.raises(TraceError, match="no header row"):
        read_availability(write(tmp_path, "# only a comment\n"))
    with pytest.raises(TraceError, match="no clients"):
        read_availability(write(tmp_path, "client,online_from_s,online_until_s\n"))
    with pytest.raises(TraceError, match="not found"):
        read_availability(tmp_path / "missing.csv")
    (tmp_path / "bin.csv").write_bytes(b"client,\xff\xfe\n")
    with pytest.raises(TraceError, match="not UTF-8"):
        read_availability(tmp_path / "bin.csv")
    with pytest.raises(TraceError, match=r"line 3: client 1 again \(first on line 2\)"):
        read_capacity(
            write(
                tmp_path,
                "client,compute_s_per_sample,up_rate_bps,down_rate_bps\n1,1,1,1\n1,1,1,1\n",
            )
        )


def test_a_scenario_with_a_bad_trace_names_the_field(tmp_path, scenario):
    path = write(tmp_path, "client,online_from_s,online_until_s\n1,5,3\n")
    s = scenario(clients={"availability": {"kind": "trace", "path": str(path)}})
    with pytest.raises(ScenarioError, match=r"^clients\.availability\.path: .*line 2"):
        World(s.clients, s.radio, s.seed)


# ------------------------------------------------------------------ FedScale


def fedscale_is_active(entry, t):
    """FedScale's rule (ClientMetadata.is_active), without its remembered index."""
    norm = t % entry["finish_time"]
    return any(a <= norm <= b for a, b in zip(entry["active"], entry["inactive"]))


AVAIL = {
    # ids as FedScale keys them; extra keys ignored
    1: {"active": [0, 50], "inactive": [20, 80], "finish_time": 100, "duration": 9, "model": "x"},
    2: {"active": [10, 30], "inactive": [40, 35], "finish_time": 60},  # nested: merged
    4: {"active": [], "inactive": [], "finish_time": 30},  # never online
    7: {"active": [5.5], "inactive": [500.0], "finish_time": 200.0},  # clipped to the period
}
CAPACITY = {
    1: {"computation": 20.0, "communication": 800.0},
    2: {"computation": 5.0, "communication": 50.0},
}


def test_fedscale_traces_convert_and_replay_the_same(tmp_path):
    pkl = tmp_path / "client_behave_trace"
    pkl.write_bytes(pickle.dumps(AVAIL))
    cap = tmp_path / "client_device_capacity"
    cap.write_bytes(pickle.dumps(CAPACITY))
    assert main(["traces", "fedscale", str(pkl), str(cap), "-o", str(tmp_path / "out")]) == 0
    trace = read_availability(tmp_path / "out" / "availability.csv")
    assert trace.ids.tolist() == [1, 2, 4, 7]
    rows = np.arange(4)
    for t in np.arange(0.0, 1000.0, 0.7) + 0.05:  # off every interval bound
        expect = [fedscale_is_active(AVAIL[c], t) for c in trace.ids.tolist()]
        assert trace.online(rows, t).tolist() == expect, t
    speeds = read_capacity(tmp_path / "out" / "capacity.csv")
    assert speeds.ids.tolist() == [1, 2]
    # FedScale: 3 x batch x steps x computation / 1000 s; (up + down kbit) / communication
    np.testing.assert_allclose(speeds.compute_s_per_sample, [3 * 20.0 / 1000, 3 * 5.0 / 1000])
    np.testing.assert_allclose(speeds.up_rate_bps, [800.0 * 1024, 50.0 * 1024])
    np.testing.assert_allclose(speeds.down_rate_bps, speeds.up_rate_bps)


def test_capacity_trace_times_and_charges_a_round(tmp_path, scenario):
    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps(CAPACITY))
    fedscale.convert(None, cap, tmp_path)
    power_w, tx_dbm, rx_w = 2.5, 20.0, 0.3
    s = scenario(
        clients={
            "count": 4,
            "capacity_trace": {
                "path": str(tmp_path / "capacity.csv"),
                "mapping": "in_order",
                "compute_power_w": power_w,
            },
        },
        radio={"mode": "direct", "tx_power_dbm": tx_dbm, "rx_power_w": rx_w},
        algorithm={
            "name": "fedavg",
            "cohort": {"clients_per_round": 4},
            "local": {"steps": 3, "batch_size": 8},
        },
        run={"rounds": 1},
    )
    res = run(s, write=False)
    ledger = res.ledger
    bits = float(ledger[ledger.kind == "upload"].bits.iloc[0])
    # FedScale's own figures for each simulated client k, which plays trace client k mod 2
    for k in range(4):
        fs = CAPACITY[[1, 2][k % 2]]
        mine = ledger[ledger.node == k].set_index("kind")
        took = mine.end_s - mine.start_s
        assert took["compute"] == pytest.approx(3 * 8 * 3 * fs["computation"] / 1000, rel=1e-12)
        fedscale_kbit = bits / 1024
        assert took["upload"] == pytest.approx(fedscale_kbit / fs["communication"], rel=1e-12)
        assert took["download"] == pytest.approx(fedscale_kbit / fs["communication"], rel=1e-12)
        assert mine.energy_j["compute"] == pytest.approx(power_w * took["compute"], rel=1e-12)
        tx_w = 10 ** (tx_dbm / 10) / 1000
        assert mine.energy_j["upload"] == pytest.approx(tx_w * took["upload"], rel=1e-12)
        assert mine.energy_j["download"] == pytest.approx(rx_w * took["download"], rel=1e-12)


def test_capacity_trace_and_fading_do_not_go_together(tmp_path, scenario):
    with pytest.raises(ScenarioError, match="radio.rayleigh_fading"):
        scenario(
            clients={"capacity_trace": {"path": "x.csv", "compute_power_w": 1.0}},
            radio={"rayleigh_fading": True},
        )


class Sneaky:
    def __reduce__(self):
        return (os.system, (f"touch {Sneaky.marker}",))


class Instance:
    pass


@pytest.mark.parametrize("kind", ["reduce", "instance", "numpy"])
def test_a_pickle_of_anything_but_plain_data_is_refused_and_nothing_runs(tmp_path, kind):
    marker = tmp_path / "ran"
    Sneaky.marker = marker
    payload = {
        "reduce": {1: {"active": [0], "inactive": [1], "finish_time": Sneaky()}},
        "instance": {1: Instance()},
        "numpy": {1: {"computation": np.float64(1.0), "communication": 1.0}},
    }[kind]
    pkl = tmp_path / "evil.pkl"
    pkl.write_bytes(pickle.dumps(payload))
    with pytest.raises(TraceError, match=rf"{pkl}: refused to load \w+\.\w+"):
        fedscale.read_plain_pickle(pkl)
    out = tmp_path / "out"
    assert main(["traces", "fedscale", str(pkl), "-o", str(out)]) == 2
    assert not marker.exists()  # os.system never ran
    assert not (out / "availability.csv").exists()


def test_plain_pickles_load_and_oversized_or_torn_ones_are_refused(tmp_path, monkeypatch):
    plain = {1: [1, 2.5, "a", None, True, (1, 2)], "k": {"n": -1}}
    pkl = tmp_path / "plain.pkl"
    pkl.write_bytes(pickle.dumps(plain))
    assert fedscale.read_plain_pickle(pkl) == plain
    pkl.write_bytes(pickle.dumps(plain)[:-3])
    with pytest.raises(TraceError, match="is not a readable pickle"):
        fedscale.read_plain_pickle(pkl)
    monkeypatch.setattr(fedscale, "MAX_PICKLE_BYTES", 8)
    with pytest.raises(TraceError, match="a trace pickle may be at most"):
        fedscale.read_plain_pickle(pkl)


def test_fedscale_layout_mistakes_name_the_client(tmp_path):
    pkl = tmp_path / "t.pkl"
    for data, what in (
        ({1: {"active": [0], "finish_time": 9}}, "client 1 has no 'inactive'"),
        ({1: {"active": [0], "inactive": ["x"], "finish_time": 9}}, r"inactive\[0\] holds 'x'"),
        ({1: {"active": [0], "inactive": [1], "finish_time": 0}}, "finish_time must be > 0"),
        ([1, 2], "expected a non-empty dict"),
        ({"a": {}}, "client key 'a' is not an integer id"),
    ):
        pkl.write_bytes(pickle.dumps(data))
        with pytest.raises(TraceError, match=what):
            fedscale.availability_intervals(pkl)


def test_the_converter_is_a_listed_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "traces" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["traces", "fedscale", "--help"])
    assert "CAPACITY.pkl" in capsys.readouterr().out


def test_shipped_trace_scenario_selects_only_online_clients():
    import flnet

    s = flnet.load_scenario("scenarios/trace_replay.yaml", ["run.rounds=6", "device=cpu"])
    res = run(s, write=False)
    world = World(s.clients, s.radio, s.seed, flops_per_sample=1.0)  # the same seeded mapping
    starts = res.ledger[res.ledger.kind == "download"]
    assert 0 < len(starts) <= 60  # up to 10 a round: those online at its start
    online = [
        world.availability.online(np.array([c]), t, 0)[0]
        for c, t in zip(starts.node.tolist(), starts.start_s.tolist())
    ]
    assert all(online)
    assert not world.availability.online(np.arange(50), 1.0, 0).all()  # not a trivial trace


# ------------------------------------------------------------------ with avail's checks

BITS, FLOPS, SNR_DB, BAND_HZ, CPU_HZ, FPC = 1e6, 8e9, 15.0, 1e6, 1e9, 4.0
RATE_BPS = BAND_HZ * math.log2(1 + 10 ** (SNR_DB / 10))


def traced_round(tmp_path, scenario, trace_text, check):
    from flnet.sim.patterns import Packet, round_trip

    path = write(tmp_path, trace_text)
    s = scenario(
        clients={
            "count": 1,
            "cpu_hz": CPU_HZ,
            "flops_per_cycle": FPC,
            "availability": {"kind": "trace", "path": str(path), "check": check},
        },
        radio={
            "mode": "direct",
            "uplink_snr_db": SNR_DB,
            "downlink_snr_db": SNR_DB,
            "uplink": {"bandwidth_hz": BAND_HZ, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": BAND_HZ, "sharing": "dedicated"},
        },
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 1}},
    )
    world = World(s.clients, s.radio, s.seed)
    cohort = world.sample_clients(1, 1)
    assert cohort.tolist() == [0]  # online at 0, so selected
    one = np.ones(1)
    proc = world.env.process(
        round_trip(world, cohort, Packet(None, BITS), FLOPS * one, Packet(None, BITS), tag=1)
    )
    world.env.run(until=proc)
    return proc.value, world.ledger.frame()


TOTAL_S = 2 * BITS / RATE_BPS + FLOPS / FPC / CPU_HZ  # about 2.4 s: down, compute, up
HEADER = "client,online_from_s,online_until_s\n"


def test_at_completion_with_a_trace_only_asks_at_the_end(tmp_path, scenario):
    """FedScale's rule on a trace: offline mid-work does not matter, offline at the end
    loses the upload (all its energy charged)."""
    back_in_time = HEADER + "0,0,1.5\n0,2.3,10\n"  # off during compute, on again at the end
    done, led = traced_round(tmp_path, scenario, back_in_time, "at_completion")
    assert done.outcomes == ["ok"] and led.outcome.tolist() == ["ok"] * 3
    assert done.end_s == pytest.approx(TOTAL_S)
    gone = HEADER + "0,0,1.5\n0,3,10\n"  # still off when the upload completes
    done, led = traced_round(tmp_path, scenario, gone, "at_completion")
    assert done.outcomes == ["lost"] and led.outcome.tolist() == ["ok", "ok", "lost"]
    assert led.end_s.iloc[2] == pytest.approx(TOTAL_S)  # ran to its end
    assert led.bits.iloc[2] == BITS


def test_during_with_a_trace_stops_work_when_the_trace_session_ends(tmp_path, scenario):
    done, led = traced_round(tmp_path, scenario, HEADER + "0,0,1.5\n0,2.3,10\n", "during")
    assert done.outcomes == ["interrupted"]
    rows = led.set_index("kind")
    assert rows.loc["compute", "outcome"] == "interrupted"
    assert rows.loc["compute", "end_s"] == pytest.approx(1.5)
    assert "upload" not in rows.index


STREAM_ON_TRACE = "algorithm={name: fedbuff, concurrency: 6, buffer_size: 2, local: {steps: 3}}"


@pytest.mark.parametrize("algorithm", [[], [STREAM_ON_TRACE]])
def test_a_traced_run_resumes_to_the_bit(tmp_path, algorithm):
    """(a stream too: its picks and sessions asked one client at a time, with the answers
    kept from one ask to the next, are the uninterrupted run's after a resume)"""
    import flnet

    over = ["device=cpu", "run.eval_every=1", "run.checkpoint_every=1", *algorithm]
    rounds = 8 if algorithm else 4
    whole = flnet.run(
        "scenarios/trace_replay.yaml",
        [*over, f"run.rounds={rounds}", f"output.dir={tmp_path / 'a'}"],
    )
    part = [*over, f"output.dir={tmp_path / 'b'}"]
    flnet.run("scenarios/trace_replay.yaml", [*part, f"run.rounds={rounds // 2}"])
    resumed = flnet.run("scenarios/trace_replay.yaml", [*part, f"run.rounds={rounds}"], resume=True)
    assert whole.records.equals(resumed.records)
    assert whole.ledger.equals(resumed.ledger)


def test_the_fastest_round_under_a_capacity_trace_is_the_traces(tmp_path, scenario):
    """The deadline check asks the World for the quickest round: with a capacity trace it is
    the trace's times, not the radio's or the CPU's."""
    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps(CAPACITY))
    fedscale.convert(None, cap, tmp_path)
    s = scenario(
        clients={
            "count": 3,
            "capacity_trace": {"path": str(tmp_path / "capacity.csv"), "compute_power_w": 1.0},
        },
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 3}},
    )
    world = World(s.clients, s.radio, s.seed, flops_per_sample=100.0)
    bits, samples = 1e6, 50
    by_hand = min(
        2 * bits / (1024 * c["communication"]) + samples * 3 * c["computation"] / 1000
        for c in CAPACITY.values()
    )
    assert world.fastest_round_trip_s(bits, samples * 100.0, bits) == pytest.approx(by_hand)


def test_a_clients_own_times_alone_are_the_traces(tmp_path, scenario):
    """What a client knows of its own speed (partial work plans its steps from it) comes from
    the capacity trace: every client's compute time is one of the trace's, by hand."""
    cap = tmp_path / "cap.pkl"
    cap.write_bytes(pickle.dumps(CAPACITY))
    fedscale.convert(None, cap, tmp_path)
    trace = {"path": str(tmp_path / "capacity.csv"), "compute_power_w": 1.0}
    s = scenario(
        clients={"count": 4, "capacity_trace": trace},
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 4}},
    )
    world = World(s.clients, s.radio, s.seed, flops_per_sample=100.0)
    samples = 50
    alone = world.alone_s(np.arange(4), 1e6, samples * 100.0, 1e6)
    by_hand = {samples * 3 * c["computation"] / 1000 for c in CAPACITY.values()}
    assert all(any(t == pytest.approx(h) for h in by_hand) for t in alone.compute_s)


def test_a_compute_power_in_milliwatts_is_warned_about(scenario):
    from flnet.errors import UnitWarning

    with pytest.warns(
        UnitWarning, match=r"compute_power_w = 1.5e3 W .*did you mean 1.5e3 mW \(1.5 W\)"
    ):
        scenario(clients={"capacity_trace": {"path": "x.csv", "compute_power_w": 1500}})


def test_rounds_with_nobody_online_let_the_clock_run_until_someone_is(tmp_path):
    """Nobody is online before 150 s: each empty round lasts IDLE_RETRY_S (60 s) instead of
    taking no time, so the run reaches the sessions instead of spending its rounds at t = 0."""
    from flnet.sim.patterns import IDLE_RETRY_S

    rows = "".join(f"{k},150,1e9\n" for k in range(10))
    path = write(tmp_path, "client,online_from_s,online_until_s\n" + rows)
    sc = merge(BASE, {"clients": {"availability": {"kind": "trace", "path": str(path)}}})
    over = [f"output.dir={tmp_path / 'out'}", "run.rounds=5", "run.eval_every=1"]
    res = run(load_scenario(data=sc, overrides=over))
    rec = res.records.set_index("round")
    assert rec.loc[1:3, "sim_time_s"].tolist() == [IDLE_RETRY_S, 2 * IDLE_RETRY_S, 3 * IDLE_RETRY_S]
    work = res.ledger[res.ledger.kind == "download"]
    assert len(work) and work.start_s.min() == 3 * IDLE_RETRY_S  # round 4 starts at 180 s
    assert set(work["round"]) == {4, 5}


def test_a_stream_whose_clients_never_come_online_again_fails_instead_of_hanging(tmp_path):
    """A FedBuff stream on a trace that ends at 10 s: after a week of simulated time with
    nobody online the run fails with a message naming clients.availability (a real process,
    bounded in wall time, so a hang would fail the test rather than stall the suite)."""
    rows = "".join(f"{k},0,10\n" for k in range(10))
    path = write(tmp_path, "client,online_from_s,online_until_s\n" + rows)
    sc = merge(
        BASE,
        {
            "algorithm": {"name": "fedbuff", "concurrency": 2, "buffer_size": 100},
            "clients": {"availability": {"kind": "trace", "path": str(path)}},
            "run": {"rounds": 1000},
            "output": {"dir": str(tmp_path / "out")},
        },
    )
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(sc))
    done = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "run", str(tmp_path / "s.yaml"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "no client came online for 7 simulated days" in done.stderr
    assert "clients.availability" in done.stderr


def random_trace(rng, clients, periodic):
    """A trace of `clients` clients with hostile corners: no session, the whole period,
    sessions touching the period's start and end, time zones either way."""
    rows = [
        "# period_s: 100" if periodic else "# no period",
        "client,online_from_s,online_until_s,tz_offset_s",
    ]
    for c in range(clients):
        tz = float(rng.choice([0.0, 37.5, -142.4, 99.9]))
        kind = int(rng.integers(5))
        if kind == 0:
            rows.append(f"{c},,,{tz}")
            continue
        if kind == 1:
            rows.append(f"{c},0,100,{tz}")
            continue
        cuts = np.sort(
            rng.choice(
                np.arange(1, 100) * 1.0 + rng.uniform(0, 0.7),
                2 * int(rng.integers(1, 5)),
                replace=False,
            )
        )
        if kind == 2:
            cuts[0], cuts[-1] = 0.0, 100.0  # a session that wraps into the next period
        for a, b in cuts.reshape(-1, 2):
            rows.append(f"{c},{float(a)!r},{float(b)!r},{tz}")
    return "\n".join(rows) + "\n"


@pytest.mark.parametrize("periodic", [True, False])
@pytest.mark.parametrize("mapping", ["permuted", "by_id"])
def test_a_few_clients_asked_one_at_a_time_get_the_arrays_answers(tmp_path, periodic, mapping):
    """`TraceReplay.online_until` for up to FEW_CLIENTS clients (plain floats, one client at
    a time) is bit for bit the array path's, at random instants and at the instants sessions
    were computed to end (where rounding decides), for clients without a trace client too."""
    from flnet.sim import traces

    rng = np.random.default_rng(5 + periodic)
    trace = read_availability(write(tmp_path, random_trace(rng, 30, periodic)))
    replay = traces.TraceReplay(trace, trace_map(trace.ids, mapping, 0, Stream.TRACE_AVAILABILITY))
    clients = np.arange(40)  # by_id: 30..39 have no trace client
    times = list(rng.uniform(-300, 700, 40)) + [0.0, 100.0, 142.4, 200.0 - 99.9]
    ends = replay.trace.online_until(np.arange(30), 13.0)
    times += [float(e) for e in ends if math.isfinite(e)]
    ask = clients[rng.permutation(40)[: traces.FEW_CLIENTS]]
    online = 0
    for t in times:
        one_by_one = replay.online_until(ask, t)
        for c in clients.tolist():  # each client alone, as a pick or a fate asks
            both = np.concatenate([replay.online_until(np.asarray([c]), t)] * 2)
            whole = replay.online_until(np.concatenate([clients, clients]), t)  # arrays
            assert both.tobytes() == whole[[c, c + 40]].tobytes()
            assert replay.online_until_one(c, t) == whole[c]  # a work's session end
        np.testing.assert_array_equal(
            one_by_one, replay.online_until(np.tile(ask, 2), t)[: len(ask)]
        )
        on = np.flatnonzero(one_by_one > t)  # a pick's first online candidate
        assert replay.first_online(ask.tolist(), t) == (on[0] if len(on) else -1)
        online += len(on)
    assert 0 < online < len(times) * len(ask)  # both answers occur


@pytest.mark.parametrize("periodic,kept", [(True, None), (False, None), (True, 7)])
def test_a_clients_state_kept_from_its_last_answer_is_the_arrays(
    tmp_path, periodic, kept, monkeypatch
):
    """A pick's online test reuses a client's last answer until its state could change
    (`_Columns.online`): walking the clock forward through every session's start and end
    (and an ulp either side, where rounding decides), each answer is the array path's; also
    where only a few clients' answers and intervals are kept (`KNOWN_KEPT`)."""
    from flnet.sim import traces

    if kept is not None:
        monkeypatch.setattr(traces, "KNOWN_KEPT", kept)

    rng = np.random.default_rng(11 + periodic)
    trace = read_availability(write(tmp_path, random_trace(rng, 30, periodic)))
    replay = traces.TraceReplay(
        trace, trace_map(trace.ids, "in_order", 0, Stream.TRACE_AVAILABILITY)
    )
    edges = np.concatenate([trace.from_s, trace.until_s])
    instants = [
        e - tz + shift
        for e in edges.tolist()
        for tz in (0.0, 37.5, -142.4, 99.9)
        for shift in (0.0, 100.0, 200.0)
    ]
    instants += list(rng.uniform(-300, 700, 200))
    instants = sorted(
        {x for t in instants for x in (np.nextafter(t, -np.inf), t, np.nextafter(t, np.inf))}
    )
    clients = list(range(30))
    kept_at_most, kept = kept, 0
    for t in instants:
        truth = replay.trace.online_until(np.arange(30), t) > t  # arrays, nothing kept
        for c in clients:
            kept += replay._columns is not None and c in replay._columns.known
            assert (replay.first_online([c], t) == 0) == truth[c], (c, t)
    if kept_at_most is None:
        assert kept > len(instants) * 20  # the kept answers were asked
    else:  # memory for a few clients at a time: answers, intervals
        assert len(replay._columns.known) <= kept_at_most >= len(replay._columns.rows)
