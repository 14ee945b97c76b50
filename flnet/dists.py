"""Per-client parameter distributions in scenario files.

A device or radio parameter is either a number (every client the same) or a distribution that is
sampled once per client when the world is built, e.g. ``cpu_hz: {kind: lognormal, median: 1.0e9,
sigma: 0.5}`` for a lognormal spread of CPU speeds.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, cast

import numpy as np
from pydantic import Field, ValidationError, model_validator
from pydantic.functional_validators import BeforeValidator
from pydantic.json_schema import WithJsonSchema

from flnet.config import Strict
from flnet.errors import ScenarioError


class Lognormal(Strict):
    """exp(N(log median, sigma^2)): the usual model of device-speed spread."""

    kind: Literal["lognormal"]
    median: float = Field(gt=0, description="median, in the field's unit")
    sigma: float = Field(ge=0, description="std of the natural log (0: every client the median)")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.median * np.exp(self.sigma * rng.standard_normal(n))

    @property
    def low(self) -> float:
        return self.median * np.exp(-40 * self.sigma)  # positive; the far tail is never drawn


class Uniform(Strict):
    kind: Literal["uniform"]
    low: float = Field(description="smallest value, in the field's unit")
    high: float = Field(description="largest value, in the field's unit")

    @model_validator(mode="after")
    def _ordered(self) -> Uniform:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, n)


class Normal(Strict):
    kind: Literal["normal"]
    mean: float = Field(description="mean, in the field's unit")
    std: float = Field(ge=0, description="standard deviation, in the field's unit")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.mean + self.std * rng.standard_normal(n)

    @property
    def low(self) -> float:
        return -np.inf if self.std > 0 else self.mean


class Choice(Strict):
    """One of `values` per client, with optional `weights` (device tiers)."""

    kind: Literal["choice"]
    values: list[float] = Field(min_length=1, description="the values a client may get")
    weights: list[float] | None = Field(
        None, description="relative weight of each value (default: equal)"
    )

    @model_validator(mode="after")
    def _weights_match(self) -> Choice:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have one entry per value")
            if min(self.weights) < 0 or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        p = None if self.weights is None else np.asarray(self.weights) / sum(self.weights)
        return rng.choice(np.asarray(self.values, dtype=float), size=n, p=p)

    @property
    def low(self) -> float:
        return min(self.values)


class PerClient(Strict):
    """An explicit value for each client, in client order."""

    kind: Literal["per_client"]
    values: list[float] = Field(
        min_length=1, description="one value per client, in client order (count of them)"
    )

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if n != len(self.values):
            raise ScenarioError(f"per_client lists {len(self.values)} values for {n} clients")
        return np.asarray(self.values, dtype=float)

    @property
    def low(self) -> float:
        return min(self.values)


class Constant(Strict):
    kind: Literal["constant"] = "constant"
    value: float = Field(description="every client's value, in the field's unit")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=float)

    @property
    def low(self) -> float:
        return self.value


_KINDS: dict[str, type[Strict]] = {
    "lognormal": Lognormal,
    "uniform": Uniform,
    "normal": Normal,
    "choice": Choice,
    "per_client": PerClient,
    "constant": Constant,
}
AnyDist = Constant | Lognormal | Uniform | Normal | Choice | PerClient


def _parse(value: Any) -> AnyDist:
    if isinstance(value, tuple(_KINDS.values())):
        return cast(AnyDist, value)  # one of the kinds
    if isinstance(value, bool):
        raise ValueError("expected a number or a distribution, got a boolean")
    if isinstance(value, str):
        try:
            value = float(value)  # YAML reads 1e9 (no dot) as a string
        except ValueError:
            pass
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError("expected a finite number (not NaN or infinity)")
        return Constant(value=float(value))
    if isinstance(value, dict):
        kind = value.get("kind")
        if not isinstance(kind, str) or kind not in _KINDS:
            raise ValueError(
                f"distribution kind {str(kind)[:40]!r} is not known; allowed: " + ", ".join(_KINDS)
            )
        for key in ("values", "weights"):
            items = value.get(key)
            if isinstance(items, list) and any(isinstance(v, bool) for v in items):
                at = next(i for i, v in enumerate(items) if isinstance(v, bool))
                raise ValueError(
                    f"{kind} distribution: {key}[{at}]: expected a number, got "
                    f"{str(items[at]).lower()}"
                )
        try:
            return cast(AnyDist, _KINDS[kind].model_validate(value))
        except ValidationError as e:
            err = e.errors()[0]
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
            where = where.removeprefix(".")
            raise ValueError(
                f"{kind} distribution: {where + ': ' if where else ''}"
                f"{err['msg'].removeprefix('Value error, ')}"
            ) from None
    raise ValueError(
        "expected a number or a distribution such as "
        "{kind: lognormal, median: ..., sigma: ...}; kinds: " + ", ".join(_KINDS)
    )


_SCHEMA = {
    "anyOf": [{"type": "number"}]
    + [
        {"type": "object", "properties": {"kind": {"const": k}}, "required": ["kind"]}
        for k in _KINDS
    ]
}

# A field of these types may default to a plain number: `validate_default` runs it through the
# validator, which makes it a Constant. mypy sees only the annotation, hence the
# `# type: ignore[assignment]  # number -> Constant` beside such defaults.
Dist = Annotated[AnyDist, BeforeValidator(_parse), WithJsonSchema(_SCHEMA)]


def _positive(d: AnyDist) -> AnyDist:
    if not d.low > 0:
        raise ValueError(
            "must be positive for every client: use a number > 0, a lognormal, "
            "or a uniform/choice with values > 0"
        )
    return d


def _nonnegative(d: AnyDist) -> AnyDist:
    if not d.low >= 0:
        raise ValueError("must be >= 0 for every client")
    return d


def _fraction(d: AnyDist) -> AnyDist:
    """Every value a client can draw in [0, 1] (a state of charge). A normal's or lognormal's
    tail is unbounded and clipped to [0, 1] when drawn: there the centre must lie in [0, 1]."""
    named: list[tuple[str, float]]
    if isinstance(d, Constant):
        named = [("", d.value)]
    elif isinstance(d, (PerClient, Choice)):
        named = [("a value", v) for v in (min(d.values), max(d.values))]
    elif isinstance(d, Uniform):
        named = [("low", d.low), ("high", d.high)]
    elif isinstance(d, Normal):
        named = [("mean", d.mean)]
    else:
        named = [("median", d.median)]
    for name, value in named:
        if not 0 <= value <= 1:
            got = f" ({d.kind} with {name} {value:g})" if name else ""
            raise ValueError(f"must be a fraction in [0, 1] for every client{got}")
    return d


PositiveDist = Annotated[
    AnyDist, BeforeValidator(lambda v: _positive(_parse(v))), WithJsonSchema(_SCHEMA)
]
NonNegativeDist = Annotated[
    AnyDist, BeforeValidator(lambda v: _nonnegative(_parse(v))), WithJsonSchema(_SCHEMA)
]
FractionDist = Annotated[
    AnyDist, BeforeValidator(lambda v: _fraction(_parse(v))), WithJsonSchema(_SCHEMA)
]


def sample(d: AnyDist, rng: np.random.Generator, n: int) -> np.ndarray:
    """Draw one value per client: `[n]` float64."""
    return d.sample(rng, n)
