"""Wireless link formulas: path loss, SNR, Shannon rate, transfer time and energy.

SNR is carried as ``snr_hz = P * g / N0`` (received power over noise density, in Hz), so the
SNR on a share ``b`` of a band is ``snr_hz / b`` and the rate is ``b * log2(1 + snr_hz / b)``:
giving a transfer less bandwidth lowers its noise as well as its band, as in FDMA.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

LN2 = math.log(2.0)


def dbm_to_w(dbm: ArrayLike) -> np.ndarray:
    return 10.0 ** ((np.asarray(dbm, dtype=float) - 30.0) / 10.0)


def db_to_linear(db: ArrayLike) -> np.ndarray:
    return 10.0 ** (np.asarray(db, dtype=float) / 10.0)


def path_loss_db(
    distance_m: ArrayLike, at_1km_db: float = 128.1, slope_db: float = 37.6
) -> np.ndarray:
    """3GPP macro-cell path loss ``128.1 + 37.6 log10(d_km)`` dB."""
    return at_1km_db + slope_db * np.log10(np.asarray(distance_m, dtype=float) / 1000.0)


def snr_hz_physical(
    tx_power_w: ArrayLike, path_loss_db_: ArrayLike, noise_psd_w_hz: float
) -> np.ndarray:
    """``P g / N0`` with ``g = 10^(-PL/10)`` (shadowing folded into PL)."""
    return np.asarray(tx_power_w) * 10.0 ** (-np.asarray(path_loss_db_) / 10.0) / noise_psd_w_hz


def snr_hz_direct(snr_db: ArrayLike, bandwidth_hz: float) -> np.ndarray:
    """A link whose SNR over its whole band `bandwidth_hz` is `snr_db`."""
    return db_to_linear(snr_db) * bandwidth_hz


def shannon_rate_bps(bandwidth_hz: Any, snr_hz: Any) -> Any:
    """``b log2(1 + snr_hz / b)`` bits per second on a band of `bandwidth_hz` (via log1p, so a
    very weak link has a tiny rate, not zero). A float SNR skips numpy (a microsecond a call,
    on the simulation's hot path)."""
    if isinstance(snr_hz, float):
        return bandwidth_hz * math.log1p(snr_hz / bandwidth_hz) / LN2
    return bandwidth_hz * np.log1p(snr_hz / bandwidth_hz) / LN2


def transfer_time_s(bits: Any, bandwidth_hz: float, snr_hz: Any) -> Any:
    return bits / shannon_rate_bps(bandwidth_hz, snr_hz)
