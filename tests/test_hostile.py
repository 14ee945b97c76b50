"""Hostile and broken input: whatever a scenario holds, only flnet's own error comes out."""

import copy

import pytest
import yaml
from conftest import FUZZ_SCALE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flnet.errors import FlnetError, ScenarioError
from flnet.runner import Run, run
from flnet.scenario import Scenario, _unwrap, load_scenario


def field_paths(model, prefix=""):
    """Every dotted field path through the scenario's models (unions: every member)."""
    members = model if isinstance(model, tuple) else (model,)
    for m in members:
        for name, f in m.model_fields.items():
            path = f"{prefix}{name}"
            yield path
            sub = _unwrap(f.annotation)
            if isinstance(sub, tuple) or hasattr(sub, "model_fields"):
                yield from field_paths(sub, path + ".")


PATHS = sorted(set(field_paths(Scenario)))
VALID = {
    "name": "hostile",
    "device": "cpu",
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 3},
        "local": {"steps": 2, "batch_size": 4},
    },
    "clients": {"count": 6},
    "run": {"rounds": 1},
}

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(-5, 5), max_size=3),
    st.dictionaries(
        st.sampled_from(["kind", "mode", "name", "x", "values"]),
        st.one_of(st.integers(-3, 3), st.text(max_size=5)),
        max_size=2,
    ),
)


def set_path(data, path, value):
    node = data
    parts = path.split(".")
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value


mutations = st.lists(
    st.tuples(st.one_of(st.sampled_from(PATHS), st.text(min_size=1, max_size=8)), junk),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=300 * FUZZ_SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(changes=mutations)
def test_any_mutation_validates_or_fails_with_scenario_error(changes):
    data = copy.deepcopy(VALID)
    for path, value in changes:
        set_path(data, path, value)
    try:
        load_scenario(data=data)
    except ScenarioError as e:
        assert str(e).strip()


def _small(sc: Scenario) -> bool:
    local = sc.algorithm.local
    return sc.clients.count <= 50 and local.steps * local.batch_size <= 2000


@settings(max_examples=40 * FUZZ_SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=mutations)
def test_valid_looking_scenarios_run_or_fail_with_flnet_error(changes, tmp_path_factory):
    data = copy.deepcopy(VALID)
    for path, value in changes:
        if not path.startswith(("run.", "output.", "device")):
            set_path(data, path, value)
    try:
        sc = load_scenario(data=data)
    except ScenarioError:
        return
    if not _small(sc):
        return
    sc = load_scenario(
        data={
            **sc.model_dump(mode="json"),
            "run": {"rounds": 1},
            "output": {"dir": str(tmp_path_factory.mktemp("o"))},
        }
    )
    try:
        sim = Run(sc, write=False)
        sim.simulate()
    except FlnetError:
        pass


@settings(max_examples=200 * FUZZ_SCALE, deadline=None)
@given(text=st.text(max_size=200))
def test_any_text_file_loads_or_fails_with_scenario_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("y") / "s.yaml"
    path.write_text(text)
    try:
        load_scenario(path)
    except ScenarioError:
        pass


@pytest.mark.parametrize(
    "tag", ["!!python/object/apply:os.system ['touch pwned']", "!!python/name:os.system", "&a [*a]"]
)
def test_yaml_tags_never_construct_objects(tmp_path, monkeypatch, tag):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(f"name: {tag}\nalgorithm: {{name: fedavg}}\n")
    with pytest.raises(ScenarioError):
        load_scenario(tmp_path / "s.yaml")
    assert not (tmp_path / "pwned").exists()


def test_deadline_no_client_can_meet_is_named(scenario):
    with pytest.raises(ScenarioError, match="algorithm.cohort.deadline_s: .*fastest possible"):
        Run(
            scenario(
                algorithm={"name": "fedavg", "cohort": {"clients_per_round": 5, "deadline_s": 1e-6}}
            ),
            write=False,
        )


def test_impossible_dirichlet_minimum_is_named(scenario):
    with pytest.raises(ScenarioError, match="data.partition.min_size"):
        Run(
            scenario(data={"partition": {"kind": "dirichlet", "alpha": 0.01, "min_size": 140}}),
            write=False,
        )


def test_huge_sizes_are_refused_before_allocating(scenario):
    with pytest.raises(ScenarioError, match="algorithm.local.batch_size"):
        scenario(algorithm={"name": "fedavg", "local": {"batch_size": 10**12}})


def test_inf_and_nan_are_refused(scenario):
    for value in (float("inf"), float("nan")):
        with pytest.raises(ScenarioError, match="radio.uplink.bandwidth_hz"):
            scenario(radio={"uplink": {"bandwidth_hz": value}})


def test_cross_field_yaml_roundtrip_of_resolved_scenario(scenario):
    sc = scenario()
    again = load_scenario(data=yaml.safe_load(yaml.safe_dump(sc.model_dump(mode="json"))))
    assert again == sc


def test_links_without_a_finite_positive_rate_are_refused(scenario):
    # no signal: rate 0, a transfer would never end
    with pytest.raises(ScenarioError, match="radio: client 0's uplink has a rate"):
        Run(scenario(radio={"noise_psd_dbm_hz": 1e182}), write=False)


def test_a_gain_above_one_is_refused_by_the_schema(scenario):
    # infinite gain: a transfer would take no time (a path loss below 0 dB at 50 m)
    with pytest.raises(ScenarioError, match="radio.path_loss_at_1km_db: .* below 0 dB"):
        scenario(radio={"path_loss_at_1km_db": -4551484})


def test_a_very_weak_link_is_slow_not_stalled():
    from flnet.sim.radio import shannon_rate_bps

    rate = shannon_rate_bps(1e6, 1e-15)  # log2(1 + 1e-21) is 0 in floating point
    assert rate == pytest.approx(1e-15 / __import__("math").log(2))


def test_seed_out_of_range_is_named(scenario):
    with pytest.raises(ScenarioError, match="seed: must be <= 4294967295"):
        scenario(seed=2**32)


def test_a_d2d_link_without_a_finite_positive_rate_is_named(scenario):
    """A D2D SNR of -4000 dB is 0 in floating point: rate 0, a gossip message would never
    arrive. Links are made as pairs first talk, so the error comes then, naming radio.d2d."""
    sc = scenario(
        algorithm={
            "name": "dpsgd",
            "topology": {"kind": "ring"},
            "local": {"steps": 1, "batch_size": 8, "lr": 0.05},
        },
        radio={"mode": "direct", "d2d": {"snr_db": -4000}},
    )
    with pytest.raises(ScenarioError, match=r"radio\.d2d: the D2D link \d+ -> \d+ has a rate of 0"):
        run(sc, write=False)
