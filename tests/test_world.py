"""The World against hand computation: round time, energy, shared uplink, deadline and
over-selection."""

import math

import numpy as np
import pandas as pd
import pytest

from flnet.runner import run

P = 64 * 64 + 64 + 64 * 10 + 10  # MLP 64-64-10 parameters
BITS = P * 32
# forward 2*(64*64 + 64*10); backward: the same for weight grads + 2*64*10 for the hidden grad
FLOPS_PER_SAMPLE = 2 * 2 * (64 * 64 + 64 * 10) + 2 * 64 * 10

UP_DB, DOWN_DB, CPU_HZ = [5.0, 15.0, 25.0], [20.0, 10.0, 30.0], [2.0e9, 0.5e9, 1.0e9]
TX_DBM, KAPPA, FPC, STEPS, BATCH = 20.0, 1e-28, 4.0, 3, 16
UP_HZ, DOWN_HZ = 1e6, 2e6


def three_clients(scenario, **over):
    sections = dict(
        clients={
            "count": 3,
            "cpu_hz": {"kind": "per_client", "values": CPU_HZ},
            "flops_per_cycle": FPC,
            "kappa": KAPPA,
        },
        radio={
            "mode": "direct",
            "tx_power_dbm": TX_DBM,
            "uplink_snr_db": {"kind": "per_client", "values": UP_DB},
            "downlink_snr_db": {"kind": "per_client", "values": DOWN_DB},
            "uplink": {"bandwidth_hz": UP_HZ, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": DOWN_HZ, "sharing": "dedicated"},
        },
        algorithm={
            "name": "fedavg",
            "cohort": {"clients_per_round": 3},
            "local": {"steps": STEPS, "batch_size": BATCH},
        },
        run={"rounds": 1},
    )
    for key, value in over.items():
        sections[key] = {**sections[key], **value}
    return scenario(**sections)


def hand_times():
    down = [BITS / (DOWN_HZ * math.log2(1 + 10 ** (db / 10))) for db in DOWN_DB]
    flops = STEPS * BATCH * FLOPS_PER_SAMPLE
    comp = [flops / FPC / f for f in CPU_HZ]
    up = [BITS / (UP_HZ * math.log2(1 + 10 ** (db / 10))) for db in UP_DB]
    return np.array(down), np.array(comp), np.array(up)


def test_round_time_is_slowest_download_compute_upload(scenario):
    res = run(three_clients(scenario), write=False)
    down, comp, up = hand_times()
    assert res.summary["training_flops_per_sample"] == FLOPS_PER_SAMPLE
    rec = res.records.set_index("round")
    assert rec.loc[1, "sim_time_s"] == pytest.approx((down + comp + up).max(), rel=1e-9)
    # every client's own pipeline, from the ledger
    led = res.ledger[res.ledger.kind != "evaluate"]
    for k in range(3):
        rows = led[led.node == k].set_index("kind")
        assert rows.loc["download", "end_s"] == pytest.approx(down[k])
        compute = rows.loc["compute"]
        assert compute.end_s - compute.start_s == pytest.approx(comp[k])
        assert rows.loc["upload", "end_s"] == pytest.approx(down[k] + comp[k] + up[k])
        assert rows.loc["upload", "bits"] == BITS


def test_energy_is_formula_and_equals_ledger_sum(scenario):
    res = run(three_clients(scenario), write=False)
    down, comp, up = hand_times()
    cycles = STEPS * BATCH * FLOPS_PER_SAMPLE / FPC
    e_comp = sum(KAPPA * cycles * f**2 for f in CPU_HZ)
    e_up = 10 ** ((TX_DBM - 30) / 10) * up.sum()
    last = res.records.iloc[-1]
    assert last.energy_compute_j == pytest.approx(e_comp)
    assert last.energy_uplink_j == pytest.approx(e_up)
    assert last.energy_j == pytest.approx(e_comp + e_up)
    assert res.ledger.energy_j.sum() == pytest.approx(last.energy_j)
    assert last.bits_up == 3 * BITS and last.bits_down == 3 * BITS


def test_shared_uplink_slows_concurrent_uploads_as_the_split_predicts(scenario):
    # identical clients: uploads start together and share the band in halves... thirds
    same = {"cpu_hz": 1e9}
    radio = {
        "uplink_snr_db": 10.0,
        "downlink_snr_db": 20.0,
        "uplink": {"bandwidth_hz": UP_HZ, "sharing": "shared"},
    }
    res = run(three_clients(scenario, clients=same, radio=radio), write=False)
    up = res.ledger[res.ledger.kind == "upload"]
    third = UP_HZ / 3 * math.log2(1 + 10.0 * 3)  # SNR over a third of the band is 3x
    assert (up.end_s - up.start_s).to_numpy() == pytest.approx(np.full(3, BITS / third))
    alone = BITS / (UP_HZ * math.log2(11.0))
    assert (up.end_s - up.start_s).min() > 2 * alone


def test_deadline_drops_the_late_client_and_charges_its_energy(scenario):
    down, comp, up = hand_times()
    total = down + comp + up
    order = np.argsort(total)
    deadline = (total[order[1]] + total[order[2]]) / 2  # between 2nd and slowest
    res = run(
        three_clients(
            scenario, algorithm={"cohort": {"clients_per_round": 3, "deadline_s": deadline}}
        ),
        write=False,
    )
    late = int(order[2])
    assert res.records.set_index("round").loc[1, "sim_time_s"] == pytest.approx(deadline)
    led = res.ledger[res.ledger.kind != "evaluate"]
    mine = led[led.node == late]
    assert "deadline" in set(mine.outcome)
    cut = mine[mine.outcome == "deadline"].iloc[0]
    assert cut.end_s == pytest.approx(deadline)
    assert cut.energy_j > 0  # charged for the work it did before the cut
    assert (led[led.node != late].outcome == "ok").all()
    assert res.ledger.energy_j.sum() == pytest.approx(res.records.energy_j.iloc[-1])


def test_over_selection_keeps_the_first_k_and_cancels_the_rest(scenario):
    down, comp, up = hand_times()
    res = run(
        three_clients(
            scenario, algorithm={"cohort": {"clients_per_round": 2, "over_selection": 1.5}}
        ),
        write=False,
    )
    total = down + comp + up
    second = np.sort(total)[1]
    assert res.records.set_index("round").loc[1, "sim_time_s"] == pytest.approx(second)
    slowest = int(np.argmax(total))
    outcomes = res.ledger[(res.ledger.node == slowest) & (res.ledger.kind != "evaluate")].outcome
    assert "cancelled" in set(outcomes)


def test_device_to_device_transfer_charges_each_device_on_its_own_row(scenario):
    """A client-to-client link is one more edge, timed by the same machinery; the sender pays
    its transmit power and carries the bits, the receiver pays its receive power."""
    from flnet.runner import Run
    from flnet.sim.channel import band as open_band
    from flnet.sim.ledger import Tag
    from flnet.sim.network import Link

    sim = Run(three_clients(scenario), write=False)
    world = sim.world
    band = open_band(world.env, 1e6, shared=True, users=3)
    snr_hz = 10 ** (10 / 10) * 1e6  # 10 dB over the band
    for a, b in ((0, 1), (1, 2)):
        world.network.add_link(
            a, b, Link(band, snr_hz, power_w=0.2 + 0.05, kind="d2d", rx_power_w=0.1)
        )
    start = world.now
    p1 = _process(world, world.start_transfer(0, 1, BITS, Tag("exchange", 1)))
    p2 = _process(world, world.start_transfer(1, 2, BITS, Tag("exchange", 1)))
    world.env.run(until=p1 & p2)
    half = 0.5e6 * math.log2(1 + 2 * 10)  # two transfers share the band
    assert world.now - start == pytest.approx(BITS / half)
    rows = world.ledger.frame()
    sent, got = rows[rows.kind == "d2d"], rows[rows.kind == "d2d_rx"]
    assert list(zip(sent.node, sent.peer)) == [(0, 1), (1, 2)]
    assert list(zip(got.node, got.peer)) == [(1, 0), (2, 1)]
    assert sent.energy_j.to_numpy() == pytest.approx(np.full(2, 0.25 * BITS / half))
    assert got.energy_j.to_numpy() == pytest.approx(np.full(2, 0.1 * BITS / half))
    assert list(sent.bits) == [BITS, BITS] and list(got.bits) == [0, 0]
    assert world.ledger.bits["d2d"] == 2 * BITS


def _process(world, job):
    """A SimPy process that waits for `job` (a transfer or compute under way) and ends with its
    outcome; an interrupt stops the job, charging it up to then, its cause the outcome."""
    import simpy

    def until_done():
        try:
            yield job.event
        except simpy.Interrupt as stop:
            job.stop(stop.cause)
        return job.outcome

    return world.env.process(until_done())


def _pipeline_processes(world, clients, flops, bits, deadline_s):
    """The round trip as one SimPy process per client over the World's jobs (`start_transfer`,
    `start_compute`), each waited for by a process and stopped by interrupts: what
    `round_trip`'s callbacks must match."""
    import simpy

    from flnet.sim.ledger import SERVER, Tag

    tag = Tag("round_trip", 1)

    def pipeline(c, f):
        step = _process(world, world.start_transfer(SERVER, c, bits, tag))
        outcome = yield from _forward(step)
        if outcome == "ok":
            outcome = yield from _forward(_process(world, world.start_compute(c, f, tag)))
        if outcome == "ok":
            yield from _forward(_process(world, world.start_transfer(c, SERVER, bits, tag)))

    def _forward(proc):
        """Wait for a primitive's process, passing an interrupt on to it."""
        try:
            return (yield proc)
        except simpy.Interrupt as stop:
            proc.interrupt(stop.cause)
            return (yield proc)

    procs = [world.env.process(pipeline(int(c), float(f))) for c, f in zip(clients, flops)]
    world.env.run(until=world.env.now + deadline_s)
    for proc in procs:
        if proc.is_alive:
            proc.interrupt("deadline")
    world.env.run()
    assert not any(isinstance(p.value, simpy.Interrupt) for p in procs)


@pytest.mark.parametrize("deadline", [0.005, 0.3, 0.52, 1.0, 2.02, 5.0])
def test_round_trip_charges_what_one_process_per_client_would(scenario, deadline):
    """Deadlines that stop clients in their download, compute or upload, on a shared uplink:
    downloads take 8-22 ms, computing 0.5, 0.5 and 2 s, uploads tens of ms."""
    from flnet.runner import Run
    from flnet.sim.patterns import Packet, round_trip

    sc = three_clients(scenario, radio={"uplink": {"bandwidth_hz": UP_HZ, "sharing": "shared"}})
    flops = np.array([4e9, 1e9, 8e9])
    ledgers = []
    for by_callbacks in (True, False):
        world = Run(sc, write=False).world
        if by_callbacks:
            done = world.env.process(
                round_trip(
                    world,
                    np.arange(3),
                    Packet(None, BITS),
                    flops,
                    Packet(None, BITS),
                    tag=1,
                    deadline_s=deadline,
                )
            )
            world.env.run(until=done)
        else:
            _pipeline_processes(world, np.arange(3), flops, BITS, deadline)
        led = world.ledger.frame()
        led = led[led.kind != "evaluate"].sort_values(["node", "kind"]).reset_index(drop=True)
        ledgers.append(led)
    assert set(ledgers[0].outcome) <= {"ok", "deadline"}
    pd.testing.assert_frame_equal(ledgers[0], ledgers[1], check_exact=False, rtol=1e-12)


def test_client_selection_is_each_rounds_own_draw_in_any_order(scenario):
    """Selections are drawn ahead in blocks; each must still be its round's own generator's
    draw, whatever order rounds and cohort sizes are asked in (a resumed run starts mid-block)."""
    from flnet.rng import Stream, generator
    from flnet.runner import Run

    world = Run(scenario(clients={"count": 30}), write=False).world
    for k, t in [(5, 40), (5, 3), (7, 3), (5, 41), (5, 3), (30, 2)]:
        expected = np.sort(generator(world.seed, Stream.SELECTION, t).choice(30, k, replace=False))
        got = world.sample_clients(k, t)
        assert np.array_equal(got, expected)
        got[:] = -1  # the caller owns its array: the next ask is unaffected
        assert np.array_equal(world.sample_clients(k, t), expected)


def test_a_cohorts_fates_drawn_at_once_are_each_members_own(scenario):
    """World.trip_fates runs the members' behaviour generators as one block: every member's
    fate (slowdown, dropout phase and share) is `fate`'s for it alone, keyed (round, client)."""
    from flnet.rng import Stream
    from flnet.runner import build
    from flnet.sim.ledger import Tag

    drawn, _ = build(
        three_clients(scenario, clients={"dropout_probability": 0.5, "slowdown_probability": 0.5})
    )
    cohort, works, seen = [2, 0, 1], [(BITS, 1e9, BITS), (2 * BITS, 3e9, BITS), (BITS, 1e8, 3)], []
    for t in range(1, 16):
        tag = Tag("round_trip", t)
        one_by_one = [drawn.fate(c, t, Stream.BEHAVIOUR, (t, c), w) for c, w in zip(cohort, works)]
        assert drawn.trip_fates(cohort, tag, works) == one_by_one
        seen += one_by_one
    assert {f.slowdown for f in seen} == {1.0, drawn.clients.slowdown_factor}
    assert {f.drop_phase for f in seen} == {0, 1, 2, 3}
    # sessions' ends (check during) asked for the cohort in one call: each member's own
    diurnal, _ = build(
        three_clients(
            scenario,
            clients={"dropout_probability": 0.5, "availability": {"kind": "diurnal"}},
        )
    )
    ends = set()
    for hour in range(0, 24, 5):
        diurnal.env = type(diurnal.env)(initial_time=hour * 3600.0)
        tag = Tag("round_trip", hour + 1)
        one_by_one = [
            diurnal.fate(c, hour + 1, Stream.BEHAVIOUR, (hour + 1, c), w)
            for c, w in zip(cohort, works)
        ]
        assert diurnal.trip_fates(cohort, tag, works) == one_by_one
        ends |= {f.cut_s > diurnal.env.now for f in one_by_one}
    assert ends == {True, False}  # online members with a session's end, and offline ones


def test_a_sure_fate_is_what_the_drawn_path_gives(scenario):
    """World.fate skips the draws when nothing can cut, slow or drop the work: the general
    path agrees for every client, and once dropouts are on the general path is taken."""
    from flnet.rng import Stream
    from flnet.runner import build
    from flnet.sim.world import SURE

    world, _ = build(three_clients(scenario))
    work = (BITS, 1e6, BITS)
    for c in range(3):
        assert world.fate(c, 1, Stream.BEHAVIOUR, (1, c), work) is SURE
        assert world._drawn_fate(c, 1, Stream.BEHAVIOUR, (1, c), work) == SURE
    dropping, _ = build(three_clients(scenario, clients={"dropout_probability": 0.999}))
    fates = [dropping.fate(c, 1, Stream.BEHAVIOUR, (1, c), work) for c in range(3)]
    assert all(f.drop_phase < 3 for f in fates)  # each drops (u < 0.999 for these keys)


def test_star_links_are_made_from_the_clients_rows(scenario):
    """Link is a NamedTuple now: the uplink and downlink carry the row's SNR and powers."""
    from flnet.runner import build
    from flnet.sim.ledger import SERVER

    world, _ = build(three_clients(scenario))
    up, down = world.link(1, SERVER), world.link(SERVER, 1)
    assert (up.kind, down.kind) == ("upload", "download")
    assert up.snr_hz == pytest.approx(10 ** (UP_DB[1] / 10) * UP_HZ)
    assert down.snr_hz == pytest.approx(10 ** (DOWN_DB[1] / 10) * DOWN_HZ)
    assert up.power_w == pytest.approx(10 ** (TX_DBM / 10) / 1000)
    assert up.channel is world.network.uplink and down.channel is world.network.downlink
