"""The algorithm records (`flnet.algorithms.records`) agree with what they describe: the
scenario's union, the registry, each algorithm's module (its Config, the pattern its protocol
runs on, the sizes of the messages it sends) and the configs' composition rule."""

import inspect
import sys
import types
from typing import get_args

import pandas as pd
import pytest
from conftest import BASE

from flnet import reuse
from flnet.algorithms import ALGORITHMS, MODULES, configs
from flnet.algorithms.base import AlgorithmModule
from flnet.algorithms.records import CONFIGS, RECORDS, AlgorithmRecord, Replay
from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.scenario import AlgorithmConfig, load_scenario, merge
from flnet.sim import patterns

PATTERNS = {name: getattr(patterns, name) for name in ("round_trip", "exchange", "stream")}


def patterns_reached(module: types.ModuleType) -> set[str]:
    """The patterns a module's protocol can call: those named in the module that defines its
    protocol, or in an algorithm module that one imports (whose helpers it calls)."""
    todo, seen, found = [sys.modules[module.protocol.__module__]], set(), set()
    while todo:
        current = todo.pop()
        if current.__name__ in seen:
            continue
        seen.add(current.__name__)
        for value in vars(current).values():
            found |= {name for name, pattern in PATTERNS.items() if value is pattern}
            if isinstance(value, types.ModuleType) and value.__name__.startswith("flnet.algo"):
                todo.append(value)
    return found


def test_the_scenarios_union_the_registry_and_the_records_list_the_same_algorithms():
    union = get_args(get_args(AlgorithmConfig)[0])  # Annotated[Union[...], discriminator]
    assert union == tuple(r.config for r in RECORDS.values()) == tuple(CONFIGS.values())
    assert MODULES == {name: r.module for name, r in RECORDS.items()}
    assert list(ALGORITHMS) == list(RECORDS)
    for name, record in RECORDS.items():
        assert record.config.model_fields["name"].default == name


@pytest.mark.parametrize("name", list(RECORDS))
def test_each_records_module_exports_its_config_and_runs_its_pattern(name):
    record = RECORDS[name]
    module = ALGORITHMS[name]
    assert module.__name__ == record.module
    assert module.Config is record.config and isinstance(module, AlgorithmModule)
    assert patterns_reached(module) == {record.pattern}
    # mypy checks the module's signatures against the shape from its last lines
    assert "_shape: AlgorithmModule[Config, State] = this_module" in inspect.getsource(module)


def test_the_pattern_finder_sees_a_sibling_modules_pattern():
    # dfedavg calls decentralized's helpers, which run `exchange`; drdm calls drfa's and feddyn's
    assert "exchange" not in vars(ALGORITHMS["dfedavg"])
    assert patterns_reached(ALGORITHMS["dfedavg"]) == {"exchange"}
    assert patterns_reached(ALGORITHMS["fedasync"]) == {"stream"}


@pytest.mark.parametrize(
    "name", [name for name, r in RECORDS.items() if isinstance(r.replay, Replay)]
)
def test_a_replayable_records_message_sizes_are_what_its_module_sends(tmp_path, name):
    """A timing-only run charges the record's message sizes (and extra forward passes, MOON's)
    where a full run charges what the module sends and computes: the costs must agree."""
    data = merge(BASE, {"algorithm": {"name": name}, "output": {"dir": str(tmp_path / name)}})
    scenario = load_scenario(data=data)
    full = run(scenario, write=False)
    timed = reuse.timing_only(scenario, write=False)
    costs = list(reuse.COST_COLUMNS)
    pd.testing.assert_frame_equal(timed.records[costs], full.records[costs], check_exact=True)
    assert full.records.bits_up.iloc[-1] > 0


def test_reuse_replays_the_round_trip_algorithms_whose_learning_ignores_timing():
    assert list(reuse.REPLAYABLE) == ["fedavg", "fedprox", "scaffold", "feddyn", "moon"]
    assert reuse.why_not({"algorithm": {"name": "drdm"}}) == RECORDS["drdm"].replay.why


def test_a_record_refuses_a_replay_that_is_not_a_round_trip():
    with pytest.raises(ValueError, match="only round trips are replayed, not exchange"):
        AlgorithmRecord(configs.DflConfig, "flnet.algorithms.dfl", "exchange", Replay(1, 1))


def test_the_registry_refuses_a_module_whose_config_is_not_its_records(monkeypatch):
    wrong = AlgorithmRecord(configs.FedAvgConfig, "flnet.algorithms.fedprox", "round_trip")
    monkeypatch.setitem(RECORDS, "fedavg", wrong)
    with pytest.raises(TypeError, match="fedprox.Config is not FedAvgConfig"):
        ALGORITHMS["fedavg"]


def test_configs_compose_and_are_final():
    """No algorithm's config inherits another's (equinox's rule): each is final."""
    for config in CONFIGS.values():
        assert getattr(config, "__final__", False), config.__name__
        others = [c for c in CONFIGS.values() if c is not config]
        assert not any(issubclass(config, other) for other in others), config.__name__


def test_of_the_gossip_algorithms_only_cdfl_refuses_lossy_links():
    """(The others send nothing device to device and refuse D2D losses: the matrix,
    tests/test_feature_matrix.py.)"""
    lossy = {"radio": {"d2d": {"loss_probability": 0.1}}}
    load_scenario(data={"algorithm": {"name": "dfl"}, **lossy})
    with pytest.raises(ScenarioError, match="must be 0 for cdfl"):
        load_scenario(data={"algorithm": {"name": "cdfl"}, **lossy})
