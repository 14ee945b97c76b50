"""A run whose model stops being finite ends as diverged, keeping what came before; so does
one that breaks a rule the scenario sets (`run.divergence`), which its status names."""

import json
import math
import subprocess
import sys

import pandas as pd

from flnet.runner import run


def test_huge_learning_rate_ends_as_diverged_with_records_kept(scenario):
    res = run(
        scenario(algorithm={"name": "fedavg", "local": {"lr": 1e8}}, run={"rounds": 20}),
        write=False,
    )
    assert res.summary["status"] == "diverged"
    assert res.summary["final_test_accuracy"] is None  # not the last finite value
    assert res.summary["best_test_accuracy"] is not None
    bad = res.summary["diverged_round"]
    assert bad >= 1
    assert res.summary["diverged_by"] == "non_finite"
    assert list(res.records["round"]) == list(range(bad))  # every finite round, no more
    figures = res.records.drop(columns="train_loss")  # (NaN at round 0: no local work yet)
    assert all(math.isfinite(v) for v in figures.select_dtypes("number").to_numpy().ravel())
    # the work of the diverged round is still in the ledger and its energy counted
    assert (res.ledger["round"] == bad).any()
    assert res.summary["energy_j"] == res.ledger.energy_j.sum() > 0


def test_cli_says_diverged_and_writes_what_it_has(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flnet.cli",
            "run",
            "scenarios/quickstart.yaml",
            "--quiet",
            "--out",
            str(tmp_path),
            "--set",
            "algorithm.local.lr=1e8",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 3
    assert "diverged at round" in out.stderr
    assert "Traceback" not in out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["final_test_accuracy"] is None
    assert (
        "final test accuracy" in out.stdout and "0.5" not in out.stdout.split("final test")[1][:40]
    )
    records = pd.read_parquet(tmp_path / "records.parquet")
    assert records.test_accuracy.notna().all()


def test_all_finite_sees_every_nan_and_inf_and_no_overflow():
    import torch

    from flnet.runner import all_finite

    x = torch.full((1000,), 3.0e38)  # its float32 sum would overflow; the values are finite
    assert all_finite(x)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[17] = bad
        assert not all_finite(y)


# OledFL-SGD on the ring (lambda_min(W) = -1/3) at beta = 0.6: the paper's stability condition,
# lambda_min > (beta - 1) / (beta + 1) = -1/4, fails, and the nodes drift apart (consensus
# distance past 100 by round 40, test loss past twice its start by round 55, on one machine)
UNSTABLE_OLEDFL = ["algorithm.beta=0.6", "run.rounds=80", "run.eval_every=1", "device=cpu"]


def test_unstable_oledfl_breaks_the_consensus_rule_and_the_cli_names_it(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flnet.cli",
            "run",
            "scenarios/oledfl_sgd.yaml",
            "--quiet",
            "--out",
            str(tmp_path),
            *(
                a
                for o in [*UNSTABLE_OLEDFL, "run.divergence.consensus_above=100"]
                for a in ("--set", o)
            ),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 3, out.stderr
    assert "consensus_above" in out.stderr and "consensus distance exceeded 100" in out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_by"] == "consensus_above"
    records = pd.read_parquet(tmp_path / "records.parquet")
    # the row that broke the rule is kept, and it is the first that did
    assert records["round"].iloc[-1] == summary["diverged_round"] < 80
    assert records.consensus_distance.iloc[-1] > 100 >= records.consensus_distance.iloc[:-1].max()


def test_unstable_oledfl_breaks_the_loss_rule():
    res = run(
        "scenarios/oledfl_sgd.yaml",
        [*UNSTABLE_OLEDFL, "run.divergence.loss_above_start=2"],
        write=False,
    )
    assert res.summary["status"] == "diverged"
    assert res.summary["diverged_by"] == "loss_above_start"
    loss = res.records.test_loss
    assert loss.iloc[-1] > 2 * loss.iloc[0] >= loss.iloc[:-1].max()
    assert res.summary["final_test_accuracy"] is None


def test_stable_oledfl_with_the_rules_set_completes():
    res = run(
        "scenarios/oledfl_sgd.yaml",
        ["run.rounds=20", "device=cpu", "run.divergence.consensus_above=100"],
        write=False,
    )
    assert res.summary["status"] == "completed" and res.summary["diverged_by"] is None


def test_chance_rule_counts_evaluations_in_a_row_after_round_0():
    from flnet.divergence import Rules
    from flnet.schema import DivergenceConfig

    rules = Rules(DivergenceConfig(chance_for=2, chance_margin=0.01), num_classes=10)
    row = lambda t, acc: {"round": t, "test_accuracy": acc, "test_loss": 1.0}  # noqa: E731
    assert rules.fired([row(0, 0.1), row(1, 0.1)]) is None  # round 0 is at chance by design
    assert rules.fired([row(0, 0.1), row(1, 0.1), row(2, 0.11)]) == "chance_for"
    assert rules.fired([row(0, 0.1), row(1, 0.1), row(2, 0.111)]) is None  # above 1/10 + 0.01
    assert rules.fired([row(0, 0.1), row(1, 0.1), row(2, 0.5), row(3, 0.1)]) is None
    off = Rules(DivergenceConfig(), num_classes=10)  # the default: non-finite only
    assert off.fired([row(0, 0.1), row(1, 0.1), row(2, 0.1)]) is None


def test_consensus_rule_needs_a_gossip_algorithm(scenario):
    import pytest

    from flnet.errors import ScenarioError

    with pytest.raises(ScenarioError, match="consensus_above"):
        scenario(run={"divergence": {"consensus_above": 1.0}})


def test_non_finite_off_records_the_nan_and_completes(scenario):
    res = run(
        scenario(
            algorithm={"name": "fedavg", "local": {"lr": 1e8}},
            run={"rounds": 6, "divergence": {"non_finite": False}},
        ),
        write=False,
    )
    assert res.summary["status"] == "completed"
    assert list(res.records["round"]) == list(range(7))
    assert res.records.test_loss.isna().iloc[-1]


def test_a_diverged_run_resumed_says_the_same_rule(tmp_path):
    out = tmp_path / "run"
    args = [*UNSTABLE_OLEDFL, "run.divergence.consensus_above=100", f"output.dir={out}"]
    first = run("scenarios/oledfl_sgd.yaml", args)
    again = run("scenarios/oledfl_sgd.yaml", args, resume=True)
    for key in ("status", "diverged_by", "diverged_round"):
        assert again.summary[key] == first.summary[key], key
    assert first.summary["diverged_by"] == "consensus_above"
