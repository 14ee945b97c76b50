"""The results folder: clear errors when it cannot be made, one run per folder (lock, refusal
without --resume/--force), absolute paths, no stale tables, no shared temporary files."""

import json
import os
import re

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from conftest import BASE
from gated import gated_run
from harness import flnet_cli

from flnet import output
from flnet.errors import FlnetError
from flnet.runner import run
from flnet.scenario import merge

SCENARIO = merge(BASE, {"name": "folder", "seed": 3, "run": {"checkpoint_interval_s": None}})


def write_scenario(tmp_path, **over):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, **over}))
    return path


def listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# ------------------------------------------------------------------ folders that cannot be made


def bad_folders(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    return {
        "under /dev/null": ("/dev/null/out", "/dev/null exists and is not a folder"),
        "a file in the way": (tmp_path / "a-file", "a-file exists and is not a folder"),
        "a file as a parent": (tmp_path / "a-file" / "out", "a-file exists and is not a folder"),
        "a dangling symlink": (
            tmp_path / "dangling",
            "dangling is a symbolic link to .*nowhere, which does not exist",
        ),
        "a 300-character name": (
            tmp_path / "new" / "deeper" / ("x" * 300),
            "File name too long \\(a name of 300 characters",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "under /dev/null",
        "a file in the way",
        "a file as a parent",
        "a dangling symlink",
        "a 300-character name",
    ],
)
def test_a_folder_that_cannot_be_made_is_one_clear_error_and_nothing_is_written(tmp_path, case):
    out, why = bad_folders(tmp_path)[case]
    scenario = write_scenario(tmp_path)
    before = listing(tmp_path)
    result = flnet_cli("run", scenario, "--quiet", "--out", out, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    message = " ".join(result.stderr.split())  # the console wraps long lines
    assert message.startswith("error: cannot create the output folder")
    assert re.search(why, message), message
    assert listing(tmp_path) == before  # not even the parents of the 300-character name


def test_a_read_only_parent_is_refused(tmp_path):
    """As root permissions do not apply, so root gets a parent that refuses everyone: sysfs."""
    if os.geteuid() == 0:
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("root without sysfs: no folder refuses root here")
        out, why = "/sys/flnet-test-out", "Operation not permitted"
    else:
        parent = tmp_path / "ro"
        parent.mkdir()
        parent.chmod(0o500)
        out, why = parent / "out", "Permission denied"
    with pytest.raises(FlnetError, match=f"cannot create the output folder .*{why}"):
        run(write_scenario(tmp_path), overrides=[f"output.dir={out}"])
    assert not os.path.exists(out)


def test_a_run_refused_before_it_starts_leaves_no_folder(tmp_path):
    """The deadline check runs after the folder is made (it needs the world built)."""
    with pytest.raises(FlnetError, match="deadline_s"):
        run(
            write_scenario(tmp_path),
            overrides=[f"output.dir={tmp_path / 'a' / 'out'}", "algorithm.cohort.deadline_s=1e-9"],
        )
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------------ one folder, one run


def test_a_folder_holding_a_run_is_refused_without_resume_or_force(tmp_path):
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    first = run(path, overrides=[f"output.dir={out}"])
    files = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(FlnetError, match=f"{out} already holds a run .*--resume.*--force"):
        run(path, overrides=[f"output.dir={out}", "seed=4"])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == files  # untouched

    second = run(path, overrides=[f"output.dir={out}", "seed=4", "output.format=csv"], force=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            ".flnet.lock",
            "checkpoint.pt",
            "ledger-journal.csv",
            "scenario.yaml",
            "summary.json",
            "records.csv",
            "ledger.csv",
            "partition.csv",
        ]
    )  # the parquet tables went with --force
    assert yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 4
    written = pd.read_csv(out / "records.csv")
    assert list(written["test_loss"]) == list(second.records["test_loss"])  # the new run's
    assert not first.records.equals(second.records)


def test_force_keeps_files_that_are_not_the_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    run(write_scenario(tmp_path), overrides=[f"output.dir={out}"])
    run(write_scenario(tmp_path), overrides=[f"output.dir={out}"], force=True)
    assert (out / "notes.txt").read_text() == "mine"


def test_resume_and_force_together_are_refused(tmp_path):
    result = flnet_cli("run", write_scenario(tmp_path), "--resume", "--force", cwd=tmp_path)
    assert result.returncode == 2 and "not allowed with argument" in result.stderr
    with pytest.raises(FlnetError, match="give one of them"):
        run(write_scenario(tmp_path), resume=True, force=True)


def test_a_second_run_into_a_folder_being_written_is_refused_by_the_lock(tmp_path):
    """Run A (a real process) holds the folder, waiting at a gate in round 5; B, with another
    seed so any mixing would show, is refused naming A's pid, with or without --force; A's
    results then come out equal to a run that was alone."""
    path = write_scenario(tmp_path, run={**SCENARIO["run"], "rounds": 20})
    out = tmp_path / "out"
    a = gated_run(tmp_path, 5, "run", path, "--out", out)
    a.wait_for("at the gate")
    b = flnet_cli("run", path, "--quiet", "--out", out, "--set", "seed=9")
    b_forced = flnet_cli("run", path, "--quiet", "--out", out, "--set", "seed=9", "--force")
    with pytest.raises(FlnetError, match=f"another flnet run \\(pid {a.proc.pid}\\)"):
        run(path, overrides=[f"output.dir={out}", "seed=9"], force=True)
    a.open_gate()
    assert a.proc.wait(timeout=300) == 0, a.text()
    for refused in (b, b_forced):
        assert refused.returncode == 2, refused.stderr
        assert f"{out} is being written by another flnet run (pid {a.proc.pid})" in " ".join(
            refused.stderr.split()
        )
    whole = run(path, overrides=[f"output.dir={tmp_path / 'whole'}"])
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "records.parquet"), whole.records, check_exact=True
    )
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "ledger.parquet"),
        pd.read_parquet(tmp_path / "whole" / "ledger.parquet"),
        check_exact=True,
    )
    assert yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 3
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_the_lock_is_held_while_the_folder_is_open_and_released_after(tmp_path):
    with output.open_folder(tmp_path / "out") as folder:
        assert (tmp_path / "out" / ".flnet.lock").read_text() == f"{os.getpid()}\n"
        with pytest.raises(FlnetError, match=f"another flnet run \\(pid {os.getpid()}\\)"):
            output.open_folder(tmp_path / "out")
        assert folder.path == tmp_path / "out"
    output.open_folder(tmp_path / "out").release()  # free again


# ------------------------------------------------------------------ paths, formats, temporaries


def test_resume_from_another_directory_finds_the_run(tmp_path):
    """scenario.yaml stores the folder and the data and trace paths (an npz features file and
    the availability and capacity traces given relative to the cwd) as absolute paths, so the
    copy in the results folder resumes the run from anywhere."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    rng = np.random.default_rng(0)  # features for digits' 1437 train and 360 test rows
    np.savez(
        tmp_path / "a" / "feat.npz", x_train=rng.random((1437, 6)), x_test=rng.random((360, 6))
    )
    features = {"features": {"kind": "npz", "path": "feat.npz"}}
    rows = "".join(f"{k},0,1e9\n" for k in range(10))  # every client online, from traces
    (tmp_path / "a" / "on.csv").write_text("client,online_from_s,online_until_s\n" + rows)
    rates = "".join(f"{k},0.001,1e6,1e7\n" for k in range(10))
    header = "client,compute_s_per_sample,up_rate_bps,down_rate_bps\n"
    (tmp_path / "a" / "speed.csv").write_text(header + rates)
    clients = {
        "count": 10,
        "availability": {"kind": "trace", "path": "on.csv"},
        "capacity_trace": {"path": "speed.csv", "compute_power_w": 2.0},
    }
    path = write_scenario(tmp_path / "a", data=features, clients=clients)
    first = flnet_cli("run", "s.yaml", "--quiet", "--out", "rel/out", cwd=tmp_path / "a")
    assert first.returncode == 0, first.stderr
    out = tmp_path / "a" / "rel" / "out"
    stored = yaml.safe_load((out / "scenario.yaml").read_text())
    assert stored["output"]["dir"] == str(out)
    assert stored["data"]["features"]["path"] == str(tmp_path / "a" / "feat.npz")
    assert stored["data"]["root"] == str(tmp_path / "a" / "data")
    assert stored["clients"]["availability"]["path"] == str(tmp_path / "a" / "on.csv")
    assert stored["clients"]["capacity_trace"]["path"] == str(tmp_path / "a" / "speed.csv")
    assert json.loads((out / "summary.json").read_text())["output_dir"] == str(out)
    again = flnet_cli(
        "run",
        out / "scenario.yaml",
        "--quiet",
        "--resume",
        "--set",
        "run.rounds=5",
        cwd=tmp_path / "b",
    )
    assert again.returncode == 0, again.stderr
    assert f"resuming {out} from round 3" in " ".join(again.stderr.split())
    assert json.loads((out / "summary.json").read_text())["rounds"] == 5
    assert listing(tmp_path / "b") == []
    absolute = [
        f"data.features.path={tmp_path / 'a' / 'feat.npz'}",
        f"clients.availability.path={tmp_path / 'a' / 'on.csv'}",
        f"clients.capacity_trace.path={tmp_path / 'a' / 'speed.csv'}",
    ]
    whole = run(path, overrides=[f"output.dir={tmp_path / 'whole'}", "run.rounds=5", *absolute])
    pd.testing.assert_frame_equal(
        pd.read_parquet(out / "records.parquet"), whole.records, check_exact=True
    )


def test_resuming_in_another_format_leaves_no_table_of_the_old_one(tmp_path):
    path = write_scenario(tmp_path)
    run(path, overrides=[f"output.dir={tmp_path / 'out'}", "output.format=csv"])
    run(path, overrides=[f"output.dir={tmp_path / 'out'}", "run.rounds=5"], resume=True)
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"records.parquet", "ledger.parquet", "partition.parquet"} <= names
    assert not [n for n in names if n.endswith(".csv") and n != "ledger-journal.csv"]


@pytest.mark.parametrize("leftover", ["file", "folder"])
def test_a_leftover_temporary_checkpoint_never_blocks_resume(tmp_path, leftover):
    path = write_scenario(tmp_path)
    out = tmp_path / "out"
    run(path, overrides=[f"output.dir={out}"])
    tmp = out / "checkpoint.pt.tmp"
    if leftover == "file":
        tmp.write_bytes(b"half a checkpoint")
    else:
        tmp.mkdir()
        (tmp / "x").write_text("in the way")
    (out / ".records.parquet.123.abcd.tmp").write_bytes(b"a killed writer's")
    longer = run(path, overrides=[f"output.dir={out}", "run.rounds=5"], resume=True)
    assert longer.summary["rounds"] == 5
    assert torch.load(out / "checkpoint.pt", weights_only=True)["round"] == 5
    assert not (out / ".records.parquet.123.abcd.tmp").exists()  # cleaned under the lock


def test_temporary_names_are_unique_and_removed_when_a_write_fails(tmp_path):
    target = tmp_path / "t.txt"
    with output.atomic(target) as a, output.atomic(target) as b:
        assert a != b and a.parent == b.parent == tmp_path
        a.write_text("a")
        b.write_text("b")
    assert target.read_text() == "a"  # b (the inner block) was renamed first, then a
    with pytest.raises(RuntimeError):
        with output.atomic(target) as c:
            c.write_text("half")
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    assert target.read_text() == "a"
