"""The guide "Add an algorithm" (docs/how-to/add-algorithm.md): its complete example
algorithm, registered by its record as the guide says, runs as printed."""

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from test_algorithm_records import patterns_reached

from flnet.algorithms import ALGORITHMS, configs
from flnet.algorithms.base import AlgorithmModule
from flnet.algorithms.records import RECORDS, AlgorithmRecord, Replay
from flnet.runner import StopRules, build

GUIDE = "docs/how-to/add-algorithm.md"


def guide_code() -> tuple[str, str]:
    """The guide's two listings: the light record (its Config and AlgorithmRecord), then the
    module."""
    guide = (Path(__file__).resolve().parent.parent / GUIDE).read_text()
    record, module = re.findall(r"```python\n(.*?)```", guide, re.S)[:2]
    return record, module


def as_module(name: str, code: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module  # dataclasses and pydantic look their module up
    try:
        exec(compile(code, GUIDE, "exec"), module.__dict__)
    finally:
        del sys.modules[name]
    return module


@pytest.fixture
def fedmean(monkeypatch) -> types.ModuleType:
    """The guide's algorithm, added as the guide says: its Config in the configs module, its
    record in RECORDS, its module where the record says."""
    record_code, module_code = guide_code()
    light = as_module("fedmean_record", record_code)
    monkeypatch.setattr(configs, "FedMeanConfig", light.FedMeanConfig, raising=False)
    module = as_module(light.FEDMEAN.module, module_code)
    monkeypatch.setitem(sys.modules, light.FEDMEAN.module, module)
    monkeypatch.setitem(RECORDS, "fedmean", light.FEDMEAN)
    return module


def test_the_guides_example_algorithm_runs_and_takes_the_plain_mean(scenario, fedmean):
    mod = fedmean
    sc = scenario(run={"rounds": 3})
    cfg = mod.Config(cohort={"clients_per_round": 4}, local={"steps": 2, "batch_size": 8})
    world, learner = build(sc)
    published = []

    class Keep:
        def on_start(self, world):
            pass

        def on_progress(self, world, progress, stopping):
            published.append(progress)

        def on_end(self, world, reason):
            pass

    world.observers = [StopRules(sc), Keep()]
    state = mod.init(learner, cfg)
    world.env.run(until=world.env.process(mod.protocol(world, learner, cfg, state)))
    assert [p.step for p in published] == [1, 2, 3]
    assert np.diff([p.sim_time_s for p in published]).min() > 0
    assert world.ledger.bits["upload"] > 0 and world.events == 12
    # round 1 by hand: the plain mean of the four clients' local models
    cohort = world.sample_clients(4, 1)
    work = learner.local_train(cohort, state.x, cfg.local, 1)
    assert np.allclose(published[0].model.numpy(), work.params.mean(0).numpy(), atol=1e-6)


def test_the_guides_record_registers_its_module_with_the_algorithm_shape(fedmean):
    assert ALGORITHMS["fedmean"] is fedmean and isinstance(fedmean, AlgorithmModule)
    record = RECORDS["fedmean"]
    assert fedmean.Config is record.config and record.replay == Replay(1, 1)
    assert patterns_reached(fedmean) == {record.pattern}
    assert "fedmean" in list(ALGORITHMS)


def test_every_registered_module_has_the_algorithm_shape():
    for name in ALGORITHMS:
        assert isinstance(ALGORITHMS[name], AlgorithmModule), name


def test_the_registry_refuses_a_module_without_the_algorithm_shape(monkeypatch):
    # the configs module has Configs but no State, init, progress or protocol
    not_one = AlgorithmRecord(configs.FedAvgConfig, "flnet.algorithms.configs", "round_trip")
    monkeypatch.setitem(RECORDS, "configs", not_one)
    with pytest.raises(TypeError, match="flnet.algorithms.configs is not an algorithm module"):
        ALGORITHMS["configs"]
