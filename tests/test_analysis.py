"""CI runs the smallest smoke version of each analysis script."""

import importlib.util
from pathlib import Path


def load(name):
    spec = importlib.util.spec_from_file_location(name, Path("analysis") / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tau_energy_smoke(tmp_path):
    table = load("tau_energy").main(["--smoke", "--out", str(tmp_path)])
    assert list(table.tau) == [1, 10]
    reached = table[table.reached]
    assert len(reached)
    parts = reached.energy_compute_j + reached.energy_radio_j
    assert (reached.energy_j - parts).abs().max() < 1e-12
    assert (tmp_path / "tau_to_target.csv").exists()
