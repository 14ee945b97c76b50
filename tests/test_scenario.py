import json

import pytest
import yaml

from flnet.errors import ScenarioError
from flnet.scenario import Scenario, json_schema, load_scenario

OK = {"algorithm": {"name": "fedavg"}}

BROKEN = [  # (scenario fragment, field named in the message, words the message must hold)
    ({"foo": 1}, "foo", "unknown field"),
    (
        {"algorithm": {"name": "fedavgg"}},
        "algorithm",
        "unknown name 'fedavgg'; allowed: 'fedavg', ",
    ),
    ({"algorithm": {"name": "fedavg", "local": {"lr": -1}}}, "algorithm.local.lr", "> 0"),
    (
        {"algorithm": {"name": "fedavg", "local": {"lrr": 1}}},
        "algorithm.local.lrr",
        "allowed fields here: batch_size, drop_last, epochs, lr",
    ),
    ({"radio": {"uplink": {"bandwidth_hz": -5}}}, "radio.uplink.bandwidth_hz", "> 0"),
    ({"radio": {"uplink": {"bandwidth_hz": "wide"}}}, "radio.uplink.bandwidth_hz", "number"),
    ({"radio": {"mode": "satellite"}}, "radio", "'physical', 'direct'"),
    ({"radio": {"mode": "direct", "uplink_snr_db": "abc"}}, "radio.uplink_snr_db", "distribution"),
    ({"clients": {"count": "ten"}}, "clients.count", "integer"),
    ({"clients": {"cpu_hz": -3}}, "clients.cpu_hz", "positive"),
    ({"clients": {"cpu_hz": {"kind": "gamma"}}}, "clients.cpu_hz", "lognormal"),
    (
        {"clients": {"count": 3, "kappa": {"kind": "per_client", "values": [1, 2]}}},
        "clients.kappa",
        "clients.count = 3",
    ),
    ({"data": {"partition": {"kind": "dirichlet"}}}, "data.partition.alpha", "required"),
    ({"data": {"dataset": "imagenet"}}, "data.dataset", "'digits'"),
    ({"model": {"hidden": [64, 0]}}, "model.hidden[1]", ">= 1"),
    ({"data": {"dataset": "svhn"}}, "data.dataset", "'cifar100'"),
    ({"data": {"partition": {"kind": "shards"}}}, "data.partition.classes_per_client", "required"),
    ({"data": {"partition": {"kind": "zipf", "sigma": -1}}}, "data.partition.sigma", ">= 0"),
    (
        {"data": {"partition": {"kind": "lognormal", "sigma": 1, "alpha": 0}}},
        "data.partition.alpha",
        "> 0",
    ),
    ({"data": {"partition": {"kind": "pathological"}}}, "data.partition", "'shards'"),
    ({"data": {"partition": {"kind": "natural"}}}, "data.partition.kind", "'synthetic'"),
    (
        {
            "data": {
                "dataset": "synthetic",
                "partition": {"kind": "natural"},
                "local_test_fraction": 0.2,
            }
        },
        "data.local_test_fraction",
        "natural",
    ),
    ({"data": {"local_test_fraction": 0}}, "data.local_test_fraction", "> 0"),
    ({"data": {"features": {"kind": "vgg"}}}, "data.features", "'random_relu'"),
    ({"data": {"synthetic": {"alpha": -1}}}, "data.synthetic.alpha", ">= 0"),
    ({"model": {"kind": "cnn_lenet"}}, "model", "'cnn_kmnist'"),
    ({"model": {"kind": "cnn_kmnist", "hidden": [3]}}, "model.hidden", "unknown field"),
    ({"model": {"kind": "resnet18", "norm_groups": 3}}, "model.norm_groups", "divide"),
    (
        {
            "clients": {"count": 5},
            "algorithm": {"name": "fedavg", "cohort": {"clients_per_round": 10}},
        },
        "algorithm.cohort.clients_per_round",
        "clients.count is 5",
    ),
    ({"run": {"rounds": 1.5}}, "run.rounds", "integer"),
    ({"device": "tpu"}, "device", "'auto'"),
    # YAML's true/false would pass as 1/0 wherever a number goes
    (
        {"radio": {"uplink": {"bandwidth_hz": True}}},
        "radio.uplink.bandwidth_hz",
        "expected a number, got true",
    ),
    ({"seed": False}, "seed", "expected a number, got false"),
    ({"run": {"time_budget_s": True}}, "run.time_budget_s", "expected a number"),
    (
        {
            "algorithm": {
                "name": "fedavg",
                "local": {"optimizer": {"name": "sgd", "momentum": True}},
            }
        },
        "algorithm.local.optimizer.momentum",
        "expected a number",
    ),
    ({"clients": {"cpu_hz": True}}, "clients.cpu_hz", "boolean"),
    (
        {"clients": {"cpu_hz": {"kind": "lognormal", "median": True, "sigma": 0.1}}},
        "clients.cpu_hz",
        "median: expected a number, got true",
    ),
]


@pytest.mark.parametrize("fragment,field,words", BROKEN)
def test_malformed_scenario_names_field_and_what_is_allowed(fragment, field, words):
    with pytest.raises(ScenarioError) as err:
        load_scenario(data={**OK, **fragment})
    lines = str(err.value).splitlines()[1:]
    assert any(line.strip().startswith(f"{field}:") and words in line for line in lines), lines


def test_booleans_stay_booleans():
    sc = load_scenario(data={**OK, "radio": {"rayleigh_fading": True}})
    assert sc.radio.rayleigh_fading is True


def test_missing_algorithm_is_named():
    with pytest.raises(ScenarioError, match="algorithm: this field is required"):
        load_scenario(data={})


def test_defaults_fill_a_minimal_scenario():
    sc = load_scenario(data=OK)
    assert sc.radio.mode == "physical" and sc.model.kind == "mlp"
    assert sc.algorithm.local.steps == 10 and sc.clients.count == 10


def test_yaml_reads_1e9_without_a_dot_as_a_number():
    sc = load_scenario(data={**OK, "clients": {"cpu_hz": "2e9"}})
    assert sc.clients.cpu_hz.value == 2e9


def test_extends_merges_and_overrides(tmp_path):
    (tmp_path / "base.yaml").write_text(
        yaml.safe_dump({"name": "base", "seed": 3, **OK, "clients": {"count": 20, "cpu_hz": 2e9}})
    )
    (tmp_path / "child.yaml").write_text(
        yaml.safe_dump({"extends": "base.yaml", "clients": {"count": 40}})
    )
    sc = load_scenario(tmp_path / "child.yaml", ["algorithm.local.lr=0.2", "seed=7"])
    assert sc.name == "child"  # a child keeps its own name, not the base's
    assert sc.clients.count == 40 and sc.clients.cpu_hz.value == 2e9
    assert sc.algorithm.local.lr == 0.2 and sc.seed == 7


def test_extends_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ScenarioError, match="cycle"):
        load_scenario(tmp_path / "a.yaml")


@pytest.mark.parametrize(
    "text,words",
    [
        ("algorithm: [unclosed\n", "not valid YAML at line"),
        ("- just\n- a list\n", "top level must be a mapping"),
        ("!!python/object:os.system {}\n", "not valid YAML"),
    ],
)
def test_broken_files(tmp_path, text, words):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=words):
        load_scenario(path)


def test_missing_file():
    with pytest.raises(ScenarioError, match="not found"):
        load_scenario("no/such/file.yaml")


def test_json_schema_describes_the_scenario():
    schema = json.loads(json_schema())
    assert set(schema["properties"]) == set(Scenario.model_fields)
    assert "algorithm" in schema["required"]


def test_every_shipped_scenario_validates():
    from pathlib import Path

    for path in Path("scenarios").glob("*.yaml"):
        load_scenario(path)


def test_committed_json_schema_is_current():
    """scenario.schema.json (for editors) matches the schema: regenerate with `flnet schema`."""
    from pathlib import Path

    assert json.loads(Path("scenario.schema.json").read_text()) == json.loads(json_schema())


def test_switching_a_variant_keeps_only_the_fields_the_new_one_has():
    from flnet.scenario import merge

    base = {
        "algorithm": {"name": "fedavg", "cohort": {"clients_per_round": 5}},
        "model": {"kind": "mlp", "hidden": [32]},
    }
    switched = merge(
        base, {"algorithm": {"name": "fedprox", "mu": 0.1}, "model": {"kind": "logistic"}}
    )
    assert switched["algorithm"] == {
        "name": "fedprox",
        "mu": 0.1,
        "cohort": {"clients_per_round": 5},
    }
    assert switched["model"] == {"kind": "logistic"}
    load_scenario(data=switched)


def test_an_alias_bomb_is_refused_quickly_without_echoing_it(tmp_path):
    import corpus

    path = tmp_path / "bomb.yaml"
    path.write_text(corpus.BOMB + "name: *i\nalgorithm: {name: fedavg}\n")
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    assert "YAML aliases" in str(e.value) and len(str(e.value)) < 300


def test_a_few_aliases_are_fine_and_a_huge_value_is_cut_short_in_messages(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "algorithm: &a {name: fedavg}\nname: &n [" + ", ".join(["12345"] * 5000) + "]\n"
    )
    with pytest.raises(ScenarioError) as e:
        load_scenario(path)
    (line,) = [ln for ln in str(e.value).splitlines() if ln.strip().startswith("name:")]
    assert len(line) < 200 and "..." in line


def test_a_value_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("algorithm: {name: fedavg}\nname: &a [*a]\n")
    with pytest.raises(ScenarioError, match="contain itself"):
        load_scenario(path)


def test_an_oversized_file_is_refused_before_parsing(tmp_path, monkeypatch):
    from flnet import scenario

    monkeypatch.setattr(scenario, "MAX_FILE_BYTES", 100)
    path = tmp_path / "s.yaml"
    path.write_text("algorithm: {name: fedavg}\n# " + "x" * 200 + "\n")
    with pytest.raises(ScenarioError, match="at most 0 MiB"):
        load_scenario(path)


@pytest.mark.parametrize(
    "name, words",
    [
        ("x/../..", "path separator"),
        ("", "is empty"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a\\b", "path separator"),
        ("a\0b", "NUL"),
        ("é" * 128, "longer than 255 bytes"),
    ],
)
def test_a_name_must_be_one_plain_path_component(name, words):
    with pytest.raises(ScenarioError) as e:
        load_scenario(data={**OK, "name": name})
    assert "name: " in str(e.value) and words in str(e.value)
    assert "one plain path component" in str(e.value)


def test_plain_names_are_accepted():
    for name in ("quickstart", "a.b", "x y", "é" * 127, "n" * 255):
        assert load_scenario(data={**OK, "name": name}).name == name
