import networkx as nx
import torch
from tolerance import assert_tensors_close

from flnet.learn.aggregate import consensus_distance, effective_mixing, mix
from flnet.sim import topology as topo


def path3():
    return torch.tensor(topo.mixing_matrix(nx.path_graph(3), "metropolis_hastings"))


def test_mix_with_every_message_is_one_matmul():
    w = path3()
    x = torch.tensor([[3.0, 0.0], [0.0, 3.0], [6.0, 6.0]], dtype=torch.float64)
    assert torch.equal(mix(w, x), w @ x)
    # by hand: row 0 = 2/3 (3, 0) + 1/3 (0, 3) = (2, 1)
    assert_tensors_close(mix(w, x)[0], torch.tensor([2.0, 1.0]))


def test_a_missing_message_leaves_its_weight_on_the_receiver():
    """Path 0 - 1 - 2 with MH weights; node 1 does not hear from node 2: its row becomes
    (1/3, 2/3, 0), so x_1 <- 1/3 x_0 + 2/3 x_1 (the others unchanged)."""
    w = path3()
    arrived = torch.ones(3, 3, dtype=torch.bool)
    arrived[1, 2] = False
    w_t = effective_mixing(w, arrived)
    assert_tensors_close(
        w_t,
        torch.tensor(
            [[2 / 3, 1 / 3, 0], [1 / 3, 2 / 3, 0], [0, 1 / 3, 2 / 3]], dtype=torch.float64
        ),
    )
    assert torch.allclose(w_t.sum(1), torch.ones(3, dtype=torch.float64))
    x = torch.tensor([[3.0], [0.0], [6.0]], dtype=torch.float64)
    assert_tensors_close(mix(w, x, arrived), torch.tensor([[2.0], [1.0], [4.0]]))


def test_a_link_lost_both_ways_keeps_the_average():
    w = torch.tensor(topo.mixing_matrix(topo.graph("ring", 5), "metropolis_hastings"))
    arrived = torch.ones(5, 5, dtype=torch.bool)
    arrived[1, 2] = arrived[2, 1] = False
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert_tensors_close(mix(w, x, arrived).mean(0), x.mean(0))
    one_way = arrived.clone()
    one_way[2, 1] = True  # only 2 -> 1 lost: W_t is no longer column-stochastic
    assert not torch.allclose(effective_mixing(w, one_way).sum(0), torch.ones(5, dtype=w.dtype))


def test_consensus_distance_by_hand():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])
    # mean (1, 1); squared distances 2, 2, 4 -> 8/3
    assert abs(consensus_distance(x) - 8 / 3) < 1e-12
    assert consensus_distance(torch.ones(4, 3)) == 0.0
