"""Checkpoint and resume: a killed run continues on the same trajectory."""

import os
import pickle
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from harness import RESUMABLE, assert_same_tables, checkpoint_round, signal_once_checkpointed

from flnet.errors import FlnetError, ScenarioError
from flnet.runner import resume_problem, run
from flnet.scenario import load_scenario

SCENARIO = {
    "name": "resumable",
    **RESUMABLE,
    "run": {"rounds": 150, "eval_every": 5, "checkpoint_every": 5},
}


def write_scenario(tmp_path, **run_over):
    sc = {
        **SCENARIO,
        "run": {**SCENARIO["run"], **run_over},
        "output": {"dir": str(tmp_path / "out")},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    return path


def test_killed_run_resumes_to_the_same_records(tmp_path):
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "flnet.cli", "run", str(path), "--quiet"]
    status = signal_once_checkpointed(cli, out, 20, signal.SIGKILL, within_s=600)
    assert status == -signal.SIGKILL, "the run ended before it could be killed"
    killed_at = checkpoint_round(out)
    assert 20 <= killed_at < 150
    partial = pytest.importorskip("pandas").read_parquet(out / "records.parquet")
    assert partial["round"].max() >= killed_at  # the finished work was written as it went

    resumed = subprocess.run([*cli, "--resume"], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    assert_same_tables(out, tmp_path / "whole")


def test_resume_with_more_rounds_extends_the_run(tmp_path):
    path = write_scenario(tmp_path, rounds=10, checkpoint_every=4)  # ends on an evaluation
    run(path)
    longer = run(path, overrides=["run.rounds=20"], resume=True)
    whole = run(path, overrides=["run.rounds=20", f"output.dir={tmp_path / 'whole'}"])
    assert longer.records.equals(whole.records)
    assert longer.ledger.equals(whole.ledger)


def test_resume_of_a_finished_run_changes_nothing(tmp_path):
    path = write_scenario(tmp_path, rounds=6)
    first = run(path)
    again = run(path, resume=True)
    assert again.records.equals(first.records) and again.ledger.equals(first.ledger)


def test_resume_refuses_a_changed_trajectory(tmp_path):
    path = write_scenario(tmp_path, rounds=6)
    run(path)
    with pytest.raises(ScenarioError, match="algorithm.local.lr"):
        run(path, overrides=["algorithm.local.lr=0.5"], resume=True)


def test_resume_without_checkpoint_is_refused(tmp_path):
    """Reverses the earlier rule (start afresh in silence): --resume with nothing to resume
    would quietly redo a run the user thought was kept."""
    path = write_scenario(tmp_path, rounds=3)
    with pytest.raises(FlnetError, match="nothing to resume: .*out has no checkpoint.pt"):
        run(path, resume=True)
    assert not (tmp_path / "out").exists()  # and nothing was written


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch evil-marker",))


def test_checkpoint_loading_never_runs_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_scenario(tmp_path, rounds=3)
    (tmp_path / "out").mkdir()
    with open(tmp_path / "out" / "checkpoint.pt", "wb") as f:
        pickle.dump({"format": 1, "x": _Evil()}, f, protocol=2)
    with pytest.raises(FlnetError, match="cannot read checkpoint"):
        run(path, resume=True)
    assert not (tmp_path / "evil-marker").exists()


def _finished_run(tmp_path):
    path = write_scenario(tmp_path, rounds=3)
    run(path)
    return path, tmp_path / "out" / "checkpoint.pt"


def test_a_truncated_checkpoint_is_one_clear_error(tmp_path):
    path, ckpt = _finished_run(tmp_path)
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])
    out = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "run", str(path), "--resume", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert (
        f"cannot read checkpoint {ckpt}: it is truncated or not an flnet checkpoint" in out.stderr
    )


@pytest.mark.parametrize(
    "payload, problem",
    [
        ({"model": torch.zeros(3)}, "its format is None"),
        ([1, 2, 3], "it holds a list, not a mapping"),
        ({"format": 4, "round": 3}, "missing events, ledger_bytes, ledger_rows, now_s, records"),
        ("format 3", "its format is 3"),  # an older format: per-client rows inside the file
        ("rewrite", "round is a str"),
        ("journal file", "its table journal position names the file '../x.bin', not one of"),
        ("journal fields", r"its table journal position has fields \['file'\], not"),
        ("negative", "ledger_rows is -1"),
        ("records", "its records are not rows"),
    ],
)
def test_a_foreign_or_edited_checkpoint_is_one_clear_error(tmp_path, payload, problem):
    """Loaded safely (weights_only), then checked field by field: never an AttributeError or
    KeyError further on."""
    path, ckpt = _finished_run(tmp_path)
    if isinstance(payload, str):
        good = torch.load(ckpt, weights_only=True)
        payload = {
            **good,
            **{
                "format 3": {"format": 3},
                "rewrite": {"round": "3"},
                "journal file": {"tables": {**good["tables"], "file": "../x.bin"}},
                "journal fields": {"tables": {"file": "tables-journal-a.bin"}},
                "negative": {"ledger_rows": -1},
                "records": {"records": [1, 2]},
            }[payload],
        }
    torch.save(payload, ckpt)
    with pytest.raises(
        FlnetError, match=f"checkpoint {ckpt} is not an flnet checkpoint of format 4: {problem}"
    ):
        run(path, resume=True)


def test_a_checkpoint_of_another_model_is_one_clear_error(tmp_path):
    """Right fields, wrong contents (hand-edited: a state field the algorithm lacks)."""
    path, ckpt = _finished_run(tmp_path)
    good = torch.load(ckpt, weights_only=True)
    torch.save({**good, "state": {"round": 3, "nonsense": torch.zeros(2)}}, ckpt)
    with pytest.raises(FlnetError, match="does not fit this scenario's algorithm or model"):
        run(path, resume=True)


def _run_with_input_files(tmp_path):
    """A 3-round run reading all three kinds of input file: npz features, an availability
    trace and a capacity trace (every client always online, at one speed)."""
    rng = np.random.default_rng(0)  # features for digits' 1437 train and 360 test rows
    np.savez(tmp_path / "feat.npz", x_train=rng.random((1437, 6)), x_test=rng.random((360, 6)))
    rows = "".join(f"{k},0,1e9\n" for k in range(10))
    (tmp_path / "on.csv").write_text("client,online_from_s,online_until_s\n" + rows)
    rates = "".join(f"{k},0.001,1e6,1e7\n" for k in range(10))
    header = "client,compute_s_per_sample,up_rate_bps,down_rate_bps\n"
    (tmp_path / "speed.csv").write_text(header + rates)
    clients = {
        "count": 10,
        "availability": {"kind": "trace", "path": str(tmp_path / "on.csv")},
        "capacity_trace": {"path": str(tmp_path / "speed.csv"), "compute_power_w": 2.0},
    }
    data = {"features": {"kind": "npz", "path": str(tmp_path / "feat.npz")}}
    sections = {"data": data, "clients": clients, "radio": {"rayleigh_fading": False}}
    path = write_scenario(tmp_path, rounds=3, checkpoint_every=3)
    return path, sections, run(path, overrides=sections)


def one_feature_changed(path):
    arrays = dict(np.load(path))
    arrays["x_train"][0, 0] += 1.0
    return arrays


EDITS = {
    "data.features.path": ("feat.npz", lambda p: np.savez(p, **one_feature_changed(p))),
    "clients.availability.path": ("on.csv", lambda p: p.write_text(p.read_text() + "3,2e9,3e9\n")),
    "clients.capacity_trace.path": ("speed.csv", lambda p: p.write_text(p.read_text() + "# x\n")),
}


@pytest.mark.parametrize("field", [None, *EDITS])
def test_resume_refuses_an_input_file_edited_since_the_checkpoint(tmp_path, field):
    """Each input file's sha256 is in the checkpoint: one edited on disk (even by a byte, even
    a comment) is a ScenarioError naming its field and file, saying to start afresh; the files
    as they were resume."""
    path, sections, first = _run_with_input_files(tmp_path)
    more = {**sections, "run": {"rounds": 5}}
    if field is None:
        longer = run(path, overrides=more, resume=True)
        assert longer.records["round"].max() == 5 and len(longer.ledger) > len(first.ledger)
        return
    name, edit = EDITS[field]
    edit(tmp_path / name)
    with pytest.raises(ScenarioError, match=rf"^{field}: {tmp_path / name} changed .*--force"):
        run(path, overrides=more, resume=True)
    assert "changed" in resume_problem(load_scenario(path, more))


def test_a_checkpoint_without_input_digests_resumes_as_before(tmp_path):
    """Checkpoints written before digests were kept hold none: they resume unchecked."""
    path, sections, _ = _run_with_input_files(tmp_path)
    ckpt = tmp_path / "out" / "checkpoint.pt"
    payload = torch.load(ckpt, weights_only=True)
    assert set(payload.pop("inputs")) == set(EDITS)
    torch.save(payload, ckpt)
    (tmp_path / "on.csv").write_text((tmp_path / "on.csv").read_text() + "# edited\n")
    longer = run(path, overrides={**sections, "run": {"rounds": 5}}, resume=True)
    assert longer.records["round"].max() == 5


def test_flnet_run_resume_says_which_input_changed_and_exits_without_running(tmp_path):
    """The command a user types: `flnet run --resume` after the availability trace changed
    prints the field, the file and --force, exits 2, and leaves the records as they were."""
    path, sections, first = _run_with_input_files(tmp_path)
    whole = yaml.safe_load(path.read_text())
    for name, section in sections.items():
        whole[name] = {**whole.get(name, {}), **section}
    path.write_text(yaml.safe_dump(whole))
    before = (tmp_path / "out" / "records.parquet").read_bytes()
    (tmp_path / "on.csv").write_text((tmp_path / "on.csv").read_text() + "3,2e9,3e9\n")
    cli = [sys.executable, "-m", "flnet.cli", "run", str(path), "--resume", "--rounds", "5"]
    out = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "clients.availability.path" in out.stderr and "changed" in out.stderr
    assert "--force" in out.stderr
    assert (tmp_path / "out" / "records.parquet").read_bytes() == before
