import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import assert_tensors_close

from flnet.learn.aggregate import consensus_distance, mix
from flnet.sim import topology as topo
from flnet.sim.topology import effective_mixing


def path3() -> topo.Mixing:
    return topo.from_edges([[0, 1], [1, 2]], 3, "metropolis_hastings")


def arrived_but(m: topo.Mixing, *lost: tuple[int, int]) -> np.ndarray:
    """[M] every message arrived but those of the (sender, receiver) pairs in `lost`."""
    arrived = np.ones(len(m.sender), dtype=bool)
    for j, i in lost:
        arrived[(m.sender == j) & (m.receiver == i)] = False
    assert (~arrived).sum() == len(lost)
    return arrived


def dense_w_t(w: np.ndarray, lost: np.ndarray) -> np.ndarray:
    """The dense reference: W with the lost entries [n, n] moved to the diagonal."""
    return np.where(lost, 0.0, w) + np.diag((w * lost).sum(axis=1))


def test_mix_with_every_message_is_w_times_x():
    m = path3()
    x = torch.tensor([[3.0, 0.0], [0.0, 3.0], [6.0, 6.0]], dtype=torch.float64)
    assert_tensors_close(mix(m, x), torch.tensor(m.dense()) @ x)
    # by hand: row 0 = 2/3 (3, 0) + 1/3 (0, 3) = (2, 1)
    assert_tensors_close(mix(m, x)[0], torch.tensor([2.0, 1.0]))


def test_a_missing_message_leaves_its_weight_on_the_receiver():
    """Path 0 - 1 - 2 with MH weights; node 1 does not hear from node 2: its row becomes
    (1/3, 2/3, 0), so x_1 <- 1/3 x_0 + 2/3 x_1 (the others unchanged)."""
    m = path3()
    arrived = arrived_but(m, (2, 1))
    w_t = effective_mixing(m, arrived).dense()
    np.testing.assert_allclose(
        w_t, [[2 / 3, 1 / 3, 0], [1 / 3, 2 / 3, 0], [0, 1 / 3, 2 / 3]], rtol=0, atol=1e-15
    )
    np.testing.assert_allclose(w_t.sum(1), 1.0, rtol=0, atol=1e-15)
    assert effective_mixing(m, None) is m
    x = torch.tensor([[3.0], [0.0], [6.0]], dtype=torch.float64)
    assert_tensors_close(mix(effective_mixing(m, arrived), x), torch.tensor([[2.0], [1.0], [4.0]]))


def test_a_link_lost_both_ways_keeps_the_average():
    m = topo.from_config(topo_ring(), 5, np.random.default_rng(0))
    x = torch.randn(5, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert_tensors_close(
        mix(effective_mixing(m, arrived_but(m, (1, 2), (2, 1))), x).mean(0), x.mean(0)
    )
    one_way = effective_mixing(m, arrived_but(m, (2, 1))).dense()  # only 2 -> 1 lost
    assert not np.allclose(one_way.sum(0), 1.0)  # W_t is no longer column-stochastic


def topo_ring():
    from flnet.config import GraphTopology

    return GraphTopology(kind="ring")


@pytest.mark.parametrize(
    "kind, n, p",
    [("erdos_renyi", 40, 0.15), ("erdos_renyi", 25, 0.9), ("exponential", 19, None),
     ("grid", 16, None), ("full", 12, None)],
)  # fmt: skip
def test_sparse_mix_is_the_dense_w_t_times_x_on_random_graphs_and_losses(kind, n, p):
    rng = np.random.default_rng(n)
    for weights in topo.WEIGHTS:
        m = topo.from_edges(topo.graph_edges(kind, n, p=p, rng=rng), n, weights, 0.2)
        for loss in (0.0, 0.3, 1.0):
            arrived = rng.random(len(m.sender)) >= loss
            lost = np.zeros((n, n), dtype=bool)
            lost[m.receiver[~arrived], m.sender[~arrived]] = True
            w_t = dense_w_t(m.dense(), lost)
            x = torch.randn(n, 33, generator=torch.Generator().manual_seed(n), dtype=torch.float32)
            assert_tensors_close(
                mix(effective_mixing(m, arrived), x), torch.tensor(w_t) @ x.double()
            )
            np.testing.assert_allclose(
                effective_mixing(m, arrived).dense(), w_t, rtol=0, atol=1e-15
            )


def test_a_hand_given_asymmetric_matrix_mixes_as_its_dense_self():
    w = np.array([[0.5, 0.5, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4], [0.0, 0.0, 0.25, 0.75], [1, 0, 0, 0]])
    m = topo.from_dense(w)
    arrived = arrived_but(m, (3, 1), (0, 3))
    lost = np.zeros((4, 4), dtype=bool)
    lost[1, 3] = lost[3, 0] = True
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert_tensors_close(mix(effective_mixing(m, arrived), x), torch.tensor(dense_w_t(w, lost)) @ x)
    assert torch.equal(
        mix(effective_mixing(m, ~arrived_but(m)), x), x
    )  # node 3 lost everything, W_t = I


def test_edges_out_of_row_major_order_are_refused():
    m = path3()
    shuffled = m._replace(sender=m.sender[::-1], receiver=m.receiver[::-1], weight=m.weight[::-1])
    with pytest.raises(ValueError, match="sorted by receiver"):
        mix(shuffled, torch.ones(3, 2))


def test_mixing_a_100k_ring_stays_far_below_the_dense_size():
    """W of a 100,000-node ring as an array: 80 GB (float64), its mask 10 GB. Sparse: 200,000
    edges x (8 + 8 + 8) bytes + 100,000 x 8 for the diagonal, about 6 MB, and the [100000, 4]
    models 1.6 MB each. Building it and one mix with losses, in a fresh interpreter (so the
    peak RSS measures this alone, after imports and a warm-up), must stay under 100 MiB: a
    margin of about 5 over what it takes (20 MiB measured), 800 times below the dense W."""
    code = textwrap.dedent(
        """
        import numpy as np, torch
        from bench import peak_rss_mb as peak_mib  # its own peak, not this test process's
        from flnet.config import GraphTopology
        from flnet.learn.aggregate import mix
        from flnet.sim import topology
        from flnet.sim.topology import effective_mixing
        def build(n):
            return topology.from_config(GraphTopology(kind="ring"), n, np.random.default_rng(0))
        small = build(10)
        mix(effective_mixing(small, np.arange(20) % 2 == 0), torch.ones(10, 4))
        before = peak_mib()
        m = build(100_000)
        arrived = np.random.default_rng(1).random(len(m.sender)) < 0.9
        y = mix(effective_mixing(m, arrived), torch.ones(100_000, 4))
        assert len(m.sender) == 200_000 and y.shape == (100_000, 4)
        print(peak_mib() - before)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=Path(__file__).resolve().parent.parent / "benchmarks",  # for `import bench`
    )
    assert float(out.stdout) < 100.0, out.stdout


def test_consensus_distance_by_hand():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, 3.0]])
    # mean (1, 1); squared distances 2, 2, 4 -> 8/3
    assert abs(consensus_distance(x) - 8 / 3) < 1e-12
    assert consensus_distance(torch.ones(4, 3)) == 0.0


def test_delivered_rows_copies_only_when_someone_is_missing():
    from flnet.learn.aggregate import delivered_rows

    rows = torch.arange(12.0).view(4, 3)
    assert delivered_rows(rows, np.arange(4)) is rows
    torch.testing.assert_close(delivered_rows(rows, np.array([0, 2])), rows[[0, 2]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_weighted_mean_by_hand_and_its_weights_as_torch_casts_them(dtype):
    """sum_k n_k x_k / sum n_k; the sample counts cast to the models' dtype on the host give
    torch's own cast of them, counts past float32's integers included."""
    from flnet.learn.aggregate import weighted_mean

    x = torch.tensor([[1.0, 2.0], [3.0, -4.0], [0.5, 0.0]], dtype=dtype)
    got = weighted_mean(x, np.array([1, 2, 5]))
    want = torch.tensor([(1 + 6 + 2.5) / 8, (2 - 8 + 0) / 8], dtype=torch.float64)
    torch.testing.assert_close(
        got.double(), want, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=0
    )
    counts = np.array([3, 2**24 + 1, 2**40 + 12345, 7])
    rows = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    w = torch.as_tensor(counts, dtype=dtype)
    assert torch.equal(weighted_mean(rows, counts), (w @ rows) / w.sum())
