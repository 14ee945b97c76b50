"""Per-round allocations of a cohort's uplink bandwidth, CPU frequencies and transmit powers
(`resources.bandwidth`, `resources.compute_power`): closed forms where there are, scipy's
root finders and bounded scalar minimiser where not. Pure numpy on [C] arrays, no SimPy: the
World applies what these return (`flnet.sim.resources`).

Member k downloads for `down_s`, computes `cycles` at f (seconds cycles / f, joules
kappa cycles f^2) and uploads `bits` on a sub-band b at radiated power p: its SNR is
`gain p / b` (`gain` = g / N0, in Hz per watt), its rate r = b log2(1 + gain p / b), its upload
takes bits / r and costs (p + circuit) bits / r joules.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import brentq, minimize_scalar

from flnet.sim.radio import LN2, shannon_rate_bps


class Members(NamedTuple):
    """What the server knows of a round's members ([C] each) when it allocates."""

    down_s: np.ndarray  # download seconds
    cycles: np.ndarray  # CPU cycles of the local work
    bits: np.ndarray  # upload bits
    gain_hz_w: np.ndarray  # g / N0: SNR_hz per watt radiated
    f_min_hz: np.ndarray
    f_max_hz: np.ndarray
    p_min_w: np.ndarray  # radiated power bounds
    p_max_w: np.ndarray
    kappa: np.ndarray
    circuit_w: np.ndarray  # drawn on top of the radiated power while transmitting


class Allocation(NamedTuple):
    """Each member's sub-band, frequency and radiated power ([C] each), and the plan's
    seconds and joules from the round's start."""

    bandwidth_hz: np.ndarray
    cpu_hz: np.ndarray
    tx_power_w: np.ndarray
    finish_s: np.ndarray
    energy_j: np.ndarray  # compute + upload
    feasible: np.ndarray  # bool: meets the deadline (True without one)


def upload_s(bits: Any, bandwidth_hz: Any, snr_hz: Any) -> Any:
    """bits / (b log2(1 + snr_hz / b)), of floats or [C] arrays."""
    return bits / shannon_rate_bps(bandwidth_hz, snr_hz)


def power_for_w(bits: float, bandwidth_hz: float, gain_hz_w: float, time_s: float) -> float:
    """The radiated power that uploads `bits` in exactly `time_s` on `bandwidth_hz`:
    (2^(bits / (time_s b)) - 1) b / gain (inf where no time is left)."""
    if time_s <= 0:
        return math.inf
    exponent = bits / (time_s * bandwidth_hz) * LN2
    return math.expm1(exponent) * bandwidth_hz / gain_hz_w if exponent < 700 else math.inf


def bandwidth_for_hz(bits: float, snr_hz: float, time_s: float) -> float:
    """The sub-band that uploads `bits` in exactly `time_s` (inf: none does, as the rate is
    bounded by snr_hz / ln 2 however wide the band)."""
    if time_s <= 0 or bits / time_s >= snr_hz / LN2:
        return math.inf

    def excess(b: float) -> float:
        return float(shannon_rate_bps(b, snr_hz)) * time_s - bits

    hi = bits / time_s  # spectral efficiency <= 1 below this? not always: grow until enough
    while excess(hi) < 0:
        hi *= 2.0
    lo = hi
    while excess(lo) > 0 and lo > 1e-12:
        lo /= 2.0
    return float(brentq(excess, lo, hi, xtol=1e-12 * hi, rtol=1e-14))


def equal_finish(
    ready_s: np.ndarray, bits: np.ndarray, snr_hz: np.ndarray, band_hz: float
) -> np.ndarray:
    """[C] sub-bands summing to `band_hz` with which every member, starting its upload at
    `ready_s`, finishes at one instant T: the split that minimises the latest finish (a
    member finishing early could give band to the latest). T solves
    sum_k b_k(T - ready_k) = band_hz, each b_k from `bandwidth_for_hz` (brentq on T)."""
    ready = np.asarray(ready_s, dtype=float)
    floor = ready + bits * LN2 / snr_hz  # before this a member needs an infinite band

    def total(t_s: float) -> float:
        return sum(
            bandwidth_for_hz(b, q, t_s - r)
            for b, q, r in zip(bits.tolist(), snr_hz.tolist(), ready.tolist())
        )

    top = float(floor.max())
    hi = float((ready + upload_s(bits, band_hz / len(bits), snr_hz)).max())  # equal split's
    if total(hi) >= band_hz:  # every member alike (or the last ulp): the equal split
        t = hi
    else:  # below hi the band needed grows without bound towards `top`
        lo, above = hi, hi
        while not total(lo) > band_hz:
            above, lo = lo, top + (lo - top) / 2.0
        while not math.isfinite(total(lo)):  # too near `top` for floats: back off
            lo = (lo + above) / 2.0
        t = float(brentq(lambda t: total(t) - band_hz, lo, hi, xtol=1e-12, rtol=1e-14))
    shares = np.array(
        [
            bandwidth_for_hz(b, q, t - r)
            for b, q, r in zip(bits.tolist(), snr_hz.tolist(), ready.tolist())
        ]
    )
    return shares * (band_hz / shares.sum())  # the root's last ulps: the band exactly


def just_in_time(m: Members, bandwidth_hz: np.ndarray, deadline_s: float) -> tuple:
    """[C] frequencies and powers: the lowest f that still meets the deadline at full power,
    f = cycles / (deadline - down - upload at p_max) clipped to [f_min, f_max]; then the
    lowest p that uploads in the time left, (2^(bits / (t b)) - 1) b / gain clipped to
    [p_min, p_max]. A member that cannot make the deadline runs at f_max and p_max."""
    up_full = upload_s(m.bits, bandwidth_hz, m.gain_hz_w * m.p_max_w)
    left = deadline_s - m.down_s - up_full
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(left > 0, m.cycles / left, np.inf)
    f = np.clip(f, m.f_min_hz, m.f_max_hz)
    upload_left = deadline_s - m.down_s - m.cycles / f
    p = np.array(
        [
            power_for_w(b, w, g, t)
            for b, w, g, t in zip(
                m.bits.tolist(), bandwidth_hz.tolist(), m.gain_hz_w.tolist(), upload_left.tolist()
            )
        ]
    )
    p = np.clip(p, m.p_min_w, m.p_max_w)
    return f, p


def min_energy(m: Members, bandwidth_hz: np.ndarray, deadline_s: float) -> tuple:
    """[C] frequencies and powers of least energy that meet the deadline (Yang et al.,
    "Energy Efficient Federated Learning Over Wireless Communication Networks", IEEE TWC
    2021, its per-device problem for a given band). With t_c the compute and t_u the upload
    seconds: minimise kappa c^3 / t_c^2 + (p(t_u) + circuit) t_u subject to t_c + t_u <=
    deadline - down, f = c / t_c in [f_min, f_max], p(t_u) = (2^(bits / (t_u b)) - 1) b /
    gain in [p_min, p_max]. Both terms are convex in their time (the upload's is the
    perspective of a convex function plus a line), so the problem is convex. The compute
    term falls as t_c grows; the upload term has its own best time u* (the slowest upload
    without circuit power; with it, a faster one can cost less), found by scipy's bounded
    Brent; then t_u = min(u*, deadline - down - t_c) and the same method minimises over
    t_c alone. A member that cannot make the deadline runs at f_max and p_max."""
    f_out, p_out = m.f_max_hz.copy(), m.p_max_w.copy()
    for k in range(len(m.bits)):
        got = _least_energy(
            float(m.cycles[k]),
            float(m.bits[k]),
            float(bandwidth_hz[k]),
            float(m.gain_hz_w[k]),
            (float(m.f_min_hz[k]), float(m.f_max_hz[k])),
            (float(m.p_min_w[k]), float(m.p_max_w[k])),
            float(m.kappa[k]),
            float(m.circuit_w[k]),
            deadline_s - float(m.down_s[k]),
        )
        if got is not None:  # else infeasible: full speed, full power
            f_out[k], p_out[k] = got
    return f_out, p_out


def _least_energy(
    cycles: float,
    bits: float,
    band_hz: float,
    gain_hz_w: float,
    f_hz: tuple[float, float],
    p_w: tuple[float, float],
    kappa: float,
    circuit_w: float,
    left_s: float,
) -> tuple[float, float] | None:
    """One member's (f, p) of `min_energy` with `left_s` for compute and upload; None where
    even f_max and p_max miss it."""
    (f_lo, f_hi), (p_lo, p_hi) = f_hz, p_w
    u_fast = float(upload_s(bits, band_hz, gain_hz_w * p_hi))
    u_slow = float(upload_s(bits, band_hz, gain_hz_w * p_lo))

    def upload_j(t_u: float) -> float:
        p = min(max(power_for_w(bits, band_hz, gain_hz_w, t_u), p_lo), p_hi)
        return (p + circuit_w) * float(upload_s(bits, band_hz, gain_hz_w * p))

    # the upload's own best time: with circuit power a slower upload is not always cheaper
    u_best = _argmin(upload_j, u_fast, u_slow)

    def power_w(t_c: float) -> float:
        t_u = min(left_s - t_c, u_best)
        return min(max(power_for_w(bits, band_hz, gain_hz_w, t_u), p_lo), p_hi)

    if cycles == 0:
        return (f_hi, power_w(0.0)) if left_s >= u_fast else None
    lo, hi = cycles / f_hi, min(cycles / f_lo, left_s - u_fast)
    if hi < lo:
        return None

    def energy_j(t_c: float) -> float:
        return kappa * cycles**3 / t_c**2 + upload_j(min(left_s - t_c, u_best))

    t_c = _argmin(energy_j, lo, hi)
    return cycles / t_c, power_w(t_c)


def _argmin(fn: Any, lo: float, hi: float) -> float:
    """The minimiser of a convex `fn` on [lo, hi]: scipy's bounded Brent, or a bound."""
    if hi - lo <= 1e-12 * hi:
        return hi
    got = minimize_scalar(fn, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10 * hi})
    return float(min((lo, hi, float(got.x)), key=fn))  # an optimum on a bound, exactly


def evaluate(
    m: Members,
    bandwidth_hz: np.ndarray,
    cpu_hz: np.ndarray,
    tx_power_w: np.ndarray,
    deadline_s: float | None,
) -> Allocation:
    """The plan's finish instants and joules of an allocation."""
    compute_s = m.cycles / cpu_hz
    up_s = upload_s(m.bits, bandwidth_hz, m.gain_hz_w * tx_power_w)
    finish = m.down_s + compute_s + up_s
    energy = m.kappa * m.cycles * cpu_hz * cpu_hz + (tx_power_w + m.circuit_w) * up_s
    feasible = (
        np.ones(len(finish), dtype=bool)
        if deadline_s is None
        else finish <= deadline_s * (1 + 1e-9)
    )
    return Allocation(bandwidth_hz, cpu_hz, tx_power_w, finish, energy, feasible)
