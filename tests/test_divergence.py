"""A run whose model stops being finite ends as diverged, keeping what came before."""

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
    assert list(res.records["round"]) == list(range(bad))  # every finite round, no more
    assert all(math.isfinite(v) for v in res.records.select_dtypes("number").to_numpy().ravel())
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
