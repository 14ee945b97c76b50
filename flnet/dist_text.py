"""A per-client distribution (`flnet.dists`) as results readers name it in a label.

A resolved scenario.yaml keeps a distribution field as a mapping (``cpu_hz: {kind: lognormal,
median: 1.0e+09, sigma: 0.5}``, a number as ``{kind: constant, value: ...}``) and a sweep's
tables keep it as that mapping's JSON text. Flattened field by field, its parts would name a
series by a parameter alone (``value=1000000000``, ``median=1000000000``); readers show the
field whole instead: a constant as its number, any other kind as ``lognormal(median=1e+09,
sigma=0.5)``. Light on purpose (no pydantic): `flnet.plot` and `flnet.report` read files only;
tests/test_dist_text.py checks the shapes here against `flnet.dists`.
"""

from __future__ import annotations

import json
import math
from typing import Any

# each kind's parameters: (required, optional), as `flnet.dists` declares them
SHAPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "constant": (("value",), ()),
    "lognormal": (("median", "sigma"), ()),
    "uniform": (("low", "high"), ()),
    "normal": (("mean", "std"), ()),
    "choice": (("values",), ("weights",)),
    "per_client": (("values",), ()),
}
LIST_SHOWN_UP_TO = 6  # a longer list of values is shown by its length


def as_distribution(value: Any) -> dict | None:
    """`value` as a distribution's mapping when it has one's shape (a kind above with its
    required parameters and no others), given as a mapping or as its JSON text; else None."""
    if isinstance(value, str) and value.startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not isinstance(kind := value.get("kind"), str):
        return None
    if kind not in SHAPES:
        return None
    required, optional = SHAPES[kind]
    keys = set(value) - {"kind"}
    return value if set(required) <= keys <= {*required, *optional} else None


def readable(value: Any) -> Any:
    """A distribution as a label shows it: a constant as its number, another kind as
    ``kind(parameter=value, ...)`` (parameters left unset omitted); anything else as it is."""
    dist = as_distribution(value)
    if dist is None:
        return value
    if dist["kind"] == "constant" and isinstance(dist["value"], (int, float)):
        return float(dist["value"])
    required, optional = SHAPES[dist["kind"]]
    shown = [f"{k}={_text(dist[k])}" for k in (*required, *optional) if dist.get(k) is not None]
    return f"{dist['kind']}({', '.join(shown)})"


def _text(value: Any) -> str:
    if isinstance(value, list):
        if len(value) > LIST_SHOWN_UP_TO:
            return f"[{len(value)} values]"
        return "[" + ", ".join(_text(v) for v in value) + "]"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value) or abs(value) >= 1e6:
        return f"{value:g}"
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
