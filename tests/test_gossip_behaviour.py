"""Dropouts and stragglers for gossip nodes (`World.compute_fates`, `patterns.exchange`): a
node's compute is slowed and dropped as a round trip member's would be, drawn from (seed,
BEHAVIOUR, iteration, node); a dropped node takes no local step and sends nothing more, as a
node the timeout cut (hand computation on the 3-node path, and D-PSGD's step by hand); C-DFL
refuses dropouts."""

import numpy as np
import pytest
import torch
from test_gossip_availability import LR, N, dpsgd_run
from test_patterns import CPU, FPC, KAPPA, RX_W, SNR, TX_W
from tolerance import assert_tensors_close

from flnet.errors import ScenarioError
from flnet.rng import Stream, generator
from flnet.sim.channel import Channel
from flnet.sim.network import Link
from flnet.sim.patterns import Packet, exchange
from flnet.sim.world import World

DROP, SLOW, FACTOR = 0.5, 0.5, 3.0
COMPUTE_S = [0.5, 0.25, 0.125]  # 1e9 cycles on CPU
COMPUTE_J = [0.4, 1.6, 6.4]  # kappa cycles f^2


def behaviour_by_hand(seed, k, node, drop=DROP, slow=SLOW):
    """(slowdown, dropped, point) as documented: the stream's three uniforms in that order."""
    u_slow, u_drop, point = generator(seed, Stream.BEHAVIOUR, k, node).random(3)
    return (FACTOR if u_slow < slow else 1.0), u_drop < drop, point


def path_world(scenario):
    sc = scenario(
        clients={
            "count": 3,
            "kappa": KAPPA,
            "flops_per_cycle": FPC,
            "cpu_hz": {"kind": "per_client", "values": CPU},
            "dropout_probability": DROP,
            "slowdown_probability": SLOW,
            "slowdown_factor": FACTOR,
        },
        radio={"mode": "direct"},
        algorithm={"name": "fedavg", "cohort": {"clients_per_round": 1}},
    )
    world = World(sc.clients, sc.radio, sc.seed)
    band = Channel(world.env, 1e6)
    for (a, b), snr in SNR.items():
        world.network.add_link(a, b, Link(band, snr * 1e6, TX_W, "d2d", rx_power_w=RX_W))
    return world, sc.seed


@pytest.mark.parametrize("k", range(1, 7))
def test_a_gossip_nodes_compute_is_slowed_and_dropped_as_drawn(scenario, k):
    """Iteration k on the path 0 - 1 - 2, sends after the work: node i's compute takes
    COMPUTE_S[i] x slowdown (x its dropout point, where it drops), charged COMPUTE_J[i] (x the
    point); a dropped node's compute ends `dropped`, it counts as not computed and sends
    nothing."""
    world, seed = path_world(scenario)
    edges = np.array(list(SNR))
    flops = np.full(3, 4e9)
    proc = world.env.process(
        exchange(world, np.arange(3), edges, Packet(None, 1e6), flops, tag=k, send_after_work=True)
    )
    world.env.run(until=proc)
    done, led = proc.value, world.ledger.frame()
    comp = led[led.kind == "compute"].set_index("node")
    senders = set(led[led.kind == "d2d"].node)
    for i in range(3):
        slowdown, dropped, point = behaviour_by_hand(seed, k, i)
        share = point if dropped else 1.0
        row = comp.loc[i]
        assert row.outcome == ("dropped" if dropped else "ok")
        assert row.end_s - row.start_s == pytest.approx(COMPUTE_S[i] * slowdown * share)
        assert row.energy_j == pytest.approx(COMPUTE_J[i] * share, rel=1e-12)
        assert row.flops == pytest.approx(4e9 * share)
        assert done.computed[i] == (not dropped)
        assert (i in senders) == (not dropped)


def test_the_draws_cover_drops_and_slowdowns():
    """The seeds above see both outcomes, so the test can fail either way."""
    seen = [behaviour_by_hand(0, k, i) for k in range(1, 7) for i in range(3)]
    assert {s for s, _, _ in seen} == {1.0, FACTOR} and {d for _, d, _ in seen} == {True, False}


def test_dpsgd_a_dropped_node_mixes_but_takes_no_gradient_step(scenario):
    """D-PSGD sends x_k as the compute starts: a node that drops out has sent it, mixes what
    arrived and takes no step (gamma g_i = 0), as a node the timeout cut."""
    clients = {"dropout_probability": 0.4}
    x0, seen, led, w, sc = dpsgd_run(scenario, clients, rounds=4)
    x, dropped_any = x0.double(), 0
    wd = torch.as_tensor(w.toarray() if hasattr(w, "toarray") else w, dtype=torch.float64)
    for k, p in enumerate(seen, start=1):
        dropped = np.array([behaviour_by_hand(sc.seed, k, i, drop=0.4)[1] for i in range(N)])
        stepped = torch.as_tensor(~dropped, dtype=torch.float64).unsqueeze(1)
        hand = wd @ x - LR * x * stepped
        assert_tensors_close(p.state.x, hand)
        rows = led[(led["round"] == k) & (led.kind == "compute")].sort_values("node")
        assert (rows.outcome == "dropped").tolist() == dropped.tolist()
        dropped_any += dropped.any()
        x = p.state.x.double()
    assert dropped_any >= 2


def test_cdfl_refuses_dropouts(scenario):
    with pytest.raises(ScenarioError, match="clients.dropout_probability.*cdfl.*public copies"):
        scenario(algorithm={"name": "cdfl"}, clients={"count": N, "dropout_probability": 0.1})
