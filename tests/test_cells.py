"""Cells: attachment, frequency reuse, and co-channel interference turning SNR into SINR as
transfers start and end (flnet.sim.cells, flnet.sim.interference), checked by hand."""

import math

import numpy as np
import pytest
import simpy

import flnet
from flnet.errors import ScenarioError
from flnet.scenario import load_scenario
from flnet.sim import at_once
from flnet.sim import cells as cells_mod
from flnet.sim.channel import SharedBandArrays
from flnet.sim.interference import CellBand
from flnet.sim.radio import dbm_to_w

N0_W_HZ = float(dbm_to_w(-174.0))
W_HZ = 1e6
P_W = 0.01
# client 0 near station 0, client 1 near station 1; each hears the other's cell at 1/100
GAIN = np.array([[1e-10, 1e-12], [1e-12, 1e-10]])


def _layout(groups=(0, 0), interference=True, band_hz=W_HZ):
    group = np.asarray(groups)
    coupled = (group[:, None] == group[None, :]) & ~np.eye(len(group), dtype=bool)
    if not interference:
        coupled[:] = False
    return cells_mod.CellLayout(
        np.zeros((len(group), 2)), np.ones(len(group)), group, band_hz, band_hz, N0_W_HZ, coupled
    )


def _run_band(band_of, bits, snr_hz, clients, starts=None):
    """Transfers on a band under SimPy: each one's end, by transfer."""
    env = simpy.Environment()
    band = band_of(env)
    ends = {}

    def send(i):
        yield env.timeout(0.0 if starts is None else starts[i])
        tx = band.transmit(bits[i], snr_hz[i], clients[i])
        yield tx.done
        ends[i] = env.now

    for i in range(len(bits)):
        env.process(send(i))
    env.run()
    return [ends[i] for i in range(len(bits))]


def _cell_band(layout, gain=GAIN, split=True, band_hz=W_HZ, attached=(0, 1)):
    attached = np.asarray(attached)
    radiated = np.full(len(attached), P_W)
    rows = cells_mod.FixedCells(attached, gain)
    return lambda env: CellBand(env, band_hz, layout, rows, radiated, split, True)


def _shannon(band_hz, sinr):
    return band_hz * math.log2(1.0 + sinr)


def test_two_co_channel_transfers_by_hand():
    """Two cells on one group, one uplink each, both from t = 0: while both are on the air each
    sees the other's power at its station, SINR = P g / (N0 W + P g'); when the shorter ends,
    the other's rate rises to its SNR's and its finish follows from the bits it has left."""
    sinr_0 = P_W * 1e-10 / (N0_W_HZ * W_HZ + P_W * 1e-12)
    sinr_1 = sinr_0  # symmetric gains
    snr_1 = P_W * 1e-10 / (N0_W_HZ * W_HZ)
    bits = [1e6, 3e6]
    r0, r1 = _shannon(W_HZ, sinr_0), _shannon(W_HZ, sinr_1)
    t0 = bits[0] / r0
    t1 = t0 + (bits[1] - r1 * t0) / _shannon(W_HZ, snr_1)
    # the static SINR of the two on the air
    got = cells_mod.sinr(_layout(), np.array([0, 1]), np.full(2, P_W), GAIN, np.full(2, W_HZ))
    assert got == pytest.approx([sinr_0, sinr_1], rel=1e-12)
    snr_hz = [P_W * 1e-10 / N0_W_HZ] * 2  # P g / N0 of each on its own station
    ends = _run_band(_cell_band(_layout()), bits, snr_hz, [0, 1])
    assert ends == pytest.approx([t0, t1], rel=1e-12)
    # without the interference each would have finished at bits / (SNR's rate)
    assert ends[1] > bits[1] / _shannon(W_HZ, snr_1)


def test_a_late_interferer_slows_a_transfer_under_way():
    """Client 1 starts at t = 0.01 s: client 0 runs at its SNR's rate until then, at its
    SINR's until client 1 ends, alone again after."""
    bits, start = [4e6, 1e6], 0.01
    snr = P_W * 1e-10 / (N0_W_HZ * W_HZ)
    sinr = P_W * 1e-10 / (N0_W_HZ * W_HZ + P_W * 1e-12)
    alone, shared = _shannon(W_HZ, snr), _shannon(W_HZ, sinr)
    t1 = start + bits[1] / shared
    t0 = t1 + (bits[0] - alone * start - shared * (t1 - start)) / alone
    snr_hz = [P_W * 1e-10 / N0_W_HZ] * 2
    ends = _run_band(_cell_band(_layout()), bits, snr_hz, [0, 1], starts=[0.0, start])
    assert ends == pytest.approx([t0, t1], rel=1e-12)


def test_cells_on_different_channel_groups_do_not_interfere():
    """Reuse factor 2: the cells are on separate groups, each finishes as if alone."""
    bits, snr_hz = [1e6, 3e6], [P_W * 1e-10 / N0_W_HZ] * 2
    ends = _run_band(_cell_band(_layout(groups=(0, 1))), bits, snr_hz, [0, 1])
    alone = _shannon(W_HZ, P_W * 1e-10 / (N0_W_HZ * W_HZ))
    assert ends == pytest.approx([b / alone for b in bits], rel=1e-12)
    # the same with interference switched off on one group
    ends = _run_band(_cell_band(_layout(interference=False)), bits, snr_hz, [0, 1])
    assert ends == pytest.approx([b / alone for b in bits], rel=1e-12)


def test_a_cell_shares_its_own_band_only():
    """Two transfers in cell 0 split its band; one in cell 1 (another group) has all of its."""
    gain = np.array([[1e-10, 0.0], [1e-10, 0.0], [0.0, 1e-10]])
    band = _cell_band(_layout(groups=(0, 1)), gain=gain, attached=(0, 0, 1))
    snr_hz = [P_W * 1e-10 / N0_W_HZ] * 3
    ends = _run_band(band, [1e6, 1e6, 1e6], snr_hz, [0, 1, 2])
    half = _shannon(W_HZ / 2, P_W * 1e-10 / (N0_W_HZ * W_HZ / 2))
    whole = _shannon(W_HZ, P_W * 1e-10 / (N0_W_HZ * W_HZ))
    assert ends == pytest.approx([1e6 / half, 1e6 / half, 1e6 / whole], rel=1e-12)


def test_one_cell_is_the_plain_shared_band_to_the_bit():
    rng = np.random.default_rng(3)
    n = 12
    bits, snr_hz = rng.uniform(1e5, 1e6, n).tolist(), rng.uniform(1e7, 1e9, n).tolist()
    starts = np.sort(rng.uniform(0, 0.05, n)).tolist()
    one = _layout(groups=(0,))
    cell = _cell_band(one, gain=np.full((n, 1), 1e-10), attached=[0] * n)
    plain = _run_band(lambda env: SharedBandArrays(env, W_HZ), bits, snr_hz, [-1] * n, starts)
    assert _run_band(cell, bits, snr_hz, list(range(n)), starts) == plain


def test_the_band_replays_its_events_to_the_bit():
    """`schedule_alone` with the transfers' clients takes the band's own steps."""
    rng = np.random.default_rng(5)
    n, b = 9, 3
    gain = rng.uniform(1e-12, 1e-10, (n, b))
    attached = rng.integers(0, b, n)
    layout = _layout(groups=(0, 0, 0))
    make = _cell_band(layout, gain=gain, attached=attached)
    bits, snr_hz = rng.uniform(1e5, 1e6, n).tolist(), rng.uniform(1e7, 1e9, n).tolist()
    starts = np.sort(rng.uniform(0, 0.05, n)).tolist()
    ends = _run_band(make, bits, snr_hz, list(range(n)), starts)
    schedule = make(simpy.Environment()).schedule_alone(
        starts, bits, snr_hz, clients=list(range(n))
    )
    assert schedule is not None
    assert dict(zip(schedule.done.tolist(), schedule.end_s.tolist())) == dict(enumerate(ends))


def test_a_frozen_cell_band_thaws_to_the_same_finishes():
    """A checkpoint mid-transfer keeps each transfer's client: thawed, the band re-times them
    with the same interference, to the bit."""
    bits, snr_hz = [1e6, 3e6], [P_W * 1e-10 / N0_W_HZ] * 2
    make = _cell_band(_layout())
    straight = _run_band(make, bits, snr_hz, [0, 1])
    env = simpy.Environment()
    band = make(env)
    for i in range(2):
        band.transmit(bits[i], snr_hz[i], i)
    env.run(until=straight[0] / 2)
    frozen = band.freeze_band()
    env2 = simpy.Environment(initial_time=env.now)
    ends = {}
    for k, tx in enumerate(make(env2).thaw_band(frozen)):
        tx.done.callbacks.append(lambda _e, k=k: ends.__setitem__(k, env2.now))
    env2.run()
    assert [ends[0], ends[1]] == straight


def test_attachment_nearest_and_strongest():
    """Station 1 is farther from the client (200 m against 100 m: 37.6 log10 2 = 11.3 dB more
    path loss) but 20 dB stronger: nearest picks 0, strongest 1; equal powers, both pick 0."""
    x, y = np.array([100.0]), np.array([0.0])

    def chosen(powers_dbm):
        sc = load_scenario(
            "scenarios/quickstart.yaml",
            [
                "clients.count=1",
                "algorithm.cohort.clients_per_round=1",
                "radio.shadowing_std_db=0",
                "clients.positions={kind: given, xy_m: [[100, 0]]}",
                f"radio.cells={{stations_xy_m: [[0, 0], [300, 0]], "
                f"station_tx_power_dbm: {powers_dbm}}}",
            ],
        )
        layout = cells_mod.layout(sc.radio)
        gain = cells_mod.gains(sc.radio, layout, x, y, np.zeros((1, 2)), np.array([0]))
        pl_db = -10 * np.log10(gain[0])
        assert pl_db == pytest.approx(128.1 + 37.6 * np.log10([0.1, 0.2]), rel=1e-12)
        return [int(cells_mod.attach(r, gain, layout, x, y)[0]) for r in ("nearest", "strongest")]

    assert chosen([20, 40]) == [0, 1]
    assert chosen([30, 30]) == [0, 0]


CELLS = [
    "run.rounds=3",
    "clients.count=24",
    "algorithm.cohort.clients_per_round=12",
    "clients.positions={kind: uniform, side_m: 1000}",
    "radio.cells={stations_xy_m: [[250, 250], [750, 250], [250, 750], [750, 750]]}",
]


def _both_ways(monkeypatch, overrides):
    fast = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    monkeypatch.setattr(at_once.AtOnce, "plan", lambda self, trips: None)
    slow = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    return fast, slow


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["radio.downlink.sharing=shared", "algorithm.cohort.deadline_s=0.02"],
        [
            "radio.rayleigh_fading=true",
            "clients.dropout_probability=0.3",
            "clients.slowdown_probability=0.3",
            "algorithm.cohort.over_selection=1.5",
        ],
    ],
    ids=["default", "shared-down-deadline", "fading-fates-overselection"],
)
def test_a_round_with_cells_at_once_equals_event_by_event(monkeypatch, extra):
    fast, slow = _both_ways(monkeypatch, [*CELLS, *extra])
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


def test_reuse_separating_the_cells_removes_interference_in_a_run():
    """With one transfer per cell at a time nothing interferes under reuse 4; with reuse 1
    the uploads are slower than their SNR alone gives, and switching interference off gives
    the no-interference times on the full band."""
    base = [*CELLS, "algorithm.cohort.clients_per_round=4", "radio.shadowing_std_db=0"]
    uploads = {}
    for name, extra in (
        ("reuse1", []),
        ("off", ["radio.cells.interference=false"]),
        ("reuse4", ["radio.cells.reuse_factor=4"]),
    ):
        run = flnet.run("scenarios/quickstart.yaml", [*base, *extra], write=False)
        up = run.ledger[run.ledger.kind == "upload"]
        uploads[name] = (up.end_s - up.start_s).to_numpy()
    assert (uploads["reuse1"] >= uploads["off"]).all()
    assert (uploads["reuse1"] > uploads["off"]).any()
    # reuse 4 has a quarter of the band for each cell: slower than the full band alone
    assert (uploads["reuse4"] > uploads["off"]).all()


def test_cells_errors_name_their_fields():
    cells = "radio.cells={stations_xy_m: [[0, 0], [10, 0]]"
    pos = "clients.positions={kind: uniform, side_m: 100}"
    for overrides, field in (
        ([cells + ", channel_groups: [0, 1]}", pos], "radio.cells.channel_groups"),
        ([cells + ", station_tx_power_dbm: [30]}", pos], "radio.cells.station_tx_power_dbm"),
        ([cells + "}"], "radio.cells"),
        ([cells + ", reuse_factor: 0}", pos], "radio.cells.reuse_factor"),
    ):
        with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
            load_scenario("scenarios/quickstart.yaml", overrides)


def test_two_d2d_transmissions_with_spatial_reuse_by_hand():
    """0 -> 1 and 2 -> 3 on one band at once, each receiver 10 m from its sender and 90 m from
    the other's: while both are on the air SINR = P g(10) / (N0' B + P g(90)), g the
    log-distance gain (no shadowing on the interference path); the longer one then finishes
    alone at its SNR's rate."""
    from flnet.schema import LogDistance
    from flnet.sim.interference import D2DReuseBand, median_gain_d2d

    model = LogDistance(shadowing_std_db=0.0)
    x, y = np.array([0.0, 10.0, 100.0, 90.0]), np.zeros(4)
    power = np.full(4, 0.1)
    b_hz = 1e6
    n0 = 10 ** ((-174.0 + 9.0 - 30.0) / 10.0)
    free_space_db = 20 * math.log10(4 * math.pi * 2.4e9 / 299_792_458.0)
    g10, g90 = (10 ** (-(free_space_db + 30 * math.log10(d)) / 10) for d in (10.0, 90.0))
    assert median_gain_d2d(model, np.array([10.0, 90.0])) == pytest.approx([g10, g90], rel=1e-12)
    snr_hz = 0.1 * g10 / n0
    sinr = 0.1 * g10 / (n0 * b_hz + 0.1 * g90)
    bits = [2e6, 5e6]
    both = _shannon(b_hz, sinr)
    t0 = bits[0] / both
    t1 = t0 + (bits[1] - both * t0) / _shannon(b_hz, snr_hz / b_hz)

    env = simpy.Environment()
    band = D2DReuseBand(env, b_hz, x, y, power, model)
    txs = [band.transmit(bits[0], snr_hz, 0, 1), band.transmit(bits[1], snr_hz, 2, 3)]
    ends = {}
    for k, tx in enumerate(txs):
        tx.done.callbacks.append(lambda _e, k=k: ends.__setitem__(k, env.now))
    env.run()
    assert [ends[0], ends[1]] == pytest.approx([t0, t1], rel=1e-12)


def test_gossip_with_spatial_reuse_is_slower_than_orthogonal_links():
    """The shipped gossip radio, broadcast on one band: with spatial reuse every transmission
    has the whole band as on dedicated links, but the others interfere, so none is quicker
    and some are slower."""
    base = ["run.rounds=2", "radio.d2d.half_duplex=false"]
    runs = {
        s: flnet.run("scenarios/gossip_radio.yaml", [*base, f"radio.d2d.sharing={s}"], write=False)
        for s in ("dedicated", "spatial_reuse")
    }
    air = {}
    for s, run in runs.items():
        tx = run.ledger[run.ledger.kind == "d2d"]
        air[s] = (tx.end_s - tx.start_s).to_numpy()
    assert len(air["dedicated"]) == len(air["spatial_reuse"]) > 0
    assert (air["spatial_reuse"] >= air["dedicated"] * (1 - 1e-12)).all()
    assert (air["spatial_reuse"] > air["dedicated"]).any()


def test_spatial_reuse_needs_path_loss():
    with pytest.raises(ScenarioError, match=r"radio\.d2d\.sharing"):
        load_scenario(
            "scenarios/gossip_radio.yaml",
            ["radio.d2d.sharing=spatial_reuse", "radio.d2d.path_loss=null"],
        )


def test_a_random_waypoint_walk_by_hand():
    """One client from (0, 0) at 1 m/s toward its first waypoint (its leg 0: stream MOBILITY
    keyed by (client, leg)): after 10 s it is 10 m along the line to it; a client that reaches
    its waypoint pauses there, then walks on to the next (its leg 1)."""
    from flnet.rng import Stream, generator
    from flnet.schema import RandomWaypoint
    from flnet.sim.mobility import Waypoints

    def leg(seed, client, j, side_m):
        u = generator(seed, Stream.MOBILITY, client, j).random(3)
        return side_m * u[:2]

    model = RandomWaypoint(min_speed_m_s=1.0, max_speed_m_s=1.0, epoch_s=10.0)
    walk = Waypoints(model, 1000.0, seed=4)
    target = leg(4, 3, 0, 1000.0)  # client 3's first waypoint
    assert np.hypot(*target) > 10.0
    xy = walk.at(np.array([3]), 10.0, np.zeros((1, 2)))[0]
    assert xy.tolist() == pytest.approx(list(10.0 * target / np.hypot(*target)), rel=1e-12)

    # seed 7, client 0, 20 m/s, 2 s pauses: the first waypoint, the pause, then the rest of
    # the 10 s toward the second
    fast = RandomWaypoint(min_speed_m_s=20.0, max_speed_m_s=20.0, pause_s=2.0, epoch_s=10.0)
    walk = Waypoints(fast, 100.0, seed=7)
    first, second = leg(7, 0, 0, 100.0), leg(7, 0, 1, 100.0)
    walked_m = 20.0 * (10.0 - np.hypot(*first) / 20.0 - 2.0)
    assert 0 < walked_m < np.hypot(*(second - first))
    way = (second - first) / np.hypot(*(second - first))
    xy = walk.at(np.array([0]), 10.0, np.zeros((1, 2)))[0]
    assert xy.tolist() == pytest.approx(list(first + walked_m * way), rel=1e-12)
    # at the waypoint during the pause
    at_first = walk.at(np.array([0]), np.hypot(*first) / 20.0 + 1.0, np.zeros((1, 2)))[0]
    assert at_first.tolist() == first.tolist()


MOVING = [
    "clients.count=40",
    "clients.positions={kind: uniform, side_m: 1000}",
    "radio.cells={stations_xy_m: [[250, 500], [750, 500]], mobility: "
    "{min_speed_m_s: 20, max_speed_m_s: 30, epoch_s: 5}}",
]


def test_moving_clients_change_cells_between_epochs():
    """Fast walkers on a two-station layout: after some epochs some clients are attached to
    the other station, and their star SNRs are their new serving gains'."""
    from flnet.sim.ledger import SERVER
    from flnet.sim.world import World

    sc = load_scenario("scenarios/quickstart.yaml", MOVING)
    world = World(sc.clients, sc.radio, sc.seed)
    cells, everyone = world.network.cells, np.arange(40)
    before = cells.at(everyone, 0.0).station
    world.env.run(until=62.0)  # epoch 12: positions at 60 s
    link = world.network.link(0, SERVER)
    after = cells.at(everyone, world.env.now)
    assert (after.station != before).any()
    # by hand: each client's walk to 60 s, its keyed shadowing, the nearest station
    layout = cells_mod.layout(sc.radio)
    normal, unit_xy = cells_mod.client_draws(sc.seed, everyone, 2)
    xy = cells.walk.at(everyone, 60.0, 1000.0 * unit_xy)
    gain = cells_mod.gains(sc.radio, layout, xy[:, 0], xy[:, 1], normal, everyone)
    nearest = cells_mod.attach("nearest", gain, layout, xy[:, 0], xy[:, 1])
    assert after.station.tolist() == nearest.tolist()
    assert (after.gain == gain).all()
    expected = world.population.radiated_w[0] * gain[0, nearest[0]] / layout.noise_w_hz
    assert link.snr_hz == pytest.approx(expected, rel=1e-12)
    assert isinstance(world.round_plan, at_once.EventByEvent)  # epochs: event by event


def test_what_a_client_sees_does_not_depend_on_who_else_is_asked_or_when(monkeypatch):
    """Keyed by client (and leg): asking clients in another order, in other company, after
    other instants, or with the caches emptied between asks gives the same bits."""
    from flnet.sim import cell_clients, mobility
    from flnet.sim.world import World

    sc = load_scenario("scenarios/quickstart.yaml", MOVING)

    def fresh():
        return World(sc.clients, sc.radio, sc.seed).network.cells

    together = fresh().at(np.arange(40), 61.0)
    a = fresh()
    a.at(np.array([39, 7]), 12.0)  # walked part of the way first, on another epoch
    a.at(np.array([5]), 33.0)
    apart = [a.at(np.array([c]), 61.0) for c in range(39, -1, -1)][::-1]
    for field in together._fields:
        assert np.array_equal(
            getattr(together, field), np.concatenate([getattr(p, field) for p in apart])
        ), field
    assert a.serving(7, 61.0)[0] == together.station[7]
    assert a.snr_hz(7, 61.0, down=True) == together.down_snr_hz[7]
    # caches of two clients: emptied again and again, the same numbers
    monkeypatch.setattr(cell_clients, "ROWS_KEPT", 2)
    monkeypatch.setattr(mobility, "LEGS_KEPT", 2)
    b = fresh()
    for t_s in (7.0, 30.0, 61.0):
        got = [b.at(np.array([c, (c + 1) % 40]), t_s).gain[0] for c in range(40)]
    assert b.kept <= 2 and b.walk.kept <= 2
    assert np.array_equal(np.array(got), together.gain)


def test_the_fastest_round_trip_with_cells_is_the_best_clients_and_may_stop_early(monkeypatch):
    """The deadline check's bound with cells: every client's download, compute and upload
    alone, as each client's own links give them; with `enough_s`, the first block holding a
    client that quick ends the pass."""
    from flnet.sim import world as world_mod

    sc = load_scenario("scenarios/quickstart.yaml", MOVING)
    world = world_mod.World(sc.clients, sc.radio, sc.seed)
    alone = world.alone_s(np.arange(40), 1e6, 1e9, 1e6)
    each = alone.down_s + alone.up_s + alone.compute_s
    assert world.fastest_round_trip_s(1e6, 1e9, 1e6) == each.min()
    monkeypatch.setattr(world_mod, "FASTEST_BLOCK", 16)
    assert world.fastest_round_trip_s(1e6, 1e9, 1e6) == each.min()
    assert world.fastest_round_trip_s(1e6, 1e9, 1e6, enough_s=math.inf) == each[:16].min()
    assert world.network.cells.kept == 40  # the pass keeps nothing; alone_s's 40 are kept
    with pytest.raises(ScenarioError, match=r"deadline_s"):  # no client that quick
        flnet.run(
            "scenarios/quickstart.yaml", [*CELLS, "algorithm.cohort.deadline_s=1e-6"], write=False
        )


def test_cells_cost_nothing_per_registered_client():
    """1,000,000 registered clients with moving cells: building the world and asking 100
    clients in two epochs peaks below the same world without cells (whose SNR columns are
    [N]), and at the population's own columns: no [N] array for the cells; they keep 100
    clients' rows and legs."""
    import tracemalloc

    from flnet.sim.world import World

    peaks = {}
    for name, radio in (
        ("plain", []),
        (
            "cells",
            [
                "clients.positions={kind: uniform, side_m: 1000}",
                "radio.cells={stations_xy_m: [[0, 0], [500, 0], [1000, 0], [0, 500], "
                "[500, 500], [1000, 500], [500, 1000]], mobility: {epoch_s: 5}}",
            ],
        ),
    ):
        sc = load_scenario("scenarios/quickstart.yaml", ["clients.count=1000000", *radio])
        tracemalloc.start()
        world = World(sc.clients, sc.radio, sc.seed)
        cohort = np.arange(0, 1_000_000, 10_000)
        world.network.star(cohort, down=False)
        world.env.run(until=30.0)  # another epoch
        world.network.star(cohort, down=False)
        peaks[name] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if name == "cells":
            assert world.network.cells.kept == 100 and world.network.cells.walk.kept == 100
            assert world.population.up_snr_hz.size == world.population.x_m.size == 0
            nbytes = world.population.nbytes
    assert peaks["cells"] < peaks["plain"], peaks
    # the population's columns and the one temporary of its build (circuit power), no more
    assert peaks["cells"] < nbytes + 8 * 1_000_000 + 2_000_000, (peaks, nbytes)


def test_a_stream_with_moving_cells_resumes_to_the_bit(tmp_path):
    """FedBuff's checkpoints hold transfers under way: thawed, each takes its station and gains
    as of its own start, and every client walks again from t = 0 to the same positions, so
    the resumed run's records and ledger are the whole run's."""
    from flnet.runner import run

    over = [
        "clients.count=24",
        "clients.positions={kind: uniform, side_m: 1000}",
        "radio.cells={stations_xy_m: [[250, 250], [750, 250], [250, 750], [750, 750]], "
        "mobility: {min_speed_m_s: 5, max_speed_m_s: 10, epoch_s: 0.05}}",
        "run.eval_every=2",
    ]
    whole = flnet.run("scenarios/fedbuff.yaml", [*over, "run.rounds=8"], write=False)
    out = f"output.dir={tmp_path / 'b'}"
    run("scenarios/fedbuff.yaml", [*over, out, "run.rounds=4", "run.checkpoint_every=2"])
    resumed = run(
        "scenarios/fedbuff.yaml",
        [*over, out, "run.rounds=8", "run.checkpoint_every=2"],
        resume=True,
    )
    assert whole.records.equals(resumed.records)
    assert whole.ledger.equals(resumed.ledger)


def test_a_run_with_moving_clients():
    run = flnet.run(
        "scenarios/quickstart.yaml",
        [*CELLS, "radio.cells.mobility={min_speed_m_s: 1, max_speed_m_s: 2, epoch_s: 0.01}"],
        write=False,
    )
    assert (run.ledger.kind == "upload").sum() > 0


def test_cells_refuse_the_allocation_planner_and_scheduling_under_mobility():
    """The planner does not model a cell's band and interference, and the schedulers rank
    clients by their channels at the start: both are refused with cells, naming the field."""
    base = [
        "radio.mode=physical",
        "radio.cells={stations_xy_m: [[0, 0], [500, 0]]}",
        "clients.positions={kind: uniform, side_m: 500}",
    ]
    with pytest.raises(ScenarioError, match="resources.*radio.cells"):
        load_scenario(
            "scenarios/quickstart.yaml",
            [*base, "resources={bandwidth: min_max, deadline_s: 30}"],
        )
    moving = "radio.cells={stations_xy_m: [[0, 0], [500, 0]], mobility: {epoch_s: 10}}"
    with pytest.raises(ScenarioError, match=r"resources\.scheduling.*mobility"):
        load_scenario(
            "scenarios/quickstart.yaml",
            [*base[:1], moving, base[2], "resources={scheduling: {kind: best_channel}}"],
        )
    # scheduling alone, without mobility, is allowed with cells
    load_scenario("scenarios/quickstart.yaml", [*base, "resources={scheduling: {kind: age_based}}"])


def test_interfering_bands_have_no_closed_form_where_the_plain_band_has_one():
    """The accelerator's closed form (`solve_alone`) holds only without interference: the
    cells' band and the D2D band with spatial reuse refuse it (so `schedule_alone` replays their
    steps), while the plain band solves the same two transfers."""
    from flnet.schema import LogDistance
    from flnet.sim.interference import D2DReuseBand

    arrival_s, bits, snr_hz = [0.0, 0.0], [1e5, 2e5], [1e8, 1e8]
    env = simpy.Environment()
    assert SharedBandArrays(env, W_HZ).solve_alone(arrival_s, bits, snr_hz) is not None
    cell = _cell_band(_layout())(env)
    x = np.array([0.0, 10.0, 100.0, 90.0])
    d2d = D2DReuseBand(env, W_HZ, x, np.zeros(4), np.full(4, 0.1), LogDistance())
    for band in (cell, d2d):
        assert band.solve_alone(arrival_s, bits, snr_hz) is None


def test_kept_rows_stay_under_their_bound():
    """At most `limit` clients' rows: one more empties them; a block over the limit is not
    kept; a row read back is the one put."""
    from flnet.sim.kept import KeptRows

    kept = KeptRows(2, limit=3)
    kept.put(np.array([5, 9]), np.array([[1.0, 2.0], [3.0, 4.0]]))
    found, rows = kept.get(np.array([9, 4, 5]))
    assert found.tolist() == [True, False, True] and rows[[0, 2]].tolist() == [[3, 4], [1, 2]]
    kept.put(np.array([9, 7]), np.array([[5.0, 6.0], [7.0, 8.0]]))  # 9 again, 7 new: 3 kept
    assert len(kept) == 3 and kept.row(9).tolist() == [5, 6]
    kept.put(np.array([1]), np.array([[0.0, 0.0]]))  # a fourth: emptied, then 1 kept
    assert len(kept) == 1 and kept.row(5) is None
    kept.put(np.arange(4), np.zeros((4, 2)))  # over the limit alone: not kept
    assert len(kept) == 1
