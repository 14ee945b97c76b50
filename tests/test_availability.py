"""Availability models, interrupted work, stragglers and dropout against hand computation and
sampling error; selection of online clients only, at a cost that does not grow with N."""

import math

import numpy as np
import pytest

from flnet.rng import Stream, generator
from flnet.runner import run
from flnet.scenario import DiurnalAvailability
from flnet.sim.availability import DAY_S, HOUR_S, Diurnal
from flnet.sim.patterns import Packet, round_trip
from flnet.sim.world import World

BITS, FLOPS, SNR_DB, BAND_HZ = 1e6, 8e9, 15.0, 1e6
CPU_HZ, FPC, KAPPA, TX_W, RX_W = 1e9, 4.0, 1e-28, 0.1, 0.05
RATE_BPS = BAND_HZ * math.log2(1 + 10 ** (SNR_DB / 10))


def world_of(scenario, n, **clients):
    sc = scenario(
        clients={"count": n, "cpu_hz": CPU_HZ, "flops_per_cycle": FPC, "kappa": KAPPA, **clients},
        radio={
            "mode": "direct",
            "tx_power_dbm": 20.0,  # 0.1 W
            "tx_circuit_power_w": 0.0,
            "rx_power_w": RX_W,
            "uplink_snr_db": SNR_DB,
            "downlink_snr_db": SNR_DB,
            "uplink": {"bandwidth_hz": BAND_HZ, "sharing": "dedicated"},
            "downlink": {"bandwidth_hz": BAND_HZ, "sharing": "dedicated"},
        },
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 1}},
    )
    return World(sc.clients, sc.radio, sc.seed)


def one_round(world, cohort, tag=1):
    n = len(cohort)
    proc = world.env.process(
        round_trip(
            world, cohort, Packet(None, BITS), np.full(n, FLOPS), Packet(None, BITS), tag=tag
        )
    )
    world.env.run(until=proc)
    return proc.value, world.ledger.frame()


# ---------------------------------------------------------------- the diurnal model


def test_diurnal_online_fraction_by_local_hour_is_the_configured_curve():
    """n clients asked at one instant are n independent draws of being online, each with the
    curve's probability at its local hour: the observed share is within 4 standard errors,
    4 sqrt(pi (1 - pi) / n), of pi(h) (the session-start rate is chosen so the share is pi
    itself, not a lagged copy). Clients in zone +6 h see the curve 6 hours earlier in UTC."""
    model = Diurnal(DiurnalAvailability(kind="diurnal", session_mean_s=1800.0), seed=3)
    n = 1500
    for hour in (3.0, 9.0, 15.0, 20.5):  # peak, mean, trough, rising
        share = model.online(np.arange(n), 2 * DAY_S + hour * HOUR_S, 0).mean()
        pi = float(model.fraction(np.array([hour]))[0])
        assert abs(share - pi) < 4 * math.sqrt(pi * (1 - pi) / n), (hour, share, pi)
    east = Diurnal(
        DiurnalAvailability(
            kind="diurnal", hourly_online=[0.05] * 12 + [0.6] * 12, time_zones_h=[6.0]
        ),
        seed=3,
    )
    for utc_h, pi in ((2.0, 0.05), (9.0, 0.6)):  # local 8:00 and 15:00
        share = east.online(np.arange(n), DAY_S + utc_h * HOUR_S, 0).mean()
        assert abs(share - pi) < 4 * math.sqrt(pi * (1 - pi) / n), (utc_h, share)


@pytest.mark.parametrize(
    "curve",
    [
        {"time_zones_h": [-5, 0, 5.5], "time_zone_weights": [1, 2, 3.5]},
        {"hourly_online": np.linspace(0.05, 0.7, 24).tolist(), "session_mean_s": 600.0},
    ],
)
def test_diurnal_draws_made_in_blocks_are_each_clients_own(curve):
    """Zones and sessions are drawn for many clients at once (their generators hashed together,
    one thinning of all their candidate starts): each is what the docstring's definition gives
    one client and one day at a time, with that client's own generators."""
    from flnet.sim.availability import MAX_SESSION_S

    cfg = DiurnalAvailability(kind="diurnal", **curve)
    model = Diurnal(cfg, seed=5)
    clients = np.arange(0, 10**6, 6007)[:120].tolist()  # more than one block
    zones = Diurnal(cfg, seed=5).zones_h_of(clients)
    pairs = [(c, d) for c in clients for d in (-1, 0, 6)]
    drawn = model.sessions_of(pairs, [z for z in zones for _ in range(3)])
    bound = model.rate_bound_hz
    for i, c in enumerate(clients):
        p = np.asarray(cfg.time_zone_weights or [1.0] * len(cfg.time_zones_h), dtype=float)
        pick = generator(5, Stream.ZONES, c).choice(len(cfg.time_zones_h), p=p / p.sum())
        assert zones[i] == cfg.time_zones_h[pick]
        for d in (-1, 0, 6):
            rng = generator(5, Stream.SESSIONS, c, d + 1)
            n = rng.poisson(bound * DAY_S)
            starts = d * DAY_S + np.sort(rng.uniform(0.0, DAY_S, n))
            keep = rng.random(n) * bound < model.start_rate_hz(starts / HOUR_S + zones[i])
            ends = starts + np.minimum(rng.exponential(cfg.session_mean_s, n), MAX_SESSION_S)
            want = np.stack([starts, ends], axis=1)[keep]
            np.testing.assert_array_equal(drawn[pairs.index((c, d))], want)
    t = 6 * DAY_S + 5 * HOUR_S
    together = model.online_until(np.array(clients), t, 0)
    alone = [Diurnal(cfg, seed=5).online_until(np.array([c]), t, 0)[0] for c in clients]
    np.testing.assert_array_equal(together, alone)


def test_diurnal_thins_a_pair_near_its_rate_by_its_own_starts(monkeypatch):
    """A coin near its rate sends its (client, day) to the definition's own thinning (the
    pair's starts as one array), in case a CPU rounds an element of the block's array by where
    it sits. Every pair sent there: the same sessions, also where the block's rates are off."""
    from flnet.sim import availability

    cfg = DiurnalAvailability(kind="diurnal", time_zones_h=[-5, 0, 5.5])
    pairs = [(c, d) for c in range(0, 10**6, 9973)[:60] for d in (0, 1)]
    zones = Diurnal(cfg, seed=8).zones_h_of([c for c, _ in pairs])
    want = Diurnal(cfg, seed=8).sessions_of(pairs, zones)
    exact = Diurnal.start_rate_hz
    # a pair has about 10 candidate starts (the rate's bound x a day), the block about 1,200
    assert 5 < Diurnal(cfg, seed=8).rate_bound_hz * DAY_S < 20

    def off_in_blocks(self, hour):  # the block's rates 1% off, each pair's own exact
        return exact(self, hour) * (1.01 if len(hour) > 200 else 1.0)

    monkeypatch.setattr(Diurnal, "start_rate_hz", off_in_blocks)
    monkeypatch.setattr(availability, "THIN_TOLERANCE", 1.0)
    got = Diurnal(cfg, seed=8).sessions_of(pairs, zones)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_clients_timeline_is_the_same_on_every_query_and_crosses_midnight():
    cfg = DiurnalAvailability(kind="diurnal", session_mean_s=4 * 3600.0)
    a, b = Diurnal(cfg, seed=1), Diurnal(cfg, seed=1)  # b: a resumed run's fresh model
    clients = np.arange(300)
    t = 3 * DAY_S - 600.0  # ten minutes before midnight
    until = a.online_until(clients, t, 0)
    assert np.array_equal(until, a.online_until(clients, t, 0))
    assert np.array_equal(until, b.online_until(clients[::-1], t, 0)[::-1])
    assert not np.array_equal(until, Diurnal(cfg, seed=2).online_until(clients, t, 0))
    on = until > t
    assert (until[~on] == t).all()
    crossing = on & (until > 3 * DAY_S)  # sessions that go on past midnight
    assert crossing.sum() > 5
    later = 3 * DAY_S + 60.0
    assert a.online(clients[crossing], later, 0).all() == (until[crossing] > later).all()
    # just before its session's end a client is online, at the end it is not
    k = clients[on]
    assert a.online(k, 0, 0).shape == k.shape
    for c, end in zip(k[:20].tolist(), until[on][:20].tolist()):
        assert a.online(np.array([c]), end - 1e-3, 0)[0] and not a.online(np.array([c]), end, 0)[0]


# ---------------------------------------------------------------- interrupted and slowed work


class EndsAt:
    """Every client online, its session ending at `t_s`."""

    def __init__(self, t_s):
        self.t_s = t_s

    def online(self, clients, t_s, draw):
        return np.ones(len(clients), dtype=bool)

    def online_until(self, clients, t_s, draw):
        return np.full(len(clients), self.t_s)


def test_an_upload_cut_by_the_session_end_is_charged_up_to_it_as_interrupted(scenario):
    """Download 1 Mbit, compute 8 GFLOP slowed 2x (same joules, twice the time), then the
    session ends at 40 % of the upload: every row by hand."""
    world = world_of(
        scenario,
        1,
        availability={"kind": "bernoulli", "p": 1.0},
        slowdown_probability=1.0,
        slowdown_factor=2.0,
    )
    down_s = BITS / RATE_BPS
    compute_s = 2 * FLOPS / FPC / CPU_HZ
    up_s = BITS / RATE_BPS
    cut_s = down_s + compute_s + 0.4 * up_s
    world.availability = EndsAt(cut_s)
    done, led = one_round(world, np.array([0]))
    assert done.outcomes == ["interrupted"] and len(done.positions) == 0
    assert done.completed.tolist() == [True]  # its training finished; the upload did not
    assert done.end_s == pytest.approx(cut_s)
    rows = led.set_index("kind")
    assert rows.loc["download", "energy_j"] == pytest.approx(RX_W * down_s)
    assert rows.loc["compute", "end_s"] == pytest.approx(down_s + compute_s)
    assert rows.loc["compute", "energy_j"] == pytest.approx(KAPPA * FLOPS / FPC * CPU_HZ**2)
    up = rows.loc["upload"]
    assert up.outcome == "interrupted" and up.end_s == pytest.approx(cut_s)
    assert up.energy_j == pytest.approx(TX_W * 0.4 * up_s)
    assert up.bits == pytest.approx(0.4 * BITS)
    assert led.energy_j.sum() == pytest.approx(RX_W * down_s + 0.2 + TX_W * 0.4 * up_s)


def test_at_completion_discards_the_upload_of_a_client_offline_at_its_end(scenario):
    """FedScale's rule: the work runs to its end (nothing interrupted), the upload is lost
    and all of its energy is charged."""
    world = world_of(
        scenario, 1, availability={"kind": "bernoulli", "p": 1.0, "check": "at_completion"}
    )

    class OffAfter(EndsAt):
        def online(self, clients, t_s, draw):
            return np.full(len(clients), t_s < self.t_s)

    total_s = 2 * BITS / RATE_BPS + FLOPS / FPC / CPU_HZ
    world.availability = OffAfter(total_s / 2)
    done, led = one_round(world, np.array([0]))
    assert done.outcomes == ["lost"] and done.end_s == pytest.approx(total_s)
    assert led.outcome.tolist() == ["ok", "ok", "lost"]
    assert led.energy_j.iloc[2] == pytest.approx(TX_W * BITS / RATE_BPS)


# ---------------------------------------------------------------- dropout


def test_dropout_rate_is_p_and_a_dropped_client_is_charged_up_to_its_uniform_point(scenario):
    """400 members, p = 0.25: the dropped share is within 4 standard errors of p. Each dropped
    member's point is the third draw of its (seed, BEHAVIOUR, round, client) stream, uniform
    over its work with phases weighted by their times (here 1 Mbit down, 2 s of compute,
    1 Mbit up); its last row ends there, charged by hand."""
    n, p = 400, 0.25
    world = world_of(scenario, n, dropout_probability=p)
    done, led = one_round(world, np.arange(n), tag=7)
    dropped = [i for i, o in enumerate(done.outcomes) if o == "dropped"]
    assert abs(len(dropped) / n - p) < 4 * math.sqrt(p * (1 - p) / n)
    assert set(done.outcomes) == {"ok", "dropped"}
    times = np.array([BITS / RATE_BPS, FLOPS / FPC / CPU_HZ, BITS / RATE_BPS])
    edges = np.cumsum(times) / times.sum()
    for c in dropped:
        _slow, u, point = generator(0, Stream.BEHAVIOUR, 7, c).random(3)
        assert u < p
        phase = int(np.searchsorted(edges, point, side="right"))
        share = (point - (edges[phase - 1] if phase else 0.0)) / (times[phase] / times.sum())
        mine = led[led.node == c]
        last = mine.iloc[-1]
        assert len(mine) == phase + 1 and last.outcome == "dropped"
        assert (mine.outcome.iloc[:-1] == "ok").all()
        if phase == 1:
            assert last.flops == pytest.approx(share * FLOPS)
            assert last.energy_j == pytest.approx(share * KAPPA * FLOPS / FPC * CPU_HZ**2)
        else:
            power = RX_W if phase == 0 else TX_W
            assert last.bits == pytest.approx(share * BITS)
            assert last.energy_j == pytest.approx(power * share * times[phase])


# ---------------------------------------------------------------- selection


def test_bernoulli_draws_each_clients_own_generator_at_once():
    """The cohort's draws run as one block: each client's answer is its own generator's,
    ``generator(seed, AVAILABILITY, draw, c).random() < p``, for any order of ids."""
    from flnet.sim.availability import Bernoulli

    model, ids = Bernoulli(0.4, seed=3), np.random.default_rng(0).permutation(2000)[:500]
    for draw in (1, 17):
        want = [generator(3, Stream.AVAILABILITY, draw, c).random() < 0.4 for c in ids.tolist()]
        assert model.online(ids, 0.0, draw).tolist() == want
    assert model.online(np.array([], dtype=np.int64), 0.0, 1).shape == (0,)


def test_selection_picks_only_online_clients(scenario):
    bern = world_of(scenario, 1000, availability={"kind": "bernoulli", "p": 0.3})
    for r in range(1, 6):
        picked = bern.sample_clients(20, r)
        assert len(picked) == 20 and len(np.unique(picked)) == 20
        assert all(generator(0, Stream.AVAILABILITY, r, c).random() < 0.3 for c in picked.tolist())
    diurnal = world_of(scenario, 100_000, availability={"kind": "diurnal"})
    for hour in (3, 15):
        diurnal.env = type(diurnal.env)(initial_time=hour * HOUR_S)
        picked = diurnal.sample_clients(10, hour, over_selection=1.3)
        assert len(picked) == 13 and diurnal.online_clients(picked, hour).all()
    few = world_of(scenario, 30, availability={"kind": "bernoulli", "p": 0.1})
    picked = few.sample_clients(20, 1)  # fewer online than wanted: all of them, no more
    online = [c for c in range(30) if generator(0, Stream.AVAILABILITY, 1, c).random() < 0.1]
    assert picked.tolist() == online


def test_selection_under_availability_allocates_the_same_whatever_n(scenario, monkeypatch):
    """A round's 100 online clients from 10,000 or 10,000,000 registered: peak allocation
    within a few kilobytes of each other, and small (nothing is [N]). The sessions a diurnal
    model keeps for the clients it was asked about are bounded apart (SESSIONS_KEPT, tested
    below): kept to one here, so what is measured is the selection's own."""
    import tracemalloc

    from flnet.sim import availability

    monkeypatch.setattr(availability, "SESSIONS_KEPT", 1)
    world = world_of(scenario, 100, availability={"kind": "diurnal"})
    peaks = []
    for n in (10_000, 10_000_000):
        world.clients = world.clients.model_copy(update={"count": n})
        world.sample_clients(100, 1)  # warm caches
        tracemalloc.start()
        picked = world.sample_clients(100, 2)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert len(picked) == 100
        peaks.append(peak)
    assert max(peaks) < 300_000 and abs(peaks[1] - peaks[0]) < 50_000, peaks


# ---------------------------------------------------------------- whole runs


DIURNAL_RUN = dict(
    clients={
        "count": 200,
        "cpu_hz": {"kind": "lognormal", "median": 1e6, "sigma": 0.6},
        "flops_per_cycle": 0.1,  # seconds of compute: sessions end mid-work
        "availability": {"kind": "diurnal", "session_mean_s": 20.0, "time_zones_h": [0, 8]},
        "dropout_probability": 0.2,
        "slowdown_probability": 0.2,
        "slowdown_factor": 3.0,
    },
    algorithm={
        "name": "fedavg",
        "cohort": {"clients_per_round": 6, "over_selection": 1.5, "deadline_s": 30.0},
        "local": {"steps": 10, "batch_size": 16},
    },
    model={"kind": "logistic"},
    radio={"rayleigh_fading": True},
)


def test_a_diurnal_run_resumes_to_the_bit_and_its_energy_is_the_sum_of_its_rows(scenario, tmp_path):
    whole = run(scenario(**DIURNAL_RUN, run={"rounds": 6}, output={"dir": str(tmp_path / "a")}))
    part = dict(DIURNAL_RUN, output={"dir": str(tmp_path / "b")})
    run(scenario(**part, run={"rounds": 3, "checkpoint_every": 1}))
    resumed = run(scenario(**part, run={"rounds": 6, "checkpoint_every": 1}), resume=True)
    assert whole.records.equals(resumed.records)
    assert whole.ledger.equals(resumed.ledger)
    led = whole.ledger
    assert {"dropped", "interrupted"} <= set(led.outcome)
    for rec in whole.records.itertuples():
        assert rec.energy_j == math.fsum(led.energy_j[led.end_s <= rec.sim_time_s])


def test_a_stream_goes_on_after_dropouts_and_charges_them(scenario):
    """Failed work frees its slot: the run reaches its 5 server updates."""
    res = run(
        scenario(
            clients={
                "count": 50,
                "availability": {"kind": "bernoulli", "p": 0.5},
                "dropout_probability": 0.3,
            },
            algorithm={"name": "fedbuff", "concurrency": 4, "buffer_size": 2},
            model={"kind": "logistic"},
            run={"rounds": 5},
        ),
        write=False,
    )
    led = res.ledger[res.ledger.kind != "evaluate"]
    assert "dropped" in set(led.outcome) and res.records["round"].iloc[-1] == 5
    for rec in res.records.itertuples():
        assert rec.energy_j == math.fsum(res.ledger.energy_j[res.ledger.end_s <= rec.sim_time_s])


def test_members_that_finish_before_their_session_ends_leave_nothing_scheduled(scenario):
    """Sessions an hour long, rounds of seconds: after 50 rounds of 40 members nothing is held
    for members that are over (no timer per member waits out its session)."""
    world = world_of(scenario, 40, availability={"kind": "bernoulli", "p": 1.0})
    world.availability = EndsAt(3600.0)
    for r in range(1, 51):
        one_round(world, np.arange(40), tag=r)
    assert len(world._stops) == 0 and len(world._stops._heap) < 200
    assert len(world.env._queue) <= 2  # the one timer, for the earliest session end


def test_a_diurnal_stream_resumes_to_the_bit_with_work_under_way(scenario, tmp_path):
    """FedBuff under sessions of about 8 s, dropout and slowdowns: the work frozen at a
    checkpoint keeps its fate (interruption time, dropout point, slowdown) when thawed (work
    under way at the 4th update's checkpoint is interrupted later: without re-arming its
    session's end on thaw, the ledgers differ)."""
    sc = dict(
        DIURNAL_RUN,
        algorithm={"name": "fedbuff", "concurrency": 6, "buffer_size": 2, "local": {"steps": 10}},
    )
    sc["clients"] = dict(
        sc["clients"],
        availability={"kind": "diurnal", "session_mean_s": 8.0, "time_zones_h": [0, 8]},
    )
    whole = run(scenario(**sc, run={"rounds": 8}, output={"dir": str(tmp_path / "a")}))
    part = dict(sc, output={"dir": str(tmp_path / "b")})
    run(scenario(**part, run={"rounds": 4, "checkpoint_every": 1}))
    resumed = run(scenario(**part, run={"rounds": 8, "checkpoint_every": 1}), resume=True)
    assert {"dropped", "interrupted"} <= set(whole.ledger.outcome)
    assert whole.records.equals(resumed.records)
    assert whole.ledger.equals(resumed.ledger)


@pytest.mark.parametrize(
    "availability, words",
    [
        ({"kind": "weekly"}, "clients.availability"),
        ({"kind": "diurnal", "mean_online": 0.7}, "clients.availability.amplitude"),
        ({"kind": "diurnal", "hourly_online": [0.2] * 23}, "clients.availability.hourly_online"),
        ({"kind": "diurnal", "time_zone_weights": [1, 2]}, "time_zone_weights"),
        ({"kind": "bernoulli", "p": 0.5, "check": "never"}, "check"),
    ],
)
def test_bad_availability_is_refused_naming_the_field(scenario, availability, words):
    from flnet.errors import ScenarioError

    with pytest.raises(ScenarioError, match=words):
        scenario(clients={"availability": availability})


def test_diurnal_keeps_the_session_draws_it_was_asked_for_within_a_bound(monkeypatch):
    """The (client, day) sessions and zones it keeps are the draws themselves (read-only), a
    full store is emptied rather than grown, and what it answers never depends on them."""
    from flnet.sim import availability

    cfg = DiurnalAvailability(kind="diurnal", session_mean_s=1800.0, time_zones_h=[-5, 0, 8])
    monkeypatch.setattr(availability, "SESSIONS_KEPT", 8)
    kept, fresh = Diurnal(cfg, seed=4), Diurnal(cfg, seed=4)
    clients = np.arange(30)
    for t in (1000.0, 50_000.0, 90_000.0, 1000.0):  # back to the first day: drawn again
        until = kept.online_until(clients, t, 0)
        fresh._days.clear()
        fresh._zones.clear()
        np.testing.assert_array_equal(until, fresh.online_until(clients, t, 0))
        assert len(kept._days) <= 8 and len(kept._zones) <= 8
    day = kept.sessions(3, 0)
    assert kept.sessions(3, 0) is day and not day.flags.writeable
    np.testing.assert_array_equal(day, Diurnal(cfg, seed=4).sessions(3, 0))
