import pytest
import torch

from flnet.scenario import load_scenario, merge

torch.set_num_threads(1)

BASE = {
    "name": "test",
    "seed": 0,
    "device": "cpu",
    "algorithm": {"name": "fedavg", "cohort": {"clients_per_round": 5},
                  "local": {"steps": 2, "batch_size": 8, "lr": 0.05}},
    "clients": {"count": 10},
    "run": {"rounds": 3},
}


@pytest.fixture
def scenario(tmp_path):
    """scenario(**sections) -> a validated small scenario writing under tmp_path."""

    def make(**sections):
        data = merge(BASE, {"output": {"dir": str(tmp_path / "out")}})
        return load_scenario(data=merge(data, sections))

    return make
