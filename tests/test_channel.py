import math

import pytest
import simpy

from flnet.channel import Channel
from flnet.radio import shannon_rate_bps, snr_hz_direct

B = 1e6
SNR_HZ = float(snr_hz_direct(20.0, B))  # 20 dB over the whole band


def _send(env, ch, bits, at, log, name):
    yield env.timeout(at)
    tx = ch.transmit(bits, SNR_HZ)
    yield tx.done
    log[name] = env.now


def _run(shared, jobs):
    env = simpy.Environment()
    ch = Channel(env, B, shared=shared)
    log = {}
    for name, (bits, at) in jobs.items():
        env.process(_send(env, ch, bits, at, log, name))
    env.run()
    return log


def test_dedicated_band_ignores_other_transfers():
    log = _run(False, {"a": (1e6, 0.0), "b": (1e6, 0.0)})
    expect = 1e6 / (B * math.log2(101))
    assert log["a"] == pytest.approx(expect)
    assert log["b"] == pytest.approx(expect)


def test_shared_band_split_equally_between_concurrent_uploads():
    log = _run(True, {"a": (1e6, 0.0), "b": (1e6, 0.0)})
    half_rate = shannon_rate_bps(B / 2, SNR_HZ)  # (B/2) log2(1 + 2 * 100)
    assert half_rate == pytest.approx(0.5e6 * math.log2(201))
    assert log["a"] == pytest.approx(1e6 / half_rate)
    assert log["b"] == pytest.approx(1e6 / half_rate)
    assert log["a"] > 1e6 / shannon_rate_bps(B, SNR_HZ)  # slower than alone


def test_shared_band_rescheduled_when_a_transfer_joins_and_leaves():
    bits_a, bits_b, t_join = 2e6, 0.5e6, 0.1
    full, half = shannon_rate_bps(B, SNR_HZ), shannon_rate_bps(B / 2, SNR_HZ)
    # a alone until t_join, then both at the half rate until b is done, then a alone again
    left_a = bits_a - full * t_join
    t_b = t_join + bits_b / half
    left_a -= half * (t_b - t_join)
    t_a = t_b + left_a / full
    log = _run(True, {"a": (bits_a, 0.0), "b": (bits_b, t_join)})
    assert log["b"] == pytest.approx(t_b)
    assert log["a"] == pytest.approx(t_a)


def test_cancelled_transfer_frees_its_share():
    env = simpy.Environment()
    ch = Channel(env, B, shared=True)
    full, half = shannon_rate_bps(B, SNR_HZ), shannon_rate_bps(B / 2, SNR_HZ)
    a = ch.transmit(1e6, SNR_HZ)
    b = ch.transmit(1e6, SNR_HZ)
    env.run(until=0.05)
    b.cancel()
    assert b.sent_bits == pytest.approx(half * 0.05)
    env.run(until=a.done)
    assert env.now == pytest.approx(0.05 + (1e6 - half * 0.05) / full)
