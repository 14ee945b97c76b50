"""The README's guide: its complete example algorithm runs as printed."""

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from flnet import algorithms
from flnet.algorithms import ALGORITHMS
from flnet.algorithms.base import AlgorithmModule
from flnet.runner import StopRules, build


def readme_example() -> types.ModuleType:
    text = Path("README.md").read_text()
    guide = text[text.index("## Adding an algorithm") :]
    code = re.search(r"```python\n(.*?)```", guide, re.S).group(1)
    module = types.ModuleType("fedmean")
    sys.modules["fedmean"] = module  # dataclasses and pydantic look their module up
    try:
        exec(compile(code, "README.md", "exec"), module.__dict__)
    finally:
        del sys.modules["fedmean"]
    return module


def test_readme_example_algorithm_runs_and_takes_the_plain_mean(scenario):
    mod = readme_example()
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


def test_the_guides_module_and_every_registered_one_have_the_algorithm_shape():
    assert isinstance(readme_example(), AlgorithmModule)
    for name in ALGORITHMS:
        assert isinstance(ALGORITHMS[name], AlgorithmModule), name


def test_the_registry_refuses_a_module_without_the_algorithm_shape(monkeypatch):
    # the configs module has Configs but no State, init, progress or protocol
    monkeypatch.setitem(algorithms.MODULES, "configs", "flnet.algorithms.configs")
    with pytest.raises(TypeError, match="flnet.algorithms.configs is not an algorithm module"):
        ALGORITHMS["configs"]
