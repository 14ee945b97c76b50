"""The gossip radio and topologies against hand computation: broadcast and unicast costs,
orthogonal links, TDMA and half-duplex schedules, lost messages, D2D path loss from positions,
mixing properties and spectral gaps, consensus contraction on a ring."""

import math

import numpy as np
import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import dpsgd
from flnet.errors import ScenarioError, TopologyWarning
from flnet.learn.aggregate import consensus_distance, mix
from flnet.rng import Stream, generator
from flnet.sim import topology as topo
from flnet.sim.channel import Channel
from flnet.sim.ledger import BROADCAST
from flnet.sim.network import Link
from flnet.sim.patterns import Packet, exchange
from flnet.sim.topology import effective_mixing
from flnet.sim.world import World

TX_W, RX_W = 0.2, 0.05
BITS = 1e6


def world_of(scenario, n, **d2d):
    sc = scenario(
        clients={"count": n, "cpu_hz": 1e9},
        radio={"mode": "direct", "d2d": d2d},
        algorithm={"name": "dfedavg", "topology": {"kind": "ring"}},  # D2D is for gossip
    )
    return World(sc.clients, sc.radio, sc.seed)


def with_links(world, snr: dict, channel=None):
    """Hand-made D2D links: SNR over a 1 MHz band, so 1 Mbit takes 1 / log2(1 + snr) s."""
    channel = channel or Channel(world.env, 1e6)
    for (a, b), s in snr.items():
        world.network.add_link(a, b, Link(channel, s * 1e6, TX_W, "d2d", rx_power_w=RX_W))
    return world


def run(world, edges, bits=BITS, flops=0.0, **kwargs):
    n = world.num_clients
    proc = world.env.process(
        exchange(world, np.arange(n), np.array(edges), Packet(None, bits), np.full(n, flops),
                 tag=1, **kwargs)
    )  # fmt: skip
    world.env.run(until=proc)
    return proc.value, world.ledger.frame()


def sends(led):
    s = led[led.kind == "d2d"]
    return {(a, b): (t0, t1) for a, b, t0, t1 in zip(s.node, s.peer, s.start_s, s.end_s)}


# ---------------------------------------------------------------- broadcast and unicast

STAR = {(0, 1): 3.0, (0, 2): 15.0, (0, 3): 7.0}  # rates 2, 4, 3 Mbit/s


def test_broadcast_to_three_charges_one_transmission_at_the_weakest_rate(scenario):
    world = with_links(world_of(scenario, 4, transmission="broadcast"), STAR)
    done, led = run(world, list(STAR))
    airtime = BITS / 2e6  # the weakest receiver, node 1: log2(1 + 3) = 2 bit/s/Hz
    sent = led[led.kind == "d2d"]
    assert len(sent) == 1 and sent.peer.iloc[0] == BROADCAST
    assert sent.bits.iloc[0] == BITS and sent.end_s.iloc[0] == pytest.approx(airtime)
    assert sent.energy_j.iloc[0] == pytest.approx(TX_W * airtime, rel=1e-12)  # paid once
    got = led[led.kind == "d2d_rx"].set_index("node")
    assert sorted(got.index) == [1, 2, 3] and (got.peer == 0).all()
    assert got.energy_j.to_numpy() == pytest.approx([RX_W * airtime] * 3, rel=1e-12)
    assert done.arrived.all() and done.end_s == pytest.approx(airtime)
    assert world.ledger.bits["d2d"] == BITS


def test_unicast_to_three_charges_three_transmissions_each_at_its_own_rate(scenario):
    world = with_links(world_of(scenario, 4), STAR)
    done, led = run(world, list(STAR))
    airtime = {(0, 1): 0.5, (0, 2): 0.25, (0, 3): 1 / 3}
    assert {e: t1 for e, (_, t1) in sends(led).items()} == pytest.approx(airtime)
    sender = led[(led.node == 0)].energy_j.sum()
    assert sender == pytest.approx(TX_W * sum(airtime.values()), rel=1e-12)
    assert world.ledger.bits["d2d"] == 3 * BITS and done.end_s == pytest.approx(0.5)


# ---------------------------------------------------------------- access and schedules

# a path 0 - 1 - 2 (test_patterns' links): 1 Mbit takes these many seconds
PATH = {(0, 1): 3.0, (1, 0): 1.0, (1, 2): 15.0, (2, 1): 7.0}
SECONDS = {(0, 1): 0.5, (1, 0): 1.0, (1, 2): 0.25, (2, 1): 1 / 3}


def test_orthogonal_links_take_the_slowest_link(scenario):
    world = with_links(world_of(scenario, 3, sharing="dedicated"), PATH)
    done, led = run(world, list(PATH))
    assert {e: t for e, (_, t) in sends(led).items()} == pytest.approx(SECONDS)
    assert done.end_s == pytest.approx(max(SECONDS.values()))


def test_tdma_takes_the_sum_of_the_airtimes_in_request_order(scenario):
    world = with_links(world_of(scenario, 3, sharing="tdma"), PATH)
    done, led = run(world, list(PATH))
    start, by_hand = 0.0, {}
    for e in PATH:  # the medium goes to node 0's edge, then node 1's two, then node 2's
        by_hand[e] = (start, start + SECONDS[e])
        start += SECONDS[e]
    assert sends(led) == {e: pytest.approx(v) for e, v in by_hand.items()}
    assert done.end_s == pytest.approx(sum(SECONDS.values()))  # 2.0833 s


def test_a_half_duplex_node_sends_or_receives_one_at_a_time_as_scheduled(scenario):
    """Path 0 - 1 - 2 - 3, every link 0.5 s. Requests in edge order; each starts once its two
    radios are free: (0,1) and (2,3) at 0; at 0.5 (1,0) and (3,2); at 1.0 (1,2); at 1.5 (2,1)."""
    edges = [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]
    world = with_links(world_of(scenario, 4, half_duplex=True), dict.fromkeys(edges, 3.0))
    done, led = run(world, edges)
    starts = {(0, 1): 0.0, (2, 3): 0.0, (1, 0): 0.5, (3, 2): 0.5, (1, 2): 1.0, (2, 1): 1.5}
    assert sends(led) == {e: pytest.approx((t, t + 0.5)) for e, t in starts.items()}
    assert done.end_s == pytest.approx(2.0) and done.arrived.all()
    for node in range(4):  # no radio does two things at once
        busy = sorted((t0, t1) for (a, b), (t0, t1) in sends(led).items() if node in (a, b))
        assert all(prev[1] <= nxt[0] + 1e-12 for prev, nxt in zip(busy, busy[1:]))
    # full duplex, the same links all run at once
    world = with_links(world_of(scenario, 4), dict.fromkeys(edges, 3.0))
    assert run(world, edges)[0].end_s == pytest.approx(0.5)


def test_a_timeout_stops_waiting_transmissions_at_no_cost(scenario):
    world = with_links(world_of(scenario, 3, sharing="tdma"), PATH)
    done, led = run(world, list(PATH), timeout_s=0.75)
    assert list(done.arrived) == [True, False, False, False]
    rows = led[led.kind == "d2d"].set_index(["node", "peer"])
    assert rows.loc[(1, 0), "outcome"] == "timeout"  # under way: charged up to 0.75 s
    assert rows.loc[(1, 0), "energy_j"] == pytest.approx(TX_W * 0.25)
    assert (rows.loc[[(1, 2), (2, 1)], "energy_j"] == 0).all()  # never on the air


# ---------------------------------------------------------------- lost messages


def test_a_lost_message_is_charged_and_its_weight_moves_to_the_receiver(scenario):
    p, tag = 0.5, 1
    world = with_links(world_of(scenario, 3, loss_probability=p), PATH)
    done, led = run(world, list(PATH))
    lost = generator(world.seed, Stream.D2D_LOSS, tag).random(4) < p  # one uniform per edge
    assert lost.any() and not lost.all()  # this seed loses some, keeps some
    assert list(done.arrived) == list(~lost)
    rx = led[led.kind == "d2d_rx"].set_index("peer")  # row of the receiver of each edge
    for e, (a, b) in enumerate(PATH):
        row = led[(led.kind == "d2d_rx") & (led.node == b) & (led.peer == a)].iloc[0]
        assert row.outcome == ("lost" if lost[e] else "ok")
        assert row.energy_j == pytest.approx(RX_W * SECONDS[a, b], rel=1e-12)  # charged anyway
    assert len(rx) == 4 and world.ledger.bits["d2d"] == 4 * BITS
    # the weight of a lost j -> i moves to W_ii
    w = topo.from_edges([[0, 1], [1, 2]], 3, "metropolis_hastings")
    by_hand = w.dense()
    for e, (j, i) in enumerate(PATH):
        if lost[e]:
            by_hand[i, i] += by_hand[i, j]
            by_hand[i, j] = 0.0
    order = [list(PATH).index((j, i)) for j, i in zip(w.sender.tolist(), w.receiver.tolist())]
    arrived = done.arrived[order]  # in W's edge order
    np.testing.assert_allclose(effective_mixing(w, arrived).dense(), by_hand, rtol=0, atol=1e-15)
    x = torch.tensor([[3.0], [0.0], [6.0]], dtype=torch.float64)
    assert_tensors_close(mix(effective_mixing(w, arrived), x), torch.tensor(by_hand) @ x)


# ---------------------------------------------------------------- positions and path loss


def test_d2d_path_loss_from_positions_is_the_log_distance_formula_and_reciprocal(scenario):
    sc = scenario(
        clients={"count": 3, "positions": {"kind": "given", "xy_m": [[0, 0], [30, 40], [0, 10]]}},
        radio={
            "mode": "direct",
            "tx_power_dbm": {"kind": "per_client", "values": [20.0, 10.0, 10.0]},
            "d2d": {"path_loss": {"exponent": 3.0, "shadowing_std_db": 0.0}},
        },
        algorithm={"name": "dfedavg", "topology": {"kind": "ring"}},  # D2D is for gossip
    )
    world = World(sc.clients, sc.radio, sc.seed)
    fspl_db = 20 * math.log10(4 * math.pi * 2.4e9 / 299_792_458.0)  # 40.05 dB at 1 m
    loss_db = fspl_db + 30 * math.log10(50.0)  # 0 -> 1 is 50 m
    noise_w_hz = 10 ** ((-174 + 9 - 30) / 10)
    assert world.link(0, 1).snr_hz == pytest.approx(0.1 * 10 ** (-loss_db / 10) / noise_w_hz)
    assert world.link(1, 0).snr_hz == pytest.approx(0.01 * 10 ** (-loss_db / 10) / noise_w_hz)
    # shadowing is drawn once per pair: both directions see the same gain
    sc2 = scenario(
        clients={"count": 3, "positions": {"kind": "uniform", "side_m": 100.0}},
        radio={"mode": "direct", "d2d": {"path_loss": {"shadowing_std_db": 8.0}}},
        algorithm={"name": "dfedavg", "topology": {"kind": "ring"}},  # D2D is for gossip
    )
    w2 = World(sc2.clients, sc2.radio, sc2.seed)
    assert w2.link(2, 0).snr_hz == w2.link(0, 2).snr_hz  # equal powers: the same SNR
    xy = w2.positions_m(np.arange(3))
    assert ((xy >= 0) & (xy <= 100)).all() and len(np.unique(xy)) == 6


def test_path_loss_and_random_geometric_graphs_need_positions(scenario):
    with pytest.raises(ScenarioError, match="radio.d2d.path_loss: needs clients.positions"):
        scenario(
            radio={"mode": "direct", "d2d": {"path_loss": {}}},
            algorithm={"name": "dfedavg", "topology": {"kind": "ring"}},
        )
    with pytest.raises(ScenarioError, match=r"clients.positions.xy_m: lists 1 positions"):
        scenario(clients={"count": 2, "positions": {"kind": "given", "xy_m": [[0, 0]]}})


def test_random_geometric_graph_joins_the_nodes_within_range():
    xy = np.array([[0.0, 0.0], [10.0, 0.0], [20.0, 0.0], [10.0, 9.0]])
    e = topo.random_geometric(xy, 10.0)
    assert {tuple(sorted(p)) for p in e.tolist()} == {(0, 1), (1, 2), (1, 3)}
    with pytest.raises(ScenarioError, match=r"algorithm.topology.radius_m: .*disconnected"):
        topo.random_geometric(xy, 9.5)


# ---------------------------------------------------------------- mixing properties


def test_star_spectral_gap_is_one_over_n_and_metropolis_hastings_doubly_stochastic():
    """Star with MH weights: W = I - L / n (every edge 1/n), L's eigenvalues 0, 1 (n-2 times)
    and n, so W's are 1, 1 - 1/n and 0: the gap is 1/n."""
    for n in (3, 5, 8):
        w = topo.from_edges(topo.graph_edges("star", n), n, "metropolis_hastings")
        assert topo.violations(w, topo.PROPERTIES) == {}
        assert topo.spectral_gap(w) == pytest.approx(1 / n, abs=1e-12)
    for n in (5, 12):  # ring (MH = 1/3): 1 - (1/3 + 2/3 cos(2 pi / n)); complete (1/n): 1
        ring = topo.from_edges(topo.graph_edges("ring", n), n)
        assert topo.spectral_gap(ring) == pytest.approx((2 / 3) * (1 - math.cos(2 * math.pi / n)))
        assert topo.spectral_gap(topo.from_edges(topo.graph_edges("full", n), n)) == (
            pytest.approx(1.0)
        )


def test_a_property_violation_names_the_property():
    star = topo.graph_edges("star", 4)
    uniform = topo.from_edges(star, 4, "uniform")  # 1/(deg+1): row- but not doubly stochastic
    why = topo.violations(uniform, topo.PROPERTIES)
    assert set(why) == {"doubly_stochastic", "symmetric"}
    assert "column 0 sums to 1.75" in why["doubly_stochastic"]  # 1/4 + 3 x 1/2
    with pytest.raises(ScenarioError, match="algorithm.topology: X needs a doubly stochastic W"):
        topo.check_properties(uniform, algorithm="X", needs=("doubly_stochastic",))
    with pytest.warns(TopologyWarning, match="X's analysis assumes a symmetric W"):
        topo.check_properties(uniform, algorithm="X", assumes=("symmetric",))
    split = topo.from_edges([[0, 1], [2, 3]], 4)  # built without the connectivity check
    assert "2 components" in topo.violations(split, ("connected",))["connected"]


def test_random_k_directed_is_row_stochastic_uniform_and_redrawn_each_iteration():
    n, k = 12, 3
    cfg = topo_cfg({"kind": "random_k", "k": k})
    w1 = topo.from_config(cfg, n, generator(0, Stream.NEIGHBOURS, 1))
    w2 = topo.from_config(cfg, n, generator(0, Stream.NEIGHBOURS, 2))
    assert np.bincount(w1.receiver, minlength=n).tolist() == [k] * n  # each hears its k
    assert (w1.weight == 1 / (k + 1)).all() and (w1.self_weight == 1 / (k + 1)).all()
    assert (w1.sender != w1.receiver).all()
    assert topo.violations(w1, ("row_stochastic",)) == {}
    assert "doubly_stochastic" in topo.violations(w1, ("doubly_stochastic",))
    assert not np.array_equal(w1.sender, w2.sender)  # time-varying
    again = topo.from_config(cfg, n, generator(0, Stream.NEIGHBOURS, 1))
    assert np.array_equal(w1.sender, again.sender)  # keyed: a resumed run redraws it
    sym = topo.from_config(topo_cfg({"kind": "random_k", "k": k, "directed": False,
                                     "weights": "metropolis_hastings"}), n,
                           generator(0, Stream.NEIGHBOURS, 1))  # fmt: skip
    assert topo.violations(sym, ("doubly_stochastic", "symmetric")) == {}


def topo_cfg(data):
    from pydantic import TypeAdapter

    from flnet.config import TopologyConfig

    return TypeAdapter(TopologyConfig).validate_python(data)


def test_dpsgd_on_a_directed_random_k_graph_warns_runs_and_records_each_gap(scenario):
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "dpsgd",
            "topology": {"kind": "random_k", "k": 2},
            "local": {"steps": 1, "lr": 0.1, "batch_size": 4},
        },
        clients={"count": 6},
    )
    world, learn = build(sc)
    protocol = dpsgd.protocol(world, learn, sc.algorithm, dpsgd.init(learn, sc.algorithm))
    with pytest.warns(TopologyWarning, match="D-PSGD's analysis assumes a doubly stochastic W"):
        seen = run_protocol(world, 2, protocol)
    for p in seen:  # each iteration's own W
        w = topo.from_config(
            sc.algorithm.topology, 6, generator(sc.seed, Stream.NEIGHBOURS, p.step)
        )
        assert p.figures["spectral_gap"] == pytest.approx(topo.spectral_gap(w), abs=1e-12)
    led = world.ledger.frame()
    assert (led[led.kind == "d2d"].groupby("round", observed=True).size() == 6 * 2).all()


def test_a_time_varying_graph_draws_each_iterations_w_once(scenario, monkeypatch):
    """The checks at the start and iteration 1 all ask for W_1: drawn once, then each
    iteration's own W once."""
    from flnet.runner import build

    sc = scenario(
        algorithm={
            "name": "dpsgd",
            "topology": {"kind": "random_k", "k": 2, "directed": False},
            "local": {"steps": 1, "lr": 0.1, "batch_size": 4},
        },
        clients={"count": 6},
    )
    world, learn = build(sc)
    drawn, draw = [], topo.from_config
    monkeypatch.setattr(topo, "from_config", lambda *a, **k: drawn.append(1) or draw(*a, **k))
    protocol = dpsgd.protocol(world, learn, sc.algorithm, dpsgd.init(learn, sc.algorithm))
    run_protocol(world, 3, protocol)
    assert len(drawn) == 3


# ---------------------------------------------------------------- consensus on a ring


def test_gossip_on_a_ring_keeps_the_average_and_contracts_by_lambda2_squared():
    """Ring of 8, MH weights 1/3: the deviation x_i = cos(2 pi i / n) is W's eigenvector of
    lambda_2 = 1/3 + 2/3 cos(2 pi / n), so each mixing multiplies the consensus distance by
    lambda_2^2 exactly, and the average stays put."""
    n = 8
    w = topo.from_edges(topo.graph_edges("ring", n), n)
    i = torch.arange(n, dtype=torch.float64)
    x = torch.stack([torch.cos(2 * math.pi * i / n), 2 * torch.cos(2 * math.pi * i / n)], 1) + 5
    lam2 = 1 / 3 + 2 / 3 * math.cos(2 * math.pi / n)
    for _ in range(4):
        nxt = mix(w, x)
        assert_tensors_close(nxt.mean(0), x.mean(0))
        assert consensus_distance(nxt) == pytest.approx(lam2**2 * consensus_distance(x), rel=1e-9)
        x = nxt


def test_gossip_over_the_radio_resumes_to_the_bit(scenario, tmp_path):
    """A time-varying graph, positions, path loss, broadcast, half-duplex TDMA, losses and a
    timeout that cuts some compute: an interrupted run resumes on the same trajectory."""

    def make(name):
        return scenario(
            algorithm={
                "name": "dpsgd",
                "local": {"steps": 1, "batch_size": 8},
                "topology": {"kind": "random_k", "k": 2},
                "timeout_s": 0.05,
            },
            clients={
                "count": 6,
                "cpu_hz": {"kind": "per_client", "values": [1e6, 4e6, 1.6e7, 3.2e7, 6.4e7, 1.3e8]},
                "flops_per_cycle": 1.0,  # node 0's step takes 0.16 s: the timeout cuts it
                "positions": {"kind": "uniform", "side_m": 50.0},
            },
            radio={
                "mode": "direct",
                "rayleigh_fading": True,
                "d2d": {
                    "path_loss": {},
                    "sharing": "tdma",
                    "transmission": "broadcast",
                    "half_duplex": True,
                    "loss_probability": 0.2,
                },
            },
            run={"rounds": 8, "eval_every": 4, "checkpoint_every": None,
                 "checkpoint_interval_s": None},
            output={"dir": str(tmp_path / name)},
        )  # fmt: skip

    with pytest.warns(TopologyWarning):
        whole, _ = assert_resumes_exactly(make, StopAt(3))
    led = whole.ledger
    assert (led[led.kind == "d2d_rx"].outcome == "lost").any()
    assert (led[led.kind == "compute"].outcome == "timeout").any()
    assert "spectral_gap" in whole.records and whole.summary["bits_d2d"] > 0


def test_made_d2d_links_are_a_bounded_cache_of_their_keyed_draws(scenario, monkeypatch):
    from flnet.sim import network

    monkeypatch.setattr(network, "D2D_LINKS_KEPT", 2)
    world = world_of(scenario, 4, snr_db={"kind": "uniform", "low": 0, "high": 30})
    pairs = [(0, 1), (2, 3), (1, 2), (0, 3), (1, 0)]
    snr = [world.link(*p).snr_hz for p in pairs]
    assert world.network.graph.number_of_edges() <= 2  # emptied when full
    assert [world.link(*p).snr_hz for p in pairs] == snr  # made again, the same draws
    assert snr[0] == snr[4]  # reciprocal
