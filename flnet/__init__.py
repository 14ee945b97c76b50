"""flnet: a discrete-event network-and-energy simulator for federated learning.

    import flnet
    result = flnet.run("scenarios/quickstart.yaml")
    result.records   # one row per evaluation: accuracy vs simulated seconds, joules, bits
    result.ledger    # one row per compute / transfer / evaluation event

The names below are imported on first use, so `import flnet.sim` (the time side) never loads
torch and the command line answers `--help` at once.
"""

from importlib import import_module
from typing import Any

from flnet.errors import DataError, FlnetError, ScenarioError, UnitWarning

__all__ = [
    "run",
    "sweep",
    "compare",
    "Result",
    "load_scenario",
    "Scenario",
    "Observer",
    "Progress",
    "FlnetError",
    "ScenarioError",
    "DataError",
    "UnitWarning",
]
__version__ = "0.1.0"

_LAZY = {
    "run": "flnet.runner",
    "Result": "flnet.runner",
    "sweep": "flnet.sweeps",
    "compare": "flnet.comparison",
    "load_scenario": "flnet.scenario",
    "Scenario": "flnet.scenario",
    "Observer": "flnet.sim.world",
    "Progress": "flnet.sim.world",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'flnet' has no attribute {name!r}")
