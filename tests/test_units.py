"""Units and physics: a value far outside its plausible range warns (naming the field and the
unit it was probably meant in); a value that breaks the formulas is refused, naming the field."""

import math
import warnings

import pytest

from flnet import units
from flnet.errors import ScenarioError, UnitWarning
from flnet.scenario import load_scenario

OK = {"algorithm": {"name": "fedavg"}}


def warnings_for(**sections):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_scenario(data={**OK, **sections})
    return [str(w.message) for w in caught if issubclass(w.category, UnitWarning)]


def test_defaults_are_plausible():
    assert warnings_for() == []


@pytest.mark.parametrize(
    "sections, line",
    [
        (
            {"radio": {"uplink": {"bandwidth_hz": 20}}},
            "radio.uplink.bandwidth_hz = 20 Hz is far below the plausible range 1e3..1e10 Hz; "
            "did you mean 20 MHz (20e6)?",
        ),
        (
            {"clients": {"cpu_hz": 1.5}},
            "clients.cpu_hz = 1.5 Hz is far below the plausible range 1e6..1e11 Hz; "
            "did you mean 1.5 GHz (1.5e9)?",
        ),
        ({"radio": {"tx_power_dbm": 200}}, "did you mean 200 mW (23 dBm)?"),
        (
            {"radio": {"distance_m": 2}},
            "radio.distance_m = 2 m is far below the plausible range "
            "35..1e5 m; did you mean 2 km (2e3)?",
        ),
        (
            {"radio": {"mode": "direct", "uplink_snr_db": 100}},
            "radio.uplink_snr_db = 100 dB is far above the plausible range -30..60 dB; "
            "did you mean the linear ratio 100 (20 dB)?",
        ),
        ({"radio": {"noise_psd_dbm_hz": -101}}, "a noise power over a band, not a density"),
        (
            {"clients": {"kappa": {"kind": "uniform", "low": 1e-28, "high": 1}}},
            "clients.kappa = 1 J/(cycle Hz^2) is far above",
        ),
        (
            {"radio": {"rx_power_w": {"kind": "per_client", "values": [0.1] * 9 + [100]}}},
            "did you mean 100 mW (0.1 W)?",
        ),
    ],
)
def test_implausible_values_warn_with_the_likely_unit(sections, line):
    lines = warnings_for(**sections)
    assert len(lines) == 1 and line in lines[0], lines


def test_a_warning_does_not_refuse():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc = load_scenario(data={**OK, "clients": {"cpu_hz": 1.5}})
    assert sc.clients.cpu_hz.value == 1.5


@pytest.mark.parametrize(
    "sections, field, words",
    [
        (
            {"radio": {"uplink": {"bandwidth_hz": 1e-300}}},
            "radio.uplink.bandwidth_hz",
            "below 1 Hz",
        ),
        ({"radio": {"distance_m": 1e-9}}, "radio.distance_m", "reference distance of 1 m"),
        (
            {"radio": {"distance_m": {"kind": "choice", "values": [0.5, 100]}}},
            "radio.distance_m",
            "did you mean km",
        ),
        (
            {"radio": {"distance_m": {"kind": "lognormal", "median": 100, "sigma": 1}}},
            "radio.distance_m",
            "6-sigma tail",
        ),
        ({"radio": {"path_loss_at_1km_db": 0}}, "radio.path_loss_at_1km_db", "below 0 dB"),
        ({"clients": {"cpu_hz": float("nan")}}, "clients.cpu_hz", "finite number"),
        (
            {
                "clients": {
                    "count": 2,
                    "kappa": {"kind": "per_client", "values": [1e-28, float("nan")]},
                }
            },
            "clients.kappa",
            "values[1]",
        ),
        (
            {"clients": {"count": 2, "cpu_hz": {"kind": "per_client", "values": [1e9, True]}}},
            "clients.cpu_hz",
            "values[1]: expected a number, got true",
        ),
        (
            {
                "radio": {
                    "tx_power_dbm": {"kind": "choice", "values": [10, 20], "weights": [1, False]}
                }
            },
            "radio.tx_power_dbm",
            "weights[1]: expected a number, got false",
        ),
    ],
)
def test_what_breaks_the_physics_is_refused_naming_the_field(sections, field, words):
    with pytest.raises(ScenarioError) as e:
        load_scenario(data={**OK, **sections})
    line = next(ln.strip() for ln in str(e.value).splitlines() if ln.strip().startswith(field))
    assert words in line


def test_a_lognormal_distance_whose_tail_stays_above_1_m_is_accepted():
    d = load_scenario(
        data={**OK, "radio": {"distance_m": {"kind": "lognormal", "median": 200, "sigma": 0.5}}}
    ).radio.distance_m
    assert units.nearest_distance_m(d) == pytest.approx(200 * math.exp(-3))


def test_a_distance_at_the_reference_keeps_a_path_loss_of_at_least_0_db():
    # 128.1 + 37.6 log10(0.001) = 15.3 dB at 1 m: accepted, with the below-35 m warning
    lines = warnings_for(radio={"distance_m": 1.0})
    assert len(lines) == 1 and "radio.distance_m = 1 m" in lines[0]


def test_number_format():
    assert [units.num(x) for x in (1e3, 1e10, 20, -174, 1.5e9, 2.5e-5, 0)] == [
        "1e3",
        "1e10",
        "20",
        "-174",
        "1.5e9",
        "2.5e-5",
        "0",
    ]


def test_sampled_values_a_tail_makes_impossible_are_refused_naming_the_field(scenario):
    from flnet.runner import check

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy's overflow warning: the draw is what is tested
        # the schema accepts it (its lower tail is positive); a quarter of the draws overflow
        sc = scenario(
            clients={"count": 50, "cpu_hz": {"kind": "lognormal", "median": 1e308, "sigma": 1}}
        )
        with pytest.raises(ScenarioError, match=r"clients.cpu_hz: client \d+ drew inf"):
            check(sc)
