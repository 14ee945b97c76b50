"""Round trips computed at once (the round plan, flnet.sim.at_once) against the event-by-event
simulation (patterns.round_trip's trips on the World's jobs): the same ledger rows in the same
order, their instants bit for bit where the band is replayed step by step and within
tests/tolerance.py's COST_RTOL where a shared band is solved at once; the event-by-event path
wherever something could interrupt a round or SimPy's order of simultaneous events would
decide."""

import math

import numpy as np
import pytest
import simpy
from tolerance import COST_RTOL, assert_ledgers_close, assert_records_close

import flnet
from flnet.scenario import load_scenario
from flnet.sim import at_once
from flnet.sim import availability as availability_mod
from flnet.sim.channel import ARRAYS_ABOVE_USERS, SharedBand, SharedBandArrays
from flnet.sim.costs import Costs
from flnet.sim.world import World


def _band_event_by_event(
    arrival_s, bits, snr_hz, bandwidth_hz=1e6, kind=SharedBand, keep=0, cut_s=None, cancel_s=None
):
    """Transfers started at `arrival_s` on a `kind` of shared band under SimPy: [(end, who)]
    in the order they complete, and the band's last settle; stopped (as a round's server
    stops them) once `keep` are done or at `cut_s`: the rest cancelled, and the bits each of
    those had sent; with `cancel_s`, each transfer cancelled alone at its instant if it is
    still under way (its sender's session ends)."""
    env = simpy.Environment()
    band = kind(env, bandwidth_hz)
    done, txs, stopped = [], {}, []

    def stop():
        stopped.append(True)
        for tx in txs.values():
            tx.cancel()

    def send(i):
        yield env.timeout(arrival_s[i])
        if stopped:
            return
        tx = txs[i] = band.transmit(bits[i], snr_hz[i])
        yield tx.done
        if not tx.cancelled:
            done.append((env.now, i))
            if len(done) == keep:
                stop()

    def cut():
        yield env.timeout(cut_s)
        stop()

    def cancel(i):
        yield env.timeout(cancel_s[i])
        if i in txs and not txs[i].done.triggered:
            txs[i].cancel()

    for i in range(len(arrival_s)):
        env.process(send(i))
        if cancel_s is not None and cancel_s[i] < math.inf:
            env.process(cancel(i))
    if cut_s is not None:
        env.process(cut())
    env.run()
    sent = {i: tx.sent_bits for i, tx in txs.items() if tx.cancelled}
    return done, band._settled_at, sent


def _finishes(schedule):
    """[(end_s, transfer)] in the order the transfers finished."""
    return list(zip(schedule.end_s.tolist(), schedule.done.tolist(), strict=True))


@pytest.mark.parametrize("seed", range(6))
def test_a_shared_band_at_once_replays_its_events_to_the_bit(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    arrival_s = np.sort(rng.uniform(0, 0.5, n))
    if seed % 2:  # simultaneous arrivals, processed in order
        arrival_s = np.round(arrival_s, 1)
    bits = rng.uniform(1e4, 1e6, n).tolist()
    snr_hz = (1e6 * 10 ** rng.uniform(0, 3, n)).tolist()
    expected, settled_s, _ = _band_event_by_event(arrival_s.tolist(), bits, snr_hz)
    band = SharedBand(simpy.Environment(), 1e6)
    schedule = band.schedule_alone(arrival_s.tolist(), bits, snr_hz)
    assert schedule is not None
    got = _finishes(schedule)
    assert got == expected  # the same floats, in the same order
    assert schedule.settled_s == settled_s


def _random_band(seed, n, spread_s=0.5):
    rng = np.random.default_rng(seed)
    arrival_s = np.sort(rng.uniform(0, spread_s, n))
    if seed % 2:  # simultaneous arrivals, processed in order
        arrival_s = np.round(arrival_s, 1)
    bits = rng.uniform(1e4, 1e6, n).tolist()
    snr_hz = (1e6 * 10 ** rng.uniform(0, 3, n)).tolist()
    return arrival_s.tolist(), bits, snr_hz


@pytest.mark.parametrize("seed", range(3))
def test_a_shared_band_of_arrays_replays_its_own_events_to_the_bit(seed):
    """Past ARRAYS_ABOVE_USERS users a band keeps its state in numpy arrays, which round
    differently from the floats' (numpy's log1p, the rate's order of operations): its replay
    takes its own steps, and gives its events' floats."""
    args = _random_band(seed, 129 + 30 * seed)
    expected, settled_s, _ = _band_event_by_event(*args, kind=SharedBandArrays)
    schedule = SharedBandArrays(simpy.Environment(), 1e6).schedule_alone(*args)
    assert schedule is not None
    assert _finishes(schedule) == expected
    assert schedule.settled_s == settled_s
    floats = SharedBand(simpy.Environment(), 1e6).schedule_alone(*args)
    # the float band's replay rounds otherwise here: else this test could not tell them apart
    assert floats is not None and _finishes(floats) != _finishes(schedule)


@pytest.mark.parametrize("kind", [SharedBand, SharedBandArrays])
@pytest.mark.parametrize("seed", range(2))
def test_a_replay_stopped_mid_transfer_leaves_the_bits_cancel_leaves(kind, seed):
    """Stopped once `keep` transfers are done (`until_done`) or at an instant between events
    (`until_s`): the finishes up to then, and the bits the others have left, as SimPy's
    cancels leave them."""
    args = _random_band(seed, 60)
    bits = args[1]
    everyone, _, _ = _band_event_by_event(*args, kind=kind)
    keep = 25
    halfway_s = (everyone[keep - 1][0] + everyone[keep][0]) / 2  # between two finishes
    band = kind(simpy.Environment(), 1e6)
    for stop in [{"keep": keep}, {"cut_s": halfway_s}]:
        expected, _, sent = _band_event_by_event(*args, kind=kind, **stop)
        until = {"until_done": keep} if "keep" in stop else {"until_s": halfway_s}
        schedule = band.schedule_alone(*args, **until)
        assert schedule is not None
        assert _finishes(schedule) == expected
        assert expected == everyone[:keep]
        assert schedule.settled_s == stop.get("cut_s", expected[-1][0])
        left = {i: bits[i] - max(b, 0.0) for i, b in schedule.left.items()}
        assert left == sent  # every transfer under way, to the bit
        assert 0 < min(left.values()) and any(b < bits[i] for i, b in left.items())


@pytest.mark.parametrize("kind", [SharedBand, SharedBandArrays])
@pytest.mark.parametrize("seed", range(2))
def test_a_replay_cancels_each_transfer_at_its_own_instant_to_the_bit(kind, seed):
    """A transfer cancelled alone mid-way (its sender's session ends: `cancel_s`) leaves the
    band, and the others share it anew from then: the replay takes `cancel`'s steps, with the
    finishes, the last settle and the cancelled transfers' bits of SimPy's, to the bit."""
    arrival_s, bits, snr_hz = _random_band(seed, 60 if kind is SharedBand else 150)
    everyone, _, _ = _band_event_by_event(arrival_s, bits, snr_hz, kind=kind)
    rng = np.random.default_rng(100 + seed)
    last_s = everyone[-1][0]
    # a third cancelled at some instant after they start (some after they finished: no-ops)
    cancel_s = [a + rng.uniform(0, last_s) if rng.random() < 1 / 3 else math.inf for a in arrival_s]
    expected, settled_s, sent = _band_event_by_event(
        arrival_s, bits, snr_hz, kind=kind, cancel_s=cancel_s
    )
    band = kind(simpy.Environment(), 1e6)
    schedule = band.schedule_alone(arrival_s, bits, snr_hz, cancel_s=cancel_s)
    assert schedule is not None
    assert _finishes(schedule) == expected
    assert schedule.settled_s == settled_s
    assert {i: bits[i] - b for i, b in schedule.cancelled.items()} == sent
    assert len(sent) > 3 and len(expected) == len(bits) - len(sent)
    assert [e for e in expected if e[1] not in sent] != [e for e in everyone if e[1] not in sent]
    # a cancel on the instant of an arrival is SimPy's to order
    clash, last_arrival_s = [math.inf] * len(bits), arrival_s[-1]
    on = next(i for end, i in everyone if end > last_arrival_s and arrival_s[i] < last_arrival_s)
    clash[on] = last_arrival_s
    assert band.schedule_alone(arrival_s, bits, snr_hz, cancel_s=clash) is None


def test_a_replay_stops_at_the_keep_th_finish_of_those_counted():
    """`counted` (uploads sure to deliver): the replay runs on past the others' finishes to
    the keep-th counted one, and stops there, as the server stops at its keep-th delivery."""
    args = _random_band(0, 40)
    everyone, _, _ = _band_event_by_event(*args)
    counted, keep = [i % 3 == 0 for i in range(40)], 5
    kth_s = [end for end, i in everyone if counted[i]][keep - 1]
    band = SharedBand(simpy.Environment(), 1e6)
    schedule = band.schedule_alone(*args, until_done=keep, counted=counted)
    assert schedule is not None
    assert _finishes(schedule) == [e for e in everyone if e[0] <= kth_s]
    assert schedule.settled_s == kth_s and len(schedule.left) == 40 - len(schedule.done)


@pytest.mark.parametrize("seed", range(6))
def test_a_shared_band_solved_at_once_agrees_with_its_events(seed):
    """Everyone arrives before anyone finishes: the triangular solve gives the replay's
    finishing order and its instants within COST_RTOL."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    arrival_s = np.sort(rng.uniform(0, 0.01, n)).tolist()
    bits = rng.uniform(5e5, 1e6, n).tolist()
    snr_hz = (1e6 * 10 ** rng.uniform(0, 3, n)).tolist()
    expected, settled_s, _ = _band_event_by_event(arrival_s, bits, snr_hz)
    solved = SharedBand(simpy.Environment(), 1e6).solve_alone(arrival_s, bits, snr_hz)
    assert solved is not None
    got = _finishes(solved)
    assert [i for _, i in got] == [i for _, i in expected]
    np.testing.assert_allclose([t for t, _ in got], [t for t, _ in expected], rtol=COST_RTOL)
    assert solved.settled_s == got[-1][0]


def test_a_band_whose_transfers_finish_while_others_arrive_is_not_solved():
    arrival_s, bits, snr_hz = [0.0, 10.0], [1e5, 1e5], [1e8, 1e8]  # the first is long done
    band = SharedBand(simpy.Environment(), 1e6)
    assert band.solve_alone(arrival_s, bits, snr_hz) is None
    assert band.schedule_alone(arrival_s, bits, snr_hz) is not None  # replayed instead


def test_an_arrival_at_the_instant_of_a_finish_is_left_to_simpy():
    band = SharedBand(simpy.Environment(), 1e6)
    alone = band.schedule_alone([0.0], [1e5], [1e8])
    assert alone is not None
    finish_s = alone.end_s[0]
    assert band.schedule_alone([0.0, finish_s], [1e5, 1e5], [1e8, 1e8]) is None


def test_ties_are_between_kinds_of_event_only():
    """Events in time order with their kinds: equal instants within a kind are in a known
    order, across kinds SimPy's; inf (never) ties nothing."""
    inf = math.inf
    assert not at_once._ties(np.array([1.0, 1.0, 2.0, 2.0, 3.0]), np.array([0, 0, 1, 1, 2]))
    assert at_once._ties(np.array([1.0, 1.0, 2.0]), np.array([0, 2, 1]))
    assert at_once._ties(np.array([0.5, 1.0, 1.0, 1.0]), np.array([1, 0, 0, 2]))
    assert not at_once._ties(np.array([1.0, inf, inf]), np.array([0, 1, 2]))


@pytest.mark.parametrize(
    "path, picked",
    [
        ("scenarios/quickstart.yaml", at_once.AtOnce),
        ("scenarios/battery.yaml", at_once.EventByEvent),
    ],
)
def test_the_world_picks_the_round_plan_only_where_every_fate_is_known(path, picked):
    """A battery's cut is an estimate and the others' rows drain it: no round plan then."""
    sc = load_scenario(path)
    world = World(sc.clients, sc.radio, sc.seed)
    assert type(world.round_plan) is picked


def _plans(monkeypatch):
    """Whether each round from now on was planned at once (a spy on `at_once.plan`)."""
    planned = []
    plan = at_once.plan

    def counting(*args, **kwargs):
        result = plan(*args, **kwargs)
        planned.append(result is not None)
        return result

    monkeypatch.setattr(at_once, "plan", counting)
    return planned


def _both_ways(monkeypatch, scenario_or_path, overrides=()):
    """The run with round trips at once (counting the rounds planned) and event by event."""
    planned = _plans(monkeypatch)
    fast = flnet.run(scenario_or_path, list(overrides), write=False)
    monkeypatch.setattr(at_once.AtOnce, "plan", lambda self, trips: None)
    slow = flnet.run(scenario_or_path, list(overrides), write=False)
    return fast, slow, planned


QUICK = ["run.rounds=4", "clients.count=20", "algorithm.cohort.clients_per_round=8"]

WIDE = [  # more than ARRAYS_ABOVE_USERS users on a band: its state in arrays
    "run.rounds=3",
    "run.eval_every=3",
    "clients.count=140",
    "algorithm.cohort.clients_per_round=100",
    "algorithm.local.steps=2",
]


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["radio.downlink.sharing=shared"],  # downloads share a band too
        ["radio.uplink.sharing=dedicated"],
        ["radio.rayleigh_fading=true"],
        ["algorithm.cohort.deadline_s=1000"],  # a deadline nobody reaches
        ["algorithm.name=scaffold"],
    ],
    ids=["default", "shared-down", "dedicated-up", "fading", "deadline", "scaffold"],
)
def test_round_plan_equals_event_by_event(monkeypatch, overrides):
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*QUICK, *overrides])
    assert planned and all(planned)
    assert_ledgers_close(fast.ledger, slow.ledger)  # rows and their order; times, joules
    assert_records_close(fast.records, slow.records, eval_rows=1)


def test_round_plan_equals_event_by_event_with_a_few_transfers_replayed_to_the_bit(monkeypatch):
    """Up to `replays_up_to` transfers the replay is quicker than the solve: taken, and exact."""
    few = SharedBand.replays_up_to
    overrides = [*QUICK, f"algorithm.cohort.clients_per_round={few}"]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", overrides)
    assert planned and all(planned)
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


@pytest.mark.parametrize(
    "fates",
    [[], ["clients.slowdown_probability=0.3", "clients.dropout_probability=0.3"]],
    ids=["sure", "slowdowns-dropouts"],
)
def test_round_plan_equals_event_by_event_under_capacity_traces_to_the_bit(monkeypatch, fates):
    """Measured link rates (dedicated) and a capacity trace's compute seconds (a slowed
    compute: its seconds times the slowdown, its joules the trace's power times its own)."""
    overrides = ["run.rounds=4", "clients.availability={kind: always}", *fates]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/trace_replay.yaml", overrides)
    assert planned and all(planned)
    assert (fast.ledger.outcome == "dropped").any() == bool(fates)
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


def test_round_plan_equals_event_by_event_for_identical_clients_in_simpys_order(
    monkeypatch, scenario
):
    """Every download, compute and upload ends at one instant with the others of its kind:
    rows in the order SimPy completes them (downloads by position, the rest as their
    predecessors completed). Uploads that finish together are replayed step by step: to the
    bit."""
    sc = scenario(radio={"mode": "direct"})
    fast, slow, planned = _both_ways(monkeypatch, sc)
    assert all(planned)
    ledger = fast.ledger[fast.ledger.kind != "evaluate"]
    assert ledger.groupby(["round", "kind"], observed=True).end_s.nunique().eq(1).all()
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


@pytest.mark.parametrize(
    "overrides",
    [
        ["clients.battery={capacity_j: 50000}", "clients.slowdown_probability=0.3"],
        [
            "clients.battery={capacity_j: 50000}",
            "clients.availability={kind: diurnal, mean_online: 0.5}",
        ],
    ],
    ids=["battery-slowdown", "battery-diurnal"],
)
def test_what_can_stop_a_member_goes_event_by_event(monkeypatch, overrides):
    """A battery can stop a member at an instant the trip's own arithmetic does not give (its
    cut an estimate that the others' rows move): such rounds go event by event, with or
    without availability, dropouts and slowdowns."""
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*QUICK, *overrides])
    assert not any(planned)
    assert fast.ledger.equals(slow.ledger)  # the same path


def _models(monkeypatch):
    """The models every run published from now on, in order (the at-once run's, then the
    event-by-event one's, with `_both_ways`)."""
    models = []
    publish = World.publish

    def keeping(world, progress):
        models.append(progress.model.clone())
        return publish(world, progress)

    monkeypatch.setattr(World, "publish", keeping)
    return models


SLOWDOWNS = ["clients.slowdown_probability=0.3", "clients.slowdown_factor=3"]
# a narrow downlink, so a dropout's point falls in downloads too (by their time alone)
DROPOUTS = ["clients.dropout_probability=0.6", "radio.downlink.bandwidth_hz=2e6"]


@pytest.mark.parametrize(
    "overrides",
    [
        SLOWDOWNS,
        DROPOUTS,
        [*SLOWDOWNS, *DROPOUTS],
        [*SLOWDOWNS, *DROPOUTS, "radio.downlink.sharing=shared"],
        [*SLOWDOWNS, *DROPOUTS, "radio.uplink.sharing=dedicated", "radio.rayleigh_fading=true"],
        # fewer dropouts: enough deliver for over-selection to cancel the rest
        [
            *SLOWDOWNS,
            *DROPOUTS,
            "clients.dropout_probability=0.2",
            "algorithm.cohort.over_selection=1.5",
        ],
        [
            *SLOWDOWNS,
            *DROPOUTS,
            "algorithm.cohort.deadline_s=0.1",
            "radio.uplink.sharing=dedicated",
        ],
        [
            *SLOWDOWNS,
            *DROPOUTS,
            "algorithm.cohort.deadline_s=0.1",
            "algorithm.cohort.over_selection=1.5",
            "radio.downlink.sharing=shared",
        ],
        # 140 transfers on a stopped band of arrays: downloads, computes and uploads cut
        [
            *WIDE,
            *SLOWDOWNS,
            "clients.dropout_probability=0.3",
            "algorithm.cohort.deadline_s=0.05",
            "algorithm.cohort.over_selection=1.4",
            "radio.downlink.sharing=shared",
        ],
    ],
    ids=[
        "slowdowns",
        "dropouts",
        "both",
        "both-shared-down",
        "both-dedicated-up-fading",
        "both-over-selection",
        "both-deadline-dedicated",
        "both-deadline-over-shared-down",
        "wide-both-deadline-over-shared-down",
    ],
)
def test_round_plan_equals_event_by_event_under_drawn_fates_to_the_bit(monkeypatch, overrides):
    """Slowdowns and dropouts drawn when a trip starts (availability always, no battery):
    the rounds go at once, with the event path's rows, records and models, to the bit."""
    models = _models(monkeypatch)
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*QUICK, *overrides])
    assert planned and all(planned)  # the spy: every round planned at once
    outcomes = set(fast.ledger.outcome)
    assert ("dropped" in outcomes) == ("clients.dropout_probability" in str(overrides))
    server_stops = "deadline_s" in str(overrides) or "over_selection" in str(overrides)
    assert server_stops == bool(outcomes & {"deadline", "cancelled"})
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)
    half = len(models) // 2
    assert half and all(a.equal(b) for a, b in zip(models[:half], models[half:], strict=True))


def _trips(ledger):
    """Each member's rows of a round: (round, node) -> [(kind, outcome, bits, flops)]."""
    rows = ledger[ledger.kind != "evaluate"]
    trips = {}
    for r in rows.itertuples():
        trips.setdefault((r.round, r.node), []).append((r.kind, r.outcome, r.bits, r.flops))
    return trips


def test_a_dropout_at_once_ends_its_phase_with_its_share_and_nothing_after(monkeypatch):
    """Dropped in its download, compute or upload: that job runs its share of the bits or
    FLOPs (less than the full job's) and ends `dropped`; no later phase starts; the member
    delivers nothing (at once as event by event, checked above)."""
    fast, _, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*QUICK, *DROPOUTS])
    assert all(planned)
    full = {"download": 0.0, "compute": 0.0, "upload": 0.0}
    trips = _trips(fast.ledger)
    for jobs in trips.values():
        for kind, outcome, bits, flops in jobs:
            if outcome == "ok":
                full[kind] = max(full[kind], bits + flops)
    phases = ["download", "compute", "upload"]
    dropped_in = set()
    for jobs in trips.values():
        outcomes = [outcome for _, outcome, _, _ in jobs]
        if "dropped" not in outcomes:
            assert [kind for kind, *_ in jobs] == phases and set(outcomes) == {"ok"}
            continue
        kind, outcome, bits, flops = jobs[-1]  # the last job it started is the dropped one
        assert outcome == "dropped" and outcomes.count("dropped") == 1
        assert [k for k, *_ in jobs] == phases[: phases.index(kind) + 1]
        assert 0 < bits + flops < full[kind]
        dropped_in.add(kind)
    assert dropped_in == set(phases)  # a dropped download, compute and upload, at once


def test_a_slowdown_at_once_stretches_its_compute_for_the_same_joules(monkeypatch):
    """A slowed member's compute lasts `slowdown_factor` times as long as the same member's
    unslowed compute (the same draws of everything else), for the same joules and FLOPs."""
    planned = _plans(monkeypatch)
    plain = flnet.run("scenarios/quickstart.yaml", QUICK, write=False).ledger
    slowed = flnet.run("scenarios/quickstart.yaml", [*QUICK, *SLOWDOWNS], write=False).ledger
    assert len(planned) == 8 and all(planned)
    key = ["round", "node"]
    a = plain[plain.kind == "compute"].set_index(key)
    b = slowed[slowed.kind == "compute"].set_index(key).loc[a.index]
    ratio = ((b.end_s - b.start_s) / (a.end_s - a.start_s)).to_numpy()
    slowed_down = np.isclose(ratio, 3.0, rtol=1e-12)
    assert slowed_down.any() and (slowed_down | np.isclose(ratio, 1.0, rtol=1e-12)).all()
    assert b.energy_j.equals(a.energy_j) and b.flops.equals(a.flops)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.cohort.over_selection=1.5"],
        ["algorithm.cohort.deadline_s=0.05"],
        ["algorithm.cohort.deadline_s=0.05", "algorithm.cohort.over_selection=1.5"],
        ["algorithm.cohort.deadline_s=0.05", "radio.downlink.sharing=shared"],
        ["algorithm.cohort.over_selection=1.5", "radio.uplink.sharing=dedicated"],
    ],
    ids=["over-selection", "deadline", "both", "deadline-shared-down", "over-dedicated-up"],
)
def test_round_plan_equals_event_by_event_at_the_servers_own_stops_to_the_bit(
    monkeypatch, overrides
):
    """Over-selection cancels the late, a deadline cuts them: their jobs charged up to the stop
    (a stopped band replayed step by step), the same rows and instants as event by event."""
    quick = [*QUICK, "run.rounds=6", "algorithm.cohort.clients_per_round=10"]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*quick, *overrides])
    assert all(planned)
    ledger = fast.ledger[fast.ledger.kind != "evaluate"]
    stopped = ledger.outcome.isin(["cancelled", "deadline"])
    assert stopped.any() and not stopped.all()
    cut = ledger[stopped]
    charged = cut[cut.kind == "compute"].flops.gt(0).all() and cut.energy_j.gt(0).all()
    assert charged  # each stopped job charged up to the stop, not nothing
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.cohort.over_selection=1.4"],
        ["algorithm.cohort.deadline_s=0.3", "radio.rayleigh_fading=true"],
        # a deadline that cuts downloads, computes and uploads on shared bands, mid-transfer
        [
            "algorithm.cohort.deadline_s=0.05",
            "algorithm.cohort.over_selection=1.4",
            "radio.downlink.sharing=shared",
        ],
        # ten of 140 delivered while most downloads are still under way
        [
            "algorithm.cohort.clients_per_round=10",
            "algorithm.cohort.over_selection=14",
            "radio.downlink.sharing=shared",
        ],
    ],
    ids=["over-selection", "deadline-fading", "both-shared-down", "few-kept-shared-down"],
)
def test_round_plan_equals_event_by_event_on_a_stopped_band_of_over_128_transfers(
    monkeypatch, overrides
):
    """140 transfers on a SharedBandArrays, stopped by over-selection, a deadline or both:
    replayed by the band's own (array) steps, the same rows, sent bits, joules and instants
    as event by event."""
    assert int(WIDE[2].split("=")[1]) > ARRAYS_ABOVE_USERS
    replayed = []
    replay = SharedBand.schedule_alone

    def spying(band, *args, **kwargs):
        replayed.append(type(band))
        return replay(band, *args, **kwargs)

    monkeypatch.setattr(SharedBand, "schedule_alone", spying)
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", [*WIDE, *overrides])
    assert planned and all(planned)
    assert SharedBandArrays in replayed
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)
    ledger = fast.ledger[fast.ledger.kind != "evaluate"]
    stopped = ledger[ledger.outcome.isin(["cancelled", "deadline"])]
    assert len(stopped) and (ledger.outcome == "ok").any()
    transfers = stopped[stopped.kind.isin(["download", "upload"])]
    full_bits = ledger[ledger.outcome == "ok"].groupby("kind", observed=True).bits.max()
    part = transfers.bits.lt(transfers.kind.map(full_bits).astype(float)) & transfers.bits.gt(0)
    assert part.any()  # stopped mid-transfer: some bits sent, not all


def test_round_plan_equals_event_by_event_within_tolerance_on_a_solved_band(monkeypatch):
    """Nobody stopped and more than `replays_up_to` transfers: the shared bands are solved at
    once (dropped transfers with their shares of the bits), within COST_RTOL."""
    overrides = [*WIDE, *SLOWDOWNS, "clients.dropout_probability=0.3"]
    overrides += ["radio.downlink.sharing=shared"]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", overrides)
    assert planned and all(planned)
    assert (fast.ledger.outcome == "dropped").any()
    assert_ledgers_close(fast.ledger, slow.ledger)
    assert_records_close(fast.records, slow.records, eval_rows=1)


# ---------------------------------------------------------------- sessions and judges at once

# rounds of about a second (narrow bands, slow CPUs) against sessions of 3 s on average, so
# sessions end mid-round (check during) and uploads end offline (check at_completion)
SESSIONS = [
    "run.rounds=6",
    "clients.count=40",
    "algorithm.cohort.clients_per_round=8",
    "radio.uplink.bandwidth_hz=1e5",
    "radio.downlink.bandwidth_hz=2e5",
    "clients.cpu_hz.median=2e7",
]


def _diurnal(check):
    model = "kind: diurnal, session_mean_s: 3, mean_online: 0.5"
    return f"clients.availability={{{model}, check: {check}}}"


def _bernoulli(check):
    return f"clients.availability={{kind: bernoulli, p: 0.7, check: {check}}}"


FATES = ["clients.dropout_probability=0.3", *SLOWDOWNS]
STOPS = ["algorithm.cohort.over_selection=1.5", "algorithm.cohort.deadline_s=0.8"]
DEDICATED = ["radio.uplink.sharing=dedicated"]


@pytest.mark.parametrize(
    "overrides",
    [
        [_diurnal("during"), *DEDICATED],
        [_diurnal("during"), *DEDICATED, *FATES, *STOPS],
        [_diurnal("at_completion")],  # the uplink shared
        [_diurnal("at_completion"), *DEDICATED, *FATES, *STOPS],
        [_diurnal("at_completion"), *FATES, *STOPS, "radio.downlink.sharing=shared"],
        [_bernoulli("during"), *FATES, *STOPS, "radio.downlink.sharing=shared"],
        [_bernoulli("at_completion"), *FATES, "radio.rayleigh_fading=true"],
    ],
    ids=[
        "diurnal-during",
        "diurnal-during-fates-stops",
        "diurnal-at-completion-shared-up",
        "diurnal-at-completion-fates-stops",
        "diurnal-at-completion-fates-stops-shared-down",
        "bernoulli-during-fates-stops-shared",
        "bernoulli-at-completion-fates-fading",
    ],
)
def test_round_plan_equals_event_by_event_under_sessions_to_the_bit(monkeypatch, overrides):
    """Availability with either check (no battery): a session's end (during) is known when a
    trip starts and an upload's judge (at_completion) asks the model about the upload's end
    alone, so every round goes at once on dedicated bands (and on shared ones where nobody is
    cut mid-transfer): the event path's rows, records and models, to the bit."""
    models = _models(monkeypatch)
    fast, slow, planned = _both_ways(
        monkeypatch, "scenarios/quickstart.yaml", [*SESSIONS, *overrides]
    )
    assert planned and all(planned)  # the spy: every round planned at once
    outcomes = set(fast.ledger.outcome)
    if "diurnal" in str(overrides):  # sessions of seconds: some work cut, or uploads lost
        assert ("interrupted" if "during" in str(overrides) else "lost") in outcomes
    # each check stops work its own way only
    assert ("lost" if "during" in str(overrides) else "interrupted") not in outcomes
    assert ("dropped" in outcomes) == ("dropout" in str(overrides))
    if "over_selection" in str(overrides):
        assert outcomes & {"cancelled", "deadline"}
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)
    half = len(models) // 2
    assert half and all(a.equal(b) for a, b in zip(models[:half], models[half:], strict=True))


def _model_of(result):
    sc = result.scenario
    return availability_mod.build(sc.clients.availability, sc.seed)


def _trip_rows(result):
    """The rows of each member's trip: (round, node) -> rows (ledger order)."""
    ledger = result.ledger[result.ledger.kind != "evaluate"]
    return {key: rows for key, rows in ledger.groupby(["round", "node"], observed=True, sort=False)}


def test_a_session_ending_mid_trip_at_once_cuts_its_job_there(monkeypatch):
    """Check during, at once: a member whose session ends before its trip is over has the job
    under way then charged up to that instant (`online_until` at its trip's start), ended
    `interrupted`, and starts nothing after it; the others finish within their sessions."""
    overrides = [*SESSIONS, _diurnal("during"), *DEDICATED, "run.rounds=10"]
    planned = _plans(monkeypatch)
    result = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    assert planned and all(planned)
    model, cut_in = _model_of(result), set()
    for (rnd, node), rows in _trip_rows(result).items():
        until_s = model.online_until(np.asarray([node]), rows.start_s.iloc[0], int(rnd))[0]
        if "interrupted" in set(rows.outcome):
            last = rows.iloc[-1]
            assert last.outcome == "interrupted" and last.end_s == until_s
            assert last.energy_j > 0 and (rows.outcome.iloc[:-1] == "ok").all()
            cut_in.add(last.kind)
        else:
            assert rows.end_s.max() < until_s
    assert cut_in >= {"compute", "upload"}  # cut mid-compute and mid-upload


def test_an_upload_ending_offline_at_once_is_lost(monkeypatch):
    """Check at_completion, at once: each upload's outcome is the availability model's answer
    at its end (lost: offline then, its joules and bits all charged); a lost member delivers
    nothing."""
    overrides = [*SESSIONS, _diurnal("at_completion"), "run.rounds=10"]
    planned = _plans(monkeypatch)
    result = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    assert planned and all(planned)
    model = _model_of(result)
    uploads = result.ledger[result.ledger.kind == "upload"]
    online = [
        model.online(np.asarray([r.node]), r.end_s, int(r.round))[0] for r in uploads.itertuples()
    ]
    assert (uploads.outcome == "lost").to_numpy().tolist() == [not o for o in online]
    assert (uploads.outcome == "lost").any() and (uploads.outcome == "ok").any()
    assert uploads.bits.nunique() == 1  # a lost upload sent all its bits


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        [*FATES, *STOPS, "radio.downlink.sharing=shared"],
        [*WIDE, "algorithm.cohort.clients_per_round=40", "radio.downlink.sharing=shared"],
    ],
    ids=["shared-up", "fates-stops-shared-down", "wide-shared-down"],
)
def test_round_plan_equals_event_by_event_with_a_session_ending_mid_transfer(
    monkeypatch, overrides
):
    """A member cut mid-transfer on a shared band leaves it, and the others' rates change from
    then on: the band's replay cancels it at its session's end (`schedule_alone`'s
    `cancel_s`), so such rounds go at once too, with the event path's rows (its bits sent up
    to the cut), records and instants, to the bit (past 128 users: the arrays' steps)."""
    overrides = [*SESSIONS, _diurnal("during"), "run.rounds=8", *overrides]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", overrides)
    assert planned and all(planned)
    transfers = fast.ledger[fast.ledger.kind.isin(["download", "upload"])]
    cut = transfers[transfers.outcome == "interrupted"]
    full_bits = transfers[transfers.outcome == "ok"].groupby("kind", observed=True).bits.max()
    assert (cut.kind == "upload").any()
    assert (cut.bits.gt(0) & cut.bits.lt(cut.kind.map(full_bits).astype(float))).all()
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


@pytest.mark.parametrize(
    "scenario_path, overrides",
    [
        ("scenarios/diurnal.yaml", ["run.rounds=20"]),
        ("scenarios/diurnal.yaml", ["run.rounds=20", "clients.availability.check=at_completion"]),
        ("scenarios/trace_replay.yaml", ["run.rounds=6"]),  # a session cut mid-trip
        (
            "scenarios/trace_replay.yaml",
            ["run.rounds=6", *FATES, *STOPS, "algorithm.cohort.deadline_s=6"],
        ),
    ],
    ids=["diurnal", "diurnal-at-completion", "trace", "trace-fates-stops"],
)
def test_round_plan_equals_event_by_event_on_the_availability_scenarios(
    monkeypatch, scenario_path, overrides
):
    """scenarios/diurnal.yaml (hour-long sessions, over-selection, a deadline, dropouts and
    slowdowns, a shared uplink) and a replayed availability trace: every round at once, the
    event path's ledger and records to the bit."""
    fast, slow, planned = _both_ways(monkeypatch, scenario_path, overrides)
    assert planned and all(planned)
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


@pytest.mark.parametrize("nudge", [0, 1], ids=["tie", "apart"])
def test_a_session_ending_on_a_downloads_instant_goes_event_by_event(monkeypatch, nudge):
    """A member's session ending at the very instant its download ends: SimPy's queue order
    decides which comes first (the download's timer: a compute starts and is cut at once), so
    the round goes event by event; `nudge`d one ulp later, the same round goes at once, with
    the event path's ledger."""
    drawn_fate = World._drawn_fate

    def ending_on_its_download(world, client, *args, **kwargs):
        fate = drawn_fate(world, client, *args, **kwargs)
        if client % 3:
            return fate
        q = world.network.star(np.asarray([client]), down=True)[0][0]
        down_s = world.env.now + args[3][0] / world.network.downlink.rate_bps(q)  # work[0]
        return fate._replace(cut_s=math.nextafter(down_s, math.inf) if nudge else down_s)

    monkeypatch.setattr(World, "_drawn_fate", ending_on_its_download)
    overrides = [*QUICK, "clients.availability={kind: diurnal, mean_online: 0.5}"]
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", overrides)
    assert planned and (all(planned) if nudge else not any(planned))
    cut = fast.ledger[fast.ledger.outcome == "interrupted"]
    assert len(cut) and (cut.kind == "compute").all() and (cut.node % 3 == 0).all()
    assert fast.ledger.equals(slow.ledger)


# ---------------------------------------------------------------- sure fates, the array path


def _sure_or_not(monkeypatch):
    """Whether each round was planned at once, and with every fate SURE (the plan's branch
    that draws nothing per member)."""
    seen = []
    plan = at_once.plan

    def spying(network, costs, now_s, sure, trips):
        result = plan(network, costs, now_s, sure, trips)
        seen.append((result is not None, sure))
        return result

    monkeypatch.setattr(at_once, "plan", spying)
    return seen


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # the uplink shared, solved at once
        ["radio.rayleigh_fading=true", "algorithm.cohort.deadline_s=0.05"],
        ["algorithm.cohort.over_selection=1.5", "radio.downlink.sharing=shared"],
        ["algorithm.cohort.deadline_s=0.05", "radio.uplink.sharing=dedicated"],
        [*WIDE, "algorithm.cohort.deadline_s=0.05", "algorithm.cohort.over_selection=1.4"],
    ],
    ids=["solved-shared-up", "fading-deadline", "over-shared-down", "deadline-dedicated", "wide"],
)
def test_sure_fates_plan_the_bits_of_drawn_fates_that_change_nothing(monkeypatch, overrides):
    """Every fate SURE (nothing drawn: the members' arrays as they come) against fates drawn
    one per member that change nothing (a dropout so unlikely that nobody drops, no
    slowdown: the per-member branch): the same rows, instants, joules and records, to the
    bit, on solved, replayed and stopped bands."""
    quick = [*QUICK, "algorithm.cohort.clients_per_round=12", *overrides]
    seen = _sure_or_not(monkeypatch)
    sure = flnet.run("scenarios/quickstart.yaml", quick, write=False)
    assert seen and seen == [(True, True)] * len(seen)
    seen.clear()
    drawn = flnet.run(
        "scenarios/quickstart.yaml", [*quick, "clients.dropout_probability=1e-300"], write=False
    )
    assert seen and seen == [(True, False)] * len(seen)
    assert sure.ledger.equals(drawn.ledger)
    assert sure.records.equals(drawn.records)
    stops = "deadline_s" in str(overrides) or "over_selection" in str(overrides)
    assert stops == bool(set(sure.ledger.outcome) & {"deadline", "cancelled"})


@pytest.mark.parametrize("n", [1, 7, 100])
def test_the_solve_calls_lapack_as_scipys_solve_triangular_does(n):
    """`solve_alone`'s triangular solve (LAPACK's trtrs without scipy's checks) gives
    `scipy.linalg.solve_triangular`'s bits (the same LAPACK call) for the C-order matrix
    `solve_alone` gathers, reading only its lower triangle."""
    from scipy.linalg import solve_triangular

    from flnet.sim.channel import _solve_lower

    rng = np.random.default_rng(n)
    rates = rng.uniform(1e5, 1e7, (n, n))
    order = rng.permutation(n)
    b = rng.uniform(1e5, 1e6, n)
    a = rates[:, order].T  # as solve_alone gathers it
    assert a.flags.c_contiguous
    got, info = _solve_lower(a, b)
    assert info == 0
    assert np.array_equal(got, solve_triangular(a, b, lower=True, check_finite=False))
    upper_changed = a + np.triu(np.full((n, n), 7.0), 1)
    assert np.array_equal(_solve_lower(upper_changed, b)[0], got)


def _fading_draws(monkeypatch):
    """Every link a keyed fading draw is asked for, in order (a spy on `Costs.fading`)."""
    asked = []
    fading = Costs.fading

    def spy(self, src, dst, tag, key):
        asked.append((tag.step, src, dst, key))
        return fading(self, src, dst, tag, key)

    monkeypatch.setattr(Costs, "fading", spy)
    return asked


def test_a_plan_given_up_after_its_fading_draws_leaves_the_event_path_its_draws(monkeypatch):
    """A plan that returns None once it has drawn its members' fading (here: SimPy's order
    would decide) leaves the draws' counts as it found them, so the event path that takes
    over draws the values a run event by event draws."""
    overrides = [*QUICK, "radio.rayleigh_fading=true"]
    monkeypatch.setattr(at_once, "_ties", lambda end_s, kind: True)
    fast, slow, planned = _both_ways(monkeypatch, "scenarios/quickstart.yaml", overrides)
    assert planned and not any(planned)
    assert fast.ledger.equals(slow.ledger)
    assert fast.records.equals(slow.records)


def test_a_plan_draws_fading_only_for_the_transfers_that_start(monkeypatch):
    """A deadline that cuts downloads on a shared band with fading: the plan asks for the
    fading of the same links, in the same order, as the events do (no upload's for a member
    whose download never ended)."""
    overrides = [
        *QUICK,
        "radio.rayleigh_fading=true",
        "radio.downlink.sharing=shared",
        "algorithm.cohort.deadline_s=0.05",
    ]
    planned = _plans(monkeypatch)
    asked = _fading_draws(monkeypatch)
    fast = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    at_once_asked = list(asked)
    assert planned and all(planned)
    asked.clear()
    monkeypatch.setattr(at_once.AtOnce, "plan", lambda self, trips: None)
    slow = flnet.run("scenarios/quickstart.yaml", overrides, write=False)
    cut = fast.ledger[(fast.ledger.kind == "download") & (fast.ledger.outcome == "deadline")]
    assert len(cut)  # some downloads never ended
    assert sorted(at_once_asked) == sorted(asked)
    assert fast.ledger.equals(slow.ledger)
