"""The patterns against hand computation: a gossip exchange on a 3-node path and a stream of
three clients with concurrency 2 and a buffer of 2 (FedBuff's shape)."""

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import pytest

from flnet.sim.channel import Channel
from flnet.sim.ledger import SERVER
from flnet.sim.network import Link
from flnet.sim.patterns import Packet, Work, exchange, stream
from flnet.sim.world import Progress, World

KAPPA, FPC, FLOPS = 1e-28, 4.0, 4e9  # 1e9 cycles a piece of work
TX_W, RX_W = 0.2, 0.05


def world_of(scenario, cpu_hz, **radio):
    sc = scenario(
        clients={
            "count": len(cpu_hz),
            "kappa": KAPPA,
            "flops_per_cycle": FPC,
            "cpu_hz": {"kind": "per_client", "values": cpu_hz},
        },
        radio={"mode": "direct", **radio},
        # D2D settings are for gossip; the World is the same for a round trip's links
        algorithm={"name": "dfedavg", "topology": {"kind": "ring"}}
        if "d2d" in radio
        else {"name": "fedavg", "cohort": {"clients_per_round": 1}},
    )
    return World(sc.clients, sc.radio, sc.seed)


# ---------------------------------------------------------------- exchange

# a path 0 - 1 - 2; each directed link's SNR over 1 MHz, so 1 Mbit takes 1 / log2(1 + snr) s
SNR = {(0, 1): 3.0, (1, 0): 1.0, (1, 2): 15.0, (2, 1): 7.0}
SECONDS = {(0, 1): 0.5, (1, 0): 1.0, (1, 2): 0.25, (2, 1): 1 / 3}
CPU = [2e9, 4e9, 8e9]  # 1e9 cycles: 0.5, 0.25, 0.125 s; kappa cycles f^2: 0.4, 1.6, 6.4 J


def gossip_world(scenario):
    world = world_of(scenario, CPU)
    band = Channel(world.env, 1e6)  # dedicated: every transfer has the whole band
    for (a, b), snr in SNR.items():
        world.network.add_link(a, b, Link(band, snr * 1e6, TX_W, "d2d", rx_power_w=RX_W))
    return world


def run_exchange(world, bits=1e6, **kwargs):
    edges = np.array(list(SNR))
    proc = world.env.process(
        exchange(world, np.arange(3), edges, Packet(None, bits), np.full(3, FLOPS), tag=1, **kwargs)
    )
    world.env.run(until=proc)
    return proc.value, world.ledger.frame()


def joules_by_node(led):
    return led.groupby("node", observed=True).energy_j.sum().reindex(range(3)).to_numpy()


def test_exchange_on_a_path_finishes_and_charges_as_computed_by_hand(scenario):
    done, led = run_exchange(gossip_world(scenario))
    # node 0 waits for 1 -> 0 (1 s); node 1 for 0 -> 1 (0.5 s); node 2 for its compute/1 -> 2
    assert done.end_s == pytest.approx(1.0) and done.arrived.all()
    sent = led[led.kind == "d2d"]
    assert dict(zip(zip(sent.node, sent.peer), sent.end_s)) == pytest.approx(SECONDS)
    assert (sent.bits == 1e6).all() and (led[led.kind == "d2d_rx"].bits == 0).all()
    s = SECONDS
    by_hand = [
        0.4 + TX_W * s[0, 1] + RX_W * s[1, 0],
        1.6 + TX_W * (s[1, 0] + s[1, 2]) + RX_W * (s[0, 1] + s[2, 1]),
        6.4 + TX_W * s[2, 1] + RX_W * s[1, 2],
    ]
    assert joules_by_node(led) == pytest.approx(by_hand, rel=1e-12)


def test_exchange_timeout_stops_the_late_message_and_charges_both_ends(scenario):
    done, led = run_exchange(gossip_world(scenario), timeout_s=0.75)
    assert done.end_s == pytest.approx(0.75)
    assert list(done.arrived) == [True, False, True, True]  # 1 -> 0 needs 1 s
    late = led[(led.node == 1) & (led.peer == 0) & (led.kind == "d2d")].iloc[0]
    assert late.outcome == "timeout" and late.bits == pytest.approx(0.75e6)
    s = SECONDS
    by_hand = [
        0.4 + TX_W * s[0, 1] + RX_W * 0.75,
        1.6 + TX_W * (0.75 + s[1, 2]) + RX_W * (s[0, 1] + s[2, 1]),
        6.4 + TX_W * s[2, 1] + RX_W * s[1, 2],
    ]
    assert joules_by_node(led) == pytest.approx(by_hand, rel=1e-12)


def test_exchange_after_work_sends_once_each_node_has_computed(scenario):
    done, led = run_exchange(gossip_world(scenario), send_after_work=True)
    comp = {0: 0.5, 1: 0.25, 2: 0.125}
    sent = led[led.kind == "d2d"]
    starts = dict(zip(zip(sent.node, sent.peer), sent.start_s))
    assert starts == pytest.approx({(a, b): comp[a] for a, b in SNR})
    assert done.end_s == pytest.approx(max(comp[a] + SECONDS[a, b] for a, b in SNR))


def test_d2d_links_are_drawn_per_pair_reciprocal_whatever_the_order_of_first_use(scenario):
    a = world_of(scenario, CPU, d2d={"snr_db": {"kind": "uniform", "low": 0, "high": 30}})
    b = world_of(scenario, CPU, d2d={"snr_db": {"kind": "uniform", "low": 0, "high": 30}})
    pairs = [(0, 1), (1, 0), (2, 1), (1, 2)]
    first = [a.link(*p).snr_hz for p in pairs]
    second = [b.link(*p).snr_hz for p in reversed(pairs)][::-1]
    assert first == second and len(set(first)) == 2  # one draw per pair, both directions
    assert first[0] == first[1] and first[2] == first[3]


# ---------------------------------------------------------------- stream

# 1 Mbit each way at SNR 3 over 1 MHz: 0.5 s down, 0.5 s up; compute 2, 0.5 and 1 s
STREAM_CPU = [0.5e9, 2e9, 1e9]


class Buffered:
    """FedBuff's server on a scalar model, with a 'training' that gives y = x / 2 + (k + 1):
    the server adds the mean of the first K deltas."""

    def __init__(self, k):
        self.x, self.version, self.k = 0.0, 0, k
        self.buffer, self.arrivals, self.commits = [], [], []

    def work(self, clients, counts):
        return [self.one(c, n) for c, n in zip(clients.tolist(), counts.tolist())]

    def one(self, client, count):
        delta = self.x / 2 + (client + 1) - self.x
        return Work(Packet(self.x, 1e6), FLOPS, Packet(delta, 1e6), Committed(self, client))

    def receive(self, arrival):
        self.arrivals.append(arrival)
        self.buffer.append(arrival.payload)
        if len(self.buffer) < self.k:
            return None
        self.x += sum(self.buffer) / len(self.buffer)
        self.buffer, self.version = [], self.version + 1
        return Progress(self.version, self.x, None, pattern="stream")


class Committed:
    def __init__(self, server, client):
        self.server, self.client = server, client

    def commit(self, positions):
        assert list(positions) == [0]
        self.server.commits.append(self.client)


class StopAt:
    def __init__(self, steps):
        self.steps, self.seen = steps, []

    def on_progress(self, world, progress, stopping):
        self.seen.append((progress.step, progress.sim_time_s, progress.model))
        return "rounds" if progress.step >= self.steps else None


def fewest_launches_then_lowest_id(launched):
    def pick(launches, busy):
        client = min((c for c in range(3) if c not in busy), key=lambda c: (launched[c], c))
        launched[client] += 1
        return client

    return pick


def test_stream_aggregates_at_the_hand_computed_times_to_the_hand_computed_model(scenario):
    world = world_of(
        scenario,
        STREAM_CPU,
        uplink_snr_db=10 * math.log10(3),
        downlink_snr_db=10 * math.log10(3),
        uplink={"bandwidth_hz": 1e6, "sharing": "dedicated"},
        downlink={"bandwidth_hz": 1e6, "sharing": "dedicated"},
    )
    server, stop = Buffered(k=2), StopAt(2)
    world.observers = [stop]
    proc = world.env.process(
        stream(
            world,
            server,
            np.arange(3),
            concurrency=2,
            pick=fewest_launches_then_lowest_id([0, 0, 0]),
        )
    )
    world.env.run(until=proc)
    # t=0: clients 0 (3 s) and 1 (1.5 s) start from x0 = 0; 1.5: 1 arrives, 2 (2 s) starts;
    # 3.0: 0 arrives -> x1 = (2 + 1) / 2 = 1.5, 0 starts again; 3.5: 2 arrives (stale by 1),
    # 1 starts from x1; 5.0: 1 arrives -> x2 = x1 + (3 + (2 - 1.5 / 2)) / 2 = 3.625
    assert [s for s, _, _ in stop.seen] == [1, 2]
    assert [t for _, t, _ in stop.seen] == pytest.approx([3.0, 5.0])
    assert [x for *_, x in stop.seen] == [1.5, 3.625]
    got = [(a.client, a.count, a.version, a.staleness) for a in server.arrivals]
    assert got == [(1, 0, 0, 0), (0, 0, 0, 0), (2, 0, 0, 1), (1, 1, 1, 0)]
    assert world.events == 4
    assert server.commits == [1, 0, 2, 1]  # computes end at 1.0, 2.5, 3.0, 4.5 (0's 2nd: 5.5)
    under_way = proc.value
    assert [(w.client, w.count) for w in under_way] == [(0, 1)]
    led = world.ledger.frame()
    assert (led.end_s <= 5.0 + 1e-12).all()  # work under way at the stop is not charged
    assert set(led.pattern) == {"stream"}
    up = led[led.kind == "upload"]
    assert list(up.node) == [1, 0, 2, 1] and (up.peer == SERVER).all()


def test_a_stream_over_every_registered_client_allocates_nothing_per_client(scenario):
    """FedBuff and FedAsync stream over `range(N)`: the pool is the range itself, never an [N]
    array or list (10,000,000 ids would be hundreds of MB), and the run is the same."""
    import tracemalloc

    runs = []
    for clients in (np.arange(3), range(10_000_000)):
        world = world_of(scenario, STREAM_CPU)
        server, stop = Buffered(k=2), StopAt(2)
        world.observers = [stop]
        pick = fewest_launches_then_lowest_id([0, 0, 0])
        tracemalloc.start()
        world.env.run(
            until=world.env.process(stream(world, server, clients, concurrency=2, pick=pick))
        )
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        runs.append([(a.client, a.count, a.version) for a in server.arrivals])
    assert runs[0] == runs[1]
    assert peak < 2_000_000, peak


# ---------------------------------------------------------------- stream: exact resume


class BufferedState:
    """FedBuff-like server whose state (version, x, buffer, flight) is a NamedTuple."""

    def __init__(self, k, version=0, x=0.0, buffer=()):
        self.k, self.version, self.x, self.buffer = k, version, x, list(buffer)
        self.published = []

    def work(self, clients, counts):
        return [self.one(c, n) for c, n in zip(clients.tolist(), counts.tolist())]

    def one(self, client, count):
        # 'training' keyed by (client, count), from the current model
        delta = (client + 1) * 0.1 + count * 0.01 - self.x / 4
        return Work(Packet(self.x, 2e6), 1e9 * (1 + client % 3), Packet(delta, 1e6 + client))

    def receive(self, arrival):
        self.buffer.append(arrival.payload * (1 + arrival.staleness) ** -0.5)
        if len(self.buffer) < self.k:
            return None
        self.x += sum(self.buffer) / len(self.buffer)
        self.buffer, self.version = [], self.version + 1
        state = FlightState(self.version, self.x, list(self.buffer), None)
        self.published.append((self.version, self.x))
        return Progress(self.version, self.x, state, pattern="stream")


class FlightState(NamedTuple):
    version: int
    x: float
    buffer: list
    flight: Any


class Keep:
    def __init__(self, steps):
        self.steps, self.kept = steps, None

    def on_progress(self, world, progress, stopping):
        if progress.step == self.steps:
            self.kept = (progress.sim_time_s, world.events, progress.state)
            return "rounds"
        return None


@pytest.mark.parametrize("users", [8, 200])  # shared bands as floats, and as arrays
def test_stream_resumes_from_a_server_update_to_the_bit(scenario, tmp_path, monkeypatch, users):
    import torch

    from flnet import checkpoint

    def fresh(start_s=0.0):
        sc = scenario(
            clients={"count": users, "cpu_hz": {"kind": "lognormal", "median": 1e9, "sigma": 0.5}},
            radio={"rayleigh_fading": True, "downlink": {"bandwidth_hz": 5e6, "sharing": "shared"}},
            algorithm={"name": "fedavg", "cohort": {"clients_per_round": 1}},
        )
        return World(sc.clients, sc.radio, sc.seed, start_time_s=start_s)

    whole, server = fresh(), BufferedState(k=3)
    whole.observers = [Keep(12)]
    whole.env.run(until=whole.env.process(stream(whole, server, np.arange(users), concurrency=5)))

    first, cut_server, keep = fresh(), BufferedState(k=3), Keep(5)
    first.observers = [keep]
    first.env.run(
        until=first.env.process(stream(first, cut_server, np.arange(users), concurrency=5))
    )
    time_s, events, state = keep.kept
    assert state.flight["jobs"]["bands"]  # transfers were under way on a shared band
    path = tmp_path / "state.pt"  # through a checkpoint file, as a run does
    torch.save(checkpoint._plain(state._asdict()), path)
    state = FlightState(**torch.load(path, weights_only=True))
    rows, size = first.ledger.flush(tmp_path / "journal.csv")

    second = fresh(start_s=time_s)
    second.ledger.load_journal(tmp_path / "journal.csv", rows, size)
    second.events = events
    resumed = BufferedState(3, state.version, state.x, state.buffer)
    second.observers = [Keep(12)]
    second.env.run(
        until=second.env.process(
            stream(second, resumed, np.arange(users), concurrency=5, resume=state.flight)
        )
    )
    assert resumed.published == server.published[5:]  # bit for bit
    assert second.now == whole.now and second.events == whole.events
    pd.testing.assert_frame_equal(second.ledger.frame(), whole.ledger.frame(), check_exact=True)


def test_stream_work_draws_minibatches_by_client_and_work_count():
    """A client's n-th piece of work draws the same rows whatever round or order it runs in,
    and not the rows of round-keyed work."""
    import torch

    from flnet.learn.data import load, minibatches
    from flnet.scenario import DataConfig

    data = load(DataConfig(), 3, seed=0, device=torch.device("cpu"))
    steps = np.array([3, 3])
    a = minibatches(data, np.array([2, 0]), 7, steps, 4, seed=1, work_counts=np.array([5, 0]))
    b = minibatches(data, np.array([0, 2]), 99, steps, 4, seed=1, work_counts=np.array([0, 5]))
    assert torch.equal(a[0], b[1]) and torch.equal(a[1], b[0])
    by_round = minibatches(data, np.array([2, 0]), 5, steps, 4, seed=1)
    assert not torch.equal(a[0], by_round[0])


def test_exchange_sends_per_edge_bits(scenario):
    sizes = [1e6, 2e6, 0.5e6, 1e6]  # per edge, in SNR's order: 1 -> 0 carries twice as much
    done, led = run_exchange(gossip_world(scenario), bits=sizes)
    sent = led[led.kind == "d2d"]
    assert dict(zip(zip(sent.node, sent.peer), sent.bits)) == dict(zip(SNR, sizes))
    hand = {e: SECONDS[e] * b / 1e6 for e, b in zip(SNR, sizes)}
    assert dict(zip(zip(sent.node, sent.peer), sent.end_s)) == pytest.approx(hand)
    assert done.end_s == pytest.approx(2.0)
    with pytest.raises(ValueError, match=r"per edge"):
        run_exchange(gossip_world(scenario), bits=[1e6, 1e6, 1e6])  # [N], not [M]


class Commits(NamedTuple):
    seen: list

    def commit(self, positions):
        self.seen.append(positions.tolist())


def test_exchange_timeout_cuts_compute_and_commits_only_the_nodes_that_computed(scenario):
    hook = Commits([])
    done, led = run_exchange(gossip_world(scenario), timeout_s=0.3, client_state=hook)
    # computes take 0.5, 0.25, 0.125 s: node 0's is cut at 0.3 s, charged 0.3 / 0.5 of 0.4 J
    assert done.end_s == pytest.approx(0.3) and list(done.computed) == [False, True, True]
    comp = led[led.kind == "compute"].set_index("node")
    assert comp.loc[0, "outcome"] == "timeout" and comp.loc[0, "end_s"] == pytest.approx(0.3)
    assert comp.loc[0, "energy_j"] == pytest.approx(0.4 * 0.3 / 0.5, rel=1e-12)
    assert comp.loc[0, "flops"] == pytest.approx(FLOPS * 0.3 / 0.5)
    assert (comp.loc[[1, 2], "outcome"] == "ok").all()
    assert hook.seen == [[1, 2]]
    assert list(done.arrived) == [False, False, True, False]  # only 1 -> 2 (0.25 s) in time
