"""Every feature with every algorithm family (issue 41's class 8): each cell either runs a
short, tiny run in which the feature shows (its records or ledger differ from the family's run
without it), or is refused by validation with one error that names both the feature's field and
the algorithm. A feature that a family silently ignored would show as a cell that runs and
changes nothing.

Families, one algorithm each: central (fedavg), distributional (drfa), asynchronous (fedbuff),
gossip that sends as it computes (dpsgd) and after its local work (dfedavg), and compressed
gossip (cdfl)."""

import functools
import re

import pandas as pd
import pytest
from conftest import BASE
from gated import REPO

from flnet.errors import ScenarioError
from flnet.runner import run
from flnet.scenario import load_scenario, merge

# a tiny run: 6 clients, a 16-unit MLP on the embedded digits, 2 steps, evaluated at the end
TINY = {
    "model": {"kind": "mlp", "hidden": [16]},
    "clients": {"count": 6},
    "run": {"rounds": 2, "eval_every": 2, "checkpoint_interval_s": None},
}
LOCAL = {"steps": 2, "batch_size": 8, "lr": 0.05}
FAMILIES = {
    "fedavg": {"name": "fedavg", "cohort": {"clients_per_round": 3}, "local": LOCAL},
    "drfa": {"name": "drfa", "clients_per_round": 3, "local": LOCAL},
    "fedbuff": {"name": "fedbuff", "concurrency": 3, "buffer_size": 2, "local": LOCAL},
    "dpsgd": {"name": "dpsgd", "topology": {"kind": "ring"}, "local": {**LOCAL, "steps": 1}},
    "dfedavg": {"name": "dfedavg", "topology": {"kind": "ring"}, "local": LOCAL},
    "cdfl": {"name": "cdfl", "topology": {"kind": "ring"}, "gossip_steps": 2, "local": LOCAL},
}
TRACES = REPO / "scenarios" / "traces"
DEADLINE = {  # each family's own deadline field, where it has one
    "fedavg": {"algorithm": {"cohort": {"deadline_s": 0.002}}},
    "drfa": {"algorithm": {"deadline_s": 0.002}},
    "dpsgd": {"algorithm": {"timeout_s": 0.002}},
    "dfedavg": {"algorithm": {"timeout_s": 0.002}},
}
FEATURES = {
    "bernoulli": (
        "clients.availability",
        {"clients": {"availability": {"kind": "bernoulli", "p": 0.5}}},
    ),
    "diurnal": (
        "clients.availability",
        {
            "clients": {
                "availability": {"kind": "diurnal", "mean_online": 0.5, "session_mean_s": 60.0}
            }
        },
    ),
    "trace": (
        "clients.availability",
        {
            "clients": {
                "availability": {"kind": "trace", "path": str(TRACES / "small_availability.csv")}
            }
        },
    ),
    "at_completion": (
        "clients.availability.check",
        {"clients": {"availability": {"kind": "bernoulli", "p": 0.5, "check": "at_completion"}}},
    ),
    "dropout": ("clients.dropout_probability", {"clients": {"dropout_probability": 0.5}}),
    "stragglers": (
        "clients.slowdown_probability",
        {"clients": {"slowdown_probability": 0.5, "slowdown_factor": 5.0}},
    ),
    "battery": (
        "clients.battery",
        {
            "clients": {
                "battery": {
                    "capacity_j": 0.01,
                    "initial_soc": {"kind": "per_client", "values": [1, 1, 0.21, 1, 0.21, 1]},
                    "threshold_soc": 0.2,
                }
            }
        },
    ),
    "device_classes": (
        "clients.device_classes",
        {
            "clients": {
                "device_classes": [
                    {"name": "phone", "share": 0.5},
                    {"name": "tablet", "share": 0.5, "cpu_hz": 4e9},
                ]
            }
        },
    ),
    "capacity_trace": (
        "clients.capacity_trace",
        {
            "clients": {
                "capacity_trace": {
                    "path": str(TRACES / "small_capacity.csv"),
                    "compute_power_w": 2.0,
                }
            }
        },
    ),
    "fading": ("radio.rayleigh_fading", {"radio": {"rayleigh_fading": True}}),
    "d2d_loss": ("radio.d2d.loss_probability", {"radio": {"d2d": {"loss_probability": 0.3}}}),
    "block_cyclic": (
        "data.blocks",
        {"data": {"blocks": {"num_blocks": 2, "rounds_per_block": 1}}},
    ),
    "compression": (
        "algorithm.compression",
        {"algorithm": {"compression": {"kind": "top_k", "fraction": 0.5}}},
    ),
    "partial_work": (
        "algorithm.partial_work",
        {"algorithm": {"partial_work": {"kind": "stragglers", "fraction": 0.5}}},
    ),
    "server_rule": ("algorithm.server", {"algorithm": {"server": {"rule": "median"}}}),
    "deadline": ("algorithm.deadline_s", None),  # DEADLINE, per family
    "time_budget": (
        "run.time_budget_s",
        {"run": {"time_budget_s": 0.01, "rounds": 50, "eval_every": 1}},
    ),
    "energy_budget": ("run.energy_budget_j", None),  # half the first round's joules, per family
    "cells": (
        "radio.cells",
        {
            "clients": {"positions": {"kind": "uniform", "side_m": 1000}},
            "radio": {"cells": {"stations_xy_m": [[250, 500], [750, 500]]}},
        },
    ),
    "spatial_reuse": (
        "radio.d2d.sharing",
        {
            "clients": {"positions": {"kind": "uniform", "side_m": 200}},
            "radio": {"d2d": {"sharing": "spatial_reuse", "path_loss": {}}},
        },
    ),
    "scheduling": ("resources", {"resources": {"scheduling": {"kind": "best_channel"}}}),
    "dvfs": (
        "resources",
        {"resources": {"compute_power": "just_in_time", "deadline_s": 30.0}},
    ),
}

# The cells validation refuses: (family, feature). Every other cell runs.
REFUSED = {
    ("cdfl", "bernoulli"),  # a node that sits a step out splits C-DFL's public copies
    ("cdfl", "diurnal"),
    ("cdfl", "trace"),
    ("cdfl", "at_completion"),
    ("dpsgd", "at_completion"),  # a gossip node uploads nothing to judge as it ends
    ("dfedavg", "at_completion"),
    ("cdfl", "battery"),
    ("cdfl", "dropout"),  # a node that drops out sends no compressed message
    ("cdfl", "d2d_loss"),  # a lost compressed message
    ("cdfl", "deadline"),  # no timeout: every q must arrive
    ("fedavg", "d2d_loss"),  # no device-to-device links
    ("drfa", "d2d_loss"),
    ("fedbuff", "d2d_loss"),
    ("fedbuff", "deadline"),  # a stream has no round to end
    ("drfa", "server_rule"),  # DRFA's own weighted means
    *((f, "block_cyclic") for f in ("drfa", "fedbuff", "dpsgd", "dfedavg", "cdfl")),
    *((f, "compression") for f in ("fedavg", "drfa", "fedbuff", "dpsgd", "dfedavg")),
    *((f, "partial_work") for f in ("drfa", "fedbuff", "dpsgd", "dfedavg", "cdfl")),
    *((f, "server_rule") for f in ("fedbuff", "dpsgd", "dfedavg", "cdfl")),
    *((f, "cells") for f in ("dpsgd", "dfedavg", "cdfl")),  # gossip talks device to device
    *((f, "spatial_reuse") for f in ("fedavg", "drfa", "fedbuff")),  # no D2D links
    # the policies are wired into uniform round trips only (resources.py says why)
    *(
        (f, p)
        for f in ("drfa", "fedbuff", "dpsgd", "dfedavg", "cdfl")
        for p in ("scheduling", "dvfs")
    ),
}


def scenario_of(tmp_path, family, feature=None):
    data = merge(BASE, {**TINY, "output": {"dir": str(tmp_path)}})
    data["algorithm"] = FAMILIES[family]  # the family's section, not fedavg's under it
    if feature is not None:
        data = merge(data, FEATURES[feature][1] or per_family(feature, family))
    return load_scenario(data=data)


def per_family(feature, family):
    """The settings of a feature that depend on the family."""
    if feature == "deadline":  # the family's own field, or the name DRFA gives it
        return DEADLINE.get(family, {"algorithm": {"deadline_s": 0.002}})
    assert feature == "energy_budget"
    _, ledger = baseline(family)
    first_j = float(ledger[ledger["round"] <= 1].energy_j.sum())
    return {"run": {"energy_budget_j": first_j / 2, "rounds": 50, "eval_every": 1}}


@functools.cache
def baseline(family):
    """The family's tiny run without any feature: records and ledger."""
    import tempfile
    from pathlib import Path

    res = run(scenario_of(Path(tempfile.mkdtemp()), family), write=False)
    return res.records, res.ledger


def differs(a, b):
    try:
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    except AssertionError:
        return True
    return False


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_feature_runs_with_each_family_or_is_refused_naming_both(tmp_path, family, feature):
    field = FEATURES[feature][0]
    if (family, feature) in REFUSED:
        with pytest.raises(ScenarioError) as refused:
            scenario_of(tmp_path, family, feature)
        message = str(refused.value)
        assert field.split(".")[-1] in message and re.search(rf"\b{family}\b", message), message
        assert len(message.strip().splitlines()) <= 2, message  # the title and one error
        return
    res = run(scenario_of(tmp_path, family, feature), write=False)
    assert res.summary["status"] == "completed"
    records, ledger = baseline(family)
    assert differs(res.records, records) or differs(res.ledger, ledger), (
        f"{feature} changed nothing in a {family} run"
    )
    budget = {"time_budget": ("sim_time_s", 0.01), "energy_budget": ("energy_j", None)}
    if feature in budget:  # the step that reaches the budget runs to its end (README)
        column, limit = budget[feature]
        limit = limit or res.scenario.run.energy_budget_j
        spent = res.records.set_index("round")[column]
        last = int(spent.index.max())
        assert res.summary["stop_reason"] == feature, res.summary["stop_reason"]
        assert spent.loc[last] >= limit > spent.loc[last - 1]
