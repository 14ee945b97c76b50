"""Compression operators (flnet.learn.compress): what each keeps, its quality delta, its bits."""

import math

import numpy as np
import pytest
import torch

from flnet.learn import compress as cp
from flnet.rng import Stream
from flnet.schema import (
    IdentityCompression,
    QsgdCompression,
    RandKCompression,
    RandomGossipCompression,
    TopKCompression,
)


def gens(n, key=0):
    return [np.random.default_rng([key, i]) for i in range(n)]


def test_top_k_keeps_each_rows_largest_magnitudes():
    x = torch.tensor([[0.1, -3.0, 2.0, 0.5], [4.0, 0.0, -0.2, -5.0]])
    assert torch.equal(cp.top_k(x, 2), torch.tensor([[0.0, -3.0, 2.0, 0.0], [4.0, 0.0, 0.0, -5.0]]))


def test_rand_k_keeps_k_unscaled_coordinates_drawn_from_the_rows_generator():
    x = torch.arange(1.0, 21.0).repeat(3, 1)
    q = cp.rand_k(x, 5, gens(3))
    assert ((q != 0).sum(1) == 5).all()
    kept = q != 0
    assert torch.equal(q[kept], x[kept])  # not rescaled (the paper's rand_k, delta = k/d)
    assert not torch.equal(kept[0], kept[1])  # each row its own draw
    assert torch.equal(q, cp.rand_k(x, 5, gens(3)))  # the same keys, the same draw


def test_rand_k_meets_its_quality_delta_on_average():
    """E ||Q(x) - x||^2 = (1 - k/d) ||x||^2 for uniform rand-k."""
    x = torch.randn(1, 50, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    errs = [
        float((cp.rand_k(x, 10, [np.random.default_rng(s)]) - x).square().sum())
        for s in range(2000)
    ]
    assert np.mean(errs) == pytest.approx(0.8 * float(x.square().sum()), rel=0.05)


def test_qsgd_is_unbiased_after_undoing_its_scale_and_meets_delta():
    """c * qsgd_s(x) is unbiased (stochastic rounding of s|x|/||x||); the paper's delta = 1/c."""
    d, s = 30, 4
    x = torch.randn(1, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    c = cp.qsgd_scale(s, d)
    assert c == 1 + min(d / s**2, math.sqrt(d) / s)
    qs = torch.cat([cp.qsgd(x, s, [np.random.default_rng(k)]) for k in range(4000)])
    torch.testing.assert_close(qs.mean(0) * c, x[0], atol=0.05, rtol=0)
    err = (qs - x).square().sum(1).mean()
    assert float(err) <= (1 - 1 / c) * float(x.square().sum()) * 1.05
    levels = qs * s * c / x.norm()  # integer levels 0..s times the sign
    assert torch.allclose(levels, levels.round(), atol=1e-9) and levels.abs().max() <= s


def test_random_gossip_sends_whole_rows_with_probability_p():
    x = torch.ones(400, 3)
    q, sent = cp.random_gossip(x, 0.3, gens(400))
    assert torch.equal(q[sent], x[sent]) and (q[~sent] == 0).all()
    assert abs(sent.mean() - 0.3) < 0.08


@pytest.mark.parametrize(
    "cfg,bits",
    [
        (IdentityCompression(), 32 * 1000),
        # k = 250: positions cost 250 * ceil(log2 1000) = 2500 > the 1000-bit mask
        (TopKCompression(kind="top_k", fraction=0.25), 32 * 250 + 1000),
        # k = 10: positions cost 10 * 10 = 100 < 1000
        (TopKCompression(kind="top_k", fraction=0.01), 32 * 10 + 100),
        (RandKCompression(kind="rand_k", fraction=0.25), 32 * 250 + 64),
        (QsgdCompression(kind="qsgd", levels=4), 32 + 1000 * (1 + 3)),
        (QsgdCompression(kind="qsgd", levels=1), 32 + 1000 * (1 + 1)),
    ],
    ids=["identity", "top_k_mask", "top_k_positions", "rand_k", "qsgd4", "qsgd1"],
)
def test_bits_follow_the_message_model(cfg, bits):
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2))
    out = cp.compress(cfg, x, lambda stream: gens(3), wire_d=1000)
    assert out.bits.tolist() == [bits] * 3


def test_bits_count_the_charged_parameters_with_the_same_delta():
    """costs_as: a message is charged as wire_d parameters; k scales with it."""
    x = torch.randn(2, 100, generator=torch.Generator().manual_seed(3))
    out = cp.compress(RandKCompression(kind="rand_k", fraction=0.5), x, lambda s: gens(2), 4000)
    assert ((out.q != 0).sum(1) == 50).all() and out.bits.tolist() == [32 * 2000 + 64] * 2


def test_random_gossip_bits_are_the_model_or_a_skip_flag():
    x = torch.randn(50, 10)
    out = cp.compress(
        RandomGossipCompression(kind="random_gossip", p=0.5), x, lambda s: gens(50), 10
    )
    sent = (out.q != 0).any(1).numpy()
    assert 0 < sent.sum() < 50
    assert (out.bits[sent] == 320).all() and (out.bits[~sent] == 1).all()


def test_each_random_kind_draws_from_its_own_stream():
    asked = []
    x = torch.randn(2, 10)
    for cfg in (
        IdentityCompression(),
        TopKCompression(kind="top_k", fraction=0.5),
        RandKCompression(kind="rand_k", fraction=0.5),
        QsgdCompression(kind="qsgd", levels=2),
        RandomGossipCompression(kind="random_gossip", p=0.5),
    ):
        cp.compress(cfg, x, lambda stream: asked.append(stream) or gens(2), 10)
    assert asked == [Stream.RAND_K, Stream.QSGD, Stream.RANDOM_GOSSIP]
