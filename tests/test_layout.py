"""The layout rule "math in torch, time in SimPy": the time side never loads torch, the math
side never loads SimPy. Each module is imported in a fresh interpreter."""

import pkgutil
import subprocess
import sys

import pytest

import flnet.learn
import flnet.sim


def _modules(package) -> list[str]:
    return [package.__name__] + [
        m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
    ]


def _loads(module: str, forbidden: str) -> bool:
    code = f"import sys, {module}; print({forbidden!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip() == "True"


@pytest.mark.parametrize("module", _modules(flnet.sim))
def test_time_side_never_loads_torch(module):
    assert not _loads(module, "torch")


@pytest.mark.parametrize("module", _modules(flnet.learn))
def test_math_side_never_loads_simpy(module):
    assert not _loads(module, "simpy")
