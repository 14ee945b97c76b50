"""flnet: a discrete-event network-and-energy simulator for federated learning.

    import flnet
    result = flnet.run("scenarios/quickstart.yaml")
    result.records   # one row per evaluation: accuracy vs simulated seconds, joules, bits
    result.ledger    # one row per compute / transfer / evaluation event
"""

from flnet.errors import DataError, FlnetError, ScenarioError
from flnet.runner import Result, run
from flnet.scenario import Scenario, load_scenario
from flnet.sweep import sweep

__all__ = ["run", "sweep", "Result", "load_scenario", "Scenario", "FlnetError", "ScenarioError",
           "DataError"]
__version__ = "0.1.0"
