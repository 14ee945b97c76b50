"""Plausible ranges of the physical fields, and the limits the physics sets.

A value far outside its plausible range is most often a unit slip (`bandwidth_hz: 20` meant
20 MHz, `cpu_hz: 1.5` meant 1.5 GHz): flnet warns, naming the field and the unit it was
probably meant in, and runs anyway. A value that breaks the formulas is refused (the schema
does that, with these constants):

- a distance below `REFERENCE_DISTANCE_M` (1 m): the log-distance path-loss model
  ``PL = PL_1km + slope * log10(d_km)`` is a far-field model; at d -> 0 its gain grows without
  bound (1e-9 m gives +323 dB of gain). The 3GPP macro-cell form (128.1 + 37.6 log10 d_km) is
  specified for d >= 35 m (3GPP TR 36.942, minimum UE-to-base-station distance), so 1..35 m
  is warned about, not refused: indoor models with other constants are fine there.
- a path loss below 0 dB at the nearest distance: the receiver would get more power than was
  sent;
- a band narrower than `MIN_BANDWIDTH_HZ` (1 Hz): ``b log2(1 + S / (N0 b))`` overflows long
  before it means anything (1e-300 Hz gave "inf bit/s").

The table below is also in docs/reference/plausible-ranges.md.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from flnet.config import Strict
from flnet.dists import AnyDist

REFERENCE_DISTANCE_M = 1.0
MACRO_MIN_DISTANCE_M = 35.0
MIN_BANDWIDTH_HZ = 1.0
LOGNORMAL_TAIL_SIGMAS = 6.0  # a lognormal "reaches" median * exp(-6 sigma): 1e-9 per client


class Range(NamedTuple):
    low: float
    high: float
    unit: str
    typical: float


PLAUSIBLE: dict[str, Range] = {
    "clients.cpu_hz": Range(1e6, 1e11, "Hz", 1e9),
    "clients.flops_per_cycle": Range(0.1, 1e5, "FLOP/cycle", 4.0),
    "clients.kappa": Range(1e-32, 1e-24, "J/(cycle Hz^2)", 1e-28),
    "radio.uplink.bandwidth_hz": Range(1e3, 1e10, "Hz", 1e7),
    "radio.downlink.bandwidth_hz": Range(1e3, 1e10, "Hz", 1e7),
    "radio.tx_power_dbm": Range(-40.0, 40.0, "dBm", 10.0),
    "radio.ap_tx_power_dbm": Range(-20.0, 70.0, "dBm", 30.0),
    "radio.tx_circuit_power_w": Range(0.0, 20.0, "W", 0.1),
    "radio.rx_power_w": Range(0.0, 20.0, "W", 0.1),
    "radio.distance_m": Range(MACRO_MIN_DISTANCE_M, 1e5, "m", 250.0),
    "radio.noise_psd_dbm_hz": Range(-210.0, -130.0, "dBm/Hz", -174.0),
    "radio.shadowing_std_db": Range(0.0, 20.0, "dB", 8.0),
    "radio.path_loss_at_1km_db": Range(60.0, 200.0, "dB", 128.1),
    "radio.path_loss_slope_db": Range(10.0, 80.0, "dB/decade", 37.6),
    "clients.capacity_trace.compute_power_w": Range(1e-3, 50.0, "W", 2.0),
    "radio.uplink_snr_db": Range(-30.0, 60.0, "dB", 20.0),
    "radio.downlink_snr_db": Range(-30.0, 60.0, "dB", 20.0),
    "radio.d2d.bandwidth_hz": Range(1e3, 1e10, "Hz", 1e6),
    "radio.d2d.snr_db": Range(-30.0, 60.0, "dB", 20.0),
    "radio.d2d.path_loss.exponent": Range(1.5, 6.0, "", 3.0),
    "radio.d2d.path_loss.carrier_hz": Range(1e8, 1e11, "Hz", 2.4e9),
    "radio.d2d.path_loss.shadowing_std_db": Range(0.0, 20.0, "dB", 4.0),
    "radio.d2d.path_loss.noise_psd_dbm_hz": Range(-210.0, -130.0, "dBm/Hz", -174.0),
}

_PREFIXES = {"Hz": (("kHz", 1e3), ("MHz", 1e6), ("GHz", 1e9)), "m": (("km", 1e3),)}


def _span(value: Any) -> tuple[float, float] | None:
    """Lowest and highest value a field's number or distribution names (None: not numeric)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), float(value)
    kind = getattr(value, "kind", None)
    if kind == "constant":
        return value.value, value.value
    if kind == "uniform":
        return value.low, value.high
    if kind in ("choice", "per_client"):
        return min(value.values), max(value.values)
    if kind == "lognormal":
        return value.median, value.median
    if kind == "normal":
        return value.mean, value.mean
    return None


def num(x: float) -> str:
    """A number as people write it in YAML: 1e6, 1.5e9, 20, -174."""
    if x == 0 or 1e-3 <= abs(x) < 1e3:
        return f"{x:g}"
    mantissa, exp = f"{x:.4e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exp)}"


def _hint(field: str, value: float, r: Range) -> str:
    """The unit the value was probably meant in, when one is likely."""
    if value < r.low and r.unit in _PREFIXES and value > 0:
        fits = [
            (abs(math.log10(value * f / r.typical)), name, f)
            for name, f in _PREFIXES[r.unit]
            if r.low <= value * f <= r.high
        ]
        if fits:
            _, name, f = min(fits)
            return f"; did you mean {num(value)} {name} ({num(value)}e{round(math.log10(f))})?"
    if r.unit == "dBm" and value > r.high:
        return f"; did you mean {num(value)} mW ({10 * math.log10(value):.3g} dBm)?"
    if r.unit == "W" and value > r.high:
        return f"; did you mean {num(value)} mW ({num(value / 1e3)} W)?"
    if r.unit == "dB" and field.endswith("snr_db") and value > r.high:
        return f"; did you mean the linear ratio {num(value)} ({10 * math.log10(value):.3g} dB)?"
    if r.unit == "dBm/Hz" and value > r.high:
        if value > 0:
            return f"; did you mean {num(value)} W/Hz ({10 * math.log10(value) + 30:.4g} dBm/Hz)?"
        return (
            "; that looks like a noise power over a band, not a density (thermal noise is "
            "-174 dBm/Hz)"
        )
    return f" (typical: {num(r.typical)} {r.unit})"


def implausible(scenario: Strict) -> list[str]:
    """One line per field whose value is far outside its plausible range (`scenario`: a
    validated `flnet.scenario.Scenario`; its fields are read by their dotted names)."""
    lines = []
    for field, r in PLAUSIBLE.items():
        node: Any = scenario
        for part in field.split("."):
            node = getattr(node, part, None)
        span = _span(node)
        if span is None:
            continue
        for value, side, _bound in ((span[0], "below", r.low), (span[1], "above", r.high)):
            if (value < r.low) if side == "below" else (value > r.high):
                lines.append(
                    f"{field} = {num(value)} {r.unit} is far {side} the plausible "
                    f"range {num(r.low)}..{num(r.high)} {r.unit}"
                    f"{_hint(field, value, r)}"
                )
                break
    return lines


def nearest_distance_m(distance: AnyDist) -> float:
    """The smallest distance a distribution can give a client (a lognormal: its 6-sigma
    tail, reached by about one client in a billion)."""
    if distance.kind == "lognormal":
        return distance.median * math.exp(-LOGNORMAL_TAIL_SIGMAS * distance.sigma)
    span = _span(distance)
    assert span is not None  # a distribution always spans
    return span[0]


def farthest_distance_m(distance: AnyDist) -> float:
    if distance.kind == "lognormal":
        return distance.median * math.exp(LOGNORMAL_TAIL_SIGMAS * distance.sigma)
    span = _span(distance)
    assert span is not None  # a distribution always spans
    return span[1]
