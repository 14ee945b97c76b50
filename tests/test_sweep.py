import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import BASE
from harness import ON_RAY, sweep_on_ray

from flnet.columns import POINT_OUTCOMES
from flnet.errors import ScenarioError
from flnet.scenario import merge
from flnet.sweeps import Point, parse_grid, plan, point_row, run_sweep, spec_from, sweep

ROOT = Path(__file__).resolve().parent.parent


def test_parse_grid_keeps_lists_and_refuses_a_field_given_twice():
    grid = parse_grid(["algorithm.local.steps=1,5", "model.hidden=[[16], [32, 8]]"])
    assert grid == {"algorithm.local.steps": [1, 5], "model.hidden": [[16], [32, 8]]}
    with pytest.raises(ScenarioError, match="seed is given twice"):
        parse_grid(["seed=0,1", "seed=2"])
    with pytest.raises(ScenarioError, match="more than once"):
        spec_from({"seed": [0, 1]}, seeds=[2])
    with pytest.raises(ScenarioError, match="more than once"):
        spec_from({"algorithm.local.steps": [1, 2]}, fixed=["algorithm.local.steps=3"])


def test_points_are_grid_times_paired_times_seeds_with_typed_values():
    spec = spec_from(
        {"algorithm.local.lr": ["1e-3", 0.01]},
        paired={"clients.count": [10, 20], "algorithm.cohort.clients_per_round": [2, 4]},
        seeds=2,
    )
    points = plan(BASE, spec)
    assert len(points) == 2 * 2 * 2
    assert [p.values["seed"] for p in points[:2]] == [0, 1]  # seeds innermost
    assert {
        (p.values["clients.count"], p.values["algorithm.cohort.clients_per_round"]) for p in points
    } == {(10, 2), (20, 4)}
    assert points[0].values["algorithm.local.lr"] == 0.001  # YAML's "1e-3" read as a float
    assert len({p.key for p in points}) == 8


def test_point_identity_is_the_resolved_scenario_not_its_index():
    a = plan(BASE, spec_from({"algorithm.local.steps": [2, 3]}))
    b = plan(BASE, spec_from({"algorithm.local.steps": [3, 2]}, seeds=[0]))
    assert [p.key for p in a] == [p.key for p in reversed(b)]
    # giving the default explicitly, or another output folder, is the same scenario
    c = plan(
        merge(BASE, {"output": {"dir": "elsewhere"}}),
        spec_from({"algorithm.local.batch_size": [8]}, fixed={"clients.count": 10}),
    )
    assert c[0].key == plan(BASE, spec_from({"algorithm.local.steps": [2]}))[0].key


def test_a_value_that_does_not_fit_its_field_refuses_the_sweep_naming_it(tmp_path):
    with pytest.raises(ScenarioError, match=r"-1 does not fit algorithm.local.steps"):
        sweep(BASE, {"algorithm.local.steps": [2, -1]}, out_dir=tmp_path)
    with pytest.raises(ScenarioError, match=r"'fast' does not fit algorithm.local.lr"):
        sweep(BASE, {"algorithm.local.lr": [0.1, "fast"]}, out_dir=tmp_path)
    with pytest.raises(ScenarioError, match=r"algorithm.local.stepz"):
        sweep(BASE, {"algorithm.local.stepz": [1]}, out_dir=tmp_path)
    assert not list(tmp_path.iterdir())


def test_swept_floats_written_as_yaml_strings_land_as_typed_columns(tmp_path):
    table, records = sweep(
        BASE, parse_grid(["algorithm.local.lr=1e-3,0.01"]), workers=0, out_dir=tmp_path
    )
    assert list(table.status) == ["completed", "completed"]
    assert records["algorithm.local.lr"].dtype == float
    back = pd.read_parquet(tmp_path / "records.parquet")
    assert sorted(back["algorithm.local.lr"].unique()) == [0.001, 0.01]
    assert len({p for p in table.point}) == 2 and all((tmp_path / p).is_dir() for p in table.point)


def test_workers_give_the_same_records_as_one_process(tmp_path):
    grid = {"algorithm.local.steps": [1, 3], "seed": [0, 1]}
    one_table, one = sweep(BASE, grid, workers=0, out_dir=tmp_path / "a")
    two_table, two = sweep(BASE, grid, workers=2, out_dir=tmp_path / "b")
    assert (one_table.status == "completed").all()
    pd.testing.assert_frame_equal(one, two, check_exact=True)
    assert set(one.columns) >= {"point", "algorithm.local.steps", "seed", "test_accuracy"}


def test_a_diverging_point_is_a_status_not_a_crash(tmp_path):
    table, records = sweep(BASE, {"algorithm.local.lr": [0.05, 1e8]}, workers=0, out_dir=tmp_path)
    assert list(table.status) == ["completed", "diverged"]
    assert records.test_accuracy.notna().all()


def test_started_again_a_sweep_runs_only_what_is_not_finished(tmp_path):
    first = run_sweep(
        BASE, spec_from({"algorithm.local.steps": [1, 2]}), workers=0, out_dir=tmp_path
    )
    stamp = {k: (tmp_path / k / "summary.json").stat().st_mtime_ns for k in first.ran}
    # an unfinished point: its summary says interrupted
    key = first.ran[1]
    summary = json.loads((tmp_path / key / "summary.json").read_text())
    (tmp_path / key / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))
    again = run_sweep(
        BASE, spec_from({"algorithm.local.steps": [1, 2, 3]}), workers=0, out_dir=tmp_path
    )
    assert again.skipped == [first.ran[0]]
    assert sorted(again.ran) == sorted([key, *set(again.table.point) - set(first.ran)])
    assert (tmp_path / first.ran[0] / "summary.json").stat().st_mtime_ns == stamp[first.ran[0]]
    assert (again.table.status == "completed").all() and len(again.records.point.unique()) == 3


def test_started_again_a_sweep_reruns_the_finished_points_whose_trace_changed(tmp_path):
    """A finished point's summary keeps its input files' digests: started again after its
    availability trace was edited, the sweep runs it again (saying so) instead of keeping
    results of the old trace."""
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "client,online_from_s,online_until_s\n" + "".join(f"{k},0,1e9\n" for k in range(10))
    )
    base = merge(BASE, {"clients": {"availability": {"kind": "trace", "path": str(trace)}}})
    spec, out = spec_from({"algorithm.local.steps": [1, 2]}), tmp_path / "sweep"
    first = run_sweep(base, spec, workers=0, out_dir=out)
    summary = json.loads((out / first.ran[0] / "summary.json").read_text())
    assert set(summary["inputs"]) == {"clients.availability.path"}
    assert run_sweep(base, spec, workers=0, out_dir=out).skipped == first.ran  # unchanged
    trace.write_text(trace.read_text().replace("1,0,1e9", "1,0,5"))  # client 1 leaves at 5 s
    again = run_sweep(base, spec, workers=0, out_dir=out)
    assert again.skipped == [] and sorted(again.ran) == sorted(first.ran)
    assert [w for w in again.warnings if "trace.csv changed since it ran" in w]
    assert (again.table.status == "completed").all()
    # the flnet command says so too, point by point
    trace.write_text(trace.read_text().replace("1,0,5", "1,0,7"))
    (tmp_path / "s.yaml").write_text(json.dumps(base))
    cli = subprocess.run(
        [sys.executable, "-m", "flnet.cli", "sweep", str(tmp_path / "s.yaml"), "-q"]
        + ["--grid", "algorithm.local.steps=1,2", "--out", str(out), "--workers", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr
    for key in first.ran:
        assert f"warning: {key}: {trace} changed since it ran; it ran again" in cli.stderr
    assert "2 points: 2 run now, 0 already finished, 0 not finished" in cli.stdout


def test_a_points_row_is_its_swept_values_then_the_outcomes_plot_knows():
    """flnet.plot tells swept fields from outcomes by POINT_OUTCOMES: a finished point's row has
    exactly those besides its swept values; other rows have some of them (pandas fills in the
    rest)."""
    values = {"seed": 0, "algorithm.local.steps": 5}
    summary = {"status": "completed", "rounds": 3, "reused_from": "abc", "reuse_note": "why"}
    rows = [
        point_row(Point(values, error="bad"), None, None),
        point_row(Point(values, "k"), summary, None),
        point_row(Point(values, "k"), None, {"status": "failed", "error": "boom"}),
        point_row(Point(values, "k"), None, None),
    ]
    for row in rows:
        assert list(row)[1:3] == list(values) and set(row) - set(values) <= POINT_OUTCOMES
    assert set(rows[1]) - set(values) == POINT_OUTCOMES
    assert (rows[1]["reused_from"], rows[1]["reuse_note"], rows[1]["rounds"]) == ("abc", "why", 3)
    assert [r["reused_from"] for r in (rows[0], rows[2], rows[3])] == [None] * 3


def test_optimizer_grid_runs_its_valid_points_and_reports_the_others(tmp_path):
    grid = {"algorithm.local.optimizer.name": ["sgd", "adam", "sps"]}
    table, records = sweep(BASE, grid, workers=0, out_dir=tmp_path)  # BASE: sgd at lr 0.05
    assert list(table.status) == ["completed"] * 3
    adam = table[table["algorithm.local.optimizer.name"] == "adam"].iloc[0]
    assert adam.note == "lr = 0.001, adam's default"
    written = (tmp_path / adam.point / "scenario.yaml").read_text()
    assert "lr: null" in written  # runs at adam's documented default, not sgd's 0.05
    lrs = records.groupby("algorithm.local.optimizer.name").lr.first()  # records say so too
    assert lrs["adam"] == 0.001 and lrs["sgd"] == 0.05
    crossed = {**grid, "algorithm.local.lr": [0.01, 0.1]}
    table, records = sweep(BASE, crossed, workers=0, out_dir=tmp_path / "x")
    bad = table[table.status == "invalid"]
    assert list(bad["algorithm.local.optimizer.name"]) == ["sps", "sps"]
    assert bad.error.str.contains("sps sets its own step size").all()
    assert (table.status == "completed").sum() == 4 and len(records.point.unique()) == 4


SABOTEUR = """
import os, signal
import flnet.runner as runner

_run = runner.run

def run(scenario, *args, **kwargs):
    if scenario.seed == 1:
        raise OSError(28, "No space left on device")
    if scenario.seed == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return _run(scenario, *args, **kwargs)

runner.run = run
"""


def test_a_point_that_raises_or_whose_worker_dies_leaves_the_others_intact(tmp_path, monkeypatch):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SABOTEUR)  # loaded by the worker processes only
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]))
    table, records = sweep(
        BASE,
        {"algorithm.local.steps": [1, 2]},
        seeds=[0, 1, 2, 3],
        workers=2,
        out_dir=tmp_path / "sweep",
    )
    by_seed = table.groupby("seed").status.agg(set).to_dict()
    assert by_seed == {0: {"completed"}, 1: {"failed"}, 2: {"failed"}, 3: {"completed"}}
    assert table[table.seed == 1].error.str.startswith("OSError").all()
    assert table[table.seed == 2].error.str.contains("SIGKILL").all()
    assert set(records.seed) == {0, 3} and len(records.point.unique()) == 4
    back = pd.read_parquet(tmp_path / "sweep" / "records.parquet")
    pd.testing.assert_frame_equal(back, records)


def test_a_script_needs_no_main_guard_for_workers(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(
        textwrap.dedent(f"""
        import flnet
        base = {BASE!r}
        table, records = flnet.sweep(base, {{"seed": [0, 1]}}, workers=2,
                                     out_dir={str(tmp_path / "out")!r})
        print("statuses", sorted(set(table.status)))
    """)
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("statuses") == 1 and "['completed']" in out.stdout


def _cli(*args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-m", "flnet.cli", "sweep", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        **kwargs,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_sweep_stopped_half_way_keeps_finished_points_and_does_not_rerun_them(tmp_path, sig):
    scenario = tmp_path / "s.yaml"
    # points long enough (about a second each) that the last ones cannot finish between the
    # test seeing two finished and the signal arriving
    scenario.write_text(json.dumps(merge(BASE, {"run": {"rounds": 300}})))
    args = [
        str(scenario),
        "--grid",
        "algorithm.local.steps=1,2",
        "--seeds",
        "0,1",
        "--workers",
        "1",
        "-q",
    ]
    proc = _cli(*args, "--out", str(tmp_path / "cut"))
    done: list[Path] = []
    deadline = time.monotonic() + 240
    while len(done) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        done = [
            p.parent
            for p in (tmp_path / "cut").glob("*/summary.json")
            if json.loads(p.read_text() or "{}").get("status") == "completed"
        ]
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    proc.send_signal(sig)
    stopped = time.monotonic()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert time.monotonic() - stopped < 120  # a hang guard, not a speed check
    assert "run the same flnet sweep command again" in err and "--resume" not in err
    kept = pd.read_csv(tmp_path / "cut" / "points.csv")
    finished = set(kept[kept.status == "completed"].point)
    assert {p.name for p in done} <= finished and len(finished) < 4
    stamps = {k: (tmp_path / "cut" / k / "summary.json").stat().st_mtime_ns for k in finished}

    again = _cli(*args, "--out", str(tmp_path / "cut"))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"{len(finished)} already finished" in out
    assert all(
        (tmp_path / "cut" / k / "summary.json").stat().st_mtime_ns == stamps[k] for k in finished
    )
    if sig != signal.SIGTERM:
        return  # the table comparison once is enough
    whole = _cli(*args, "--out", str(tmp_path / "whole"))
    whole.communicate(timeout=600)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "cut" / "records.parquet"),
        pd.read_parquet(tmp_path / "whole" / "records.parquet"),
    )


def test_cli_sweep_prints_full_headers_and_reports_invalid_points(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(BASE))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "flnet.cli",
            "sweep",
            str(scenario),
            "-q",
            "--grid",
            "algorithm.local.optimizer.name=sgd,sps",
            "--grid",
            "algorithm.local.lr=1e-3",
            "--set",
            "run.rounds=2",
            "--out",
            str(tmp_path / "o"),
            "--workers",
            "0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    assert "algorithm.local.optimizer.name" in out.stdout and "final_test_accuracy" in out.stdout
    assert "invalid: algorithm.local.lr: sps sets its own step size" in out.stderr
    assert "Traceback" not in out.stderr
    table = pd.read_csv(tmp_path / "o" / "points.csv")
    assert list(table.status) == ["completed", "invalid"]


@ON_RAY
def test_ray_runs_the_points_and_gives_the_same_table_as_local_workers(tmp_path):
    pytest.importorskip("ray")
    grid = {"algorithm.local.steps": [1, 2], "seed": [0, 1]}
    local_table, local = sweep(BASE, grid, workers=2, out_dir=tmp_path / "local")
    ray_table, on_ray = sweep_on_ray(BASE, grid, out_dir=tmp_path / "ray")
    pd.testing.assert_frame_equal(on_ray, local, check_exact=True)
    cols = ["point", "algorithm.local.steps", "seed", "status", "final_test_accuracy"]
    pd.testing.assert_frame_equal(ray_table[cols], local_table[cols], check_exact=True)
    # each point's folder is written by the driver as a local run writes it
    key = ray_table.point[0]
    assert (tmp_path / "ray" / key / "ledger.parquet").exists()
    assert (tmp_path / "ray" / key / "scenario.yaml").exists()


def test_a_scenario_files_sweep_section_is_the_sweep_and_the_command_line_adds_to_it():
    from flnet.sweeps import Spec, combine, load_base

    base, spec = load_base(ROOT / "scenarios" / "sweeps" / "tau_snr.yaml")
    assert "sweep" not in base and base["name"] == "tau_snr"
    points = plan(base, spec)
    assert len(points) == 12 and all(p.key for p in points)
    assert points[0].values == {"radio.uplink_snr_db": 0.0, "algorithm.local.steps": 1, "seed": 0}
    more = plan(base, combine(spec, spec_from({"algorithm.local.lr": [0.05, 0.1]})))
    assert len(more) == 24
    with pytest.raises(ScenarioError, match="algorithm.local.steps is swept in the file"):
        combine(spec, spec_from({"algorithm.local.steps": [2]}))
    with pytest.raises(ScenarioError, match="seeds are given in the file"):
        combine(spec, Spec(seeds=(3,)))
