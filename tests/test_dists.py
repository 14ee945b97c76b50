"""Per-client distributions: what each draws, and what the schema lets through."""

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from flnet.dists import Choice, Constant, Dist, Lognormal, PerClient, PositiveDist, Uniform, sample
from flnet.errors import ScenarioError


def rng(seed=0):
    return np.random.default_rng(seed)


def test_lognormal_has_the_given_median_and_log_spread():
    x = sample(Lognormal(kind="lognormal", median=2e9, sigma=0.5), rng(), 40_000)
    assert np.median(x) == pytest.approx(2e9, rel=0.02)
    assert np.log(x).std() == pytest.approx(0.5, rel=0.02)


def test_uniform_stays_in_its_interval_and_a_point_interval_is_a_constant():
    x = sample(Uniform(kind="uniform", low=50, high=500), rng(), 10_000)
    assert x.min() >= 50 and x.max() < 500 and x.mean() == pytest.approx(275, rel=0.02)
    assert (sample(Uniform(kind="uniform", low=3, high=3), rng(), 5) == 3).all()


def test_choice_follows_its_weights():
    x = sample(Choice(kind="choice", values=[1.0, 2.0], weights=[1, 3]), rng(), 40_000)
    assert (x == 2.0).mean() == pytest.approx(0.75, abs=0.01)
    assert (
        sample(Choice(kind="choice", values=[1.0, 2.0], weights=[0, 5]), rng(), 50) == 2.0
    ).all()


def test_per_client_keeps_client_order_and_needs_one_value_each():
    d = PerClient(kind="per_client", values=[3.0, 1.0, 2.0])
    assert sample(d, rng(), 3).tolist() == [3.0, 1.0, 2.0]
    with pytest.raises(ScenarioError, match="3 values for 4 clients"):
        sample(d, rng(), 4)


def test_draws_depend_only_on_the_generator():
    d = Lognormal(kind="lognormal", median=1.0, sigma=1.0)
    assert np.array_equal(sample(d, rng(7), 10), sample(d, rng(7), 10))
    assert not np.array_equal(sample(d, rng(7), 10), sample(d, rng(8), 10))


def parse(value, kind=Dist):
    return TypeAdapter(kind).validate_python(value)


def test_numbers_and_yaml_strings_become_constants():
    assert parse(5) == Constant(value=5.0)
    assert parse("1e9") == Constant(value=1e9)  # YAML 1.1 reads 1e9 as a string


@pytest.mark.parametrize(
    "value, words",
    [
        (True, "boolean"),
        (float("nan"), "finite number"),
        ("fast", "expected a number or a distribution"),
        ({"kind": "gamma"}, "'gamma' is not known; allowed: lognormal, uniform"),
        ({"kind": "uniform", "low": 2, "high": 1}, "high (1.0) must be >= low (2.0)"),
        ({"kind": "choice", "values": [1, 2], "weights": [1]}, "one entry per value"),
        ({"kind": "choice", "values": [1, 2], "weights": [0, 0]}, "positive sum"),
        ({"kind": "per_client", "values": [1, True]}, "values[1]: expected a number, got true"),
    ],
)
def test_bad_distributions_are_refused_with_the_reason(value, words):
    with pytest.raises(ValidationError) as e:
        parse(value)
    assert words in str(e.value)


@pytest.mark.parametrize(
    "value",
    [
        0,
        -1,
        {"kind": "normal", "mean": 5, "std": 1},
        {"kind": "uniform", "low": 0, "high": 1},
        {"kind": "choice", "values": [1, 0]},
    ],
)
def test_positive_fields_refuse_any_chance_of_zero_or_less(value):
    with pytest.raises(ValidationError, match="positive for every client"):
        parse(value, PositiveDist)


def test_positive_fields_accept_a_lognormal_and_a_normal_without_spread():
    assert parse({"kind": "lognormal", "median": 1, "sigma": 3}, PositiveDist).kind == "lognormal"
    assert parse({"kind": "normal", "mean": 5, "std": 0}, PositiveDist).kind == "normal"
