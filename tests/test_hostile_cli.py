"""Hostile input through the real command (issue 41's leftovers): a ragged mixing matrix and
positions of 1e308 m are one clear scenario error from `flnet validate`; a scenario whose name
takes a folder name's 255 bytes still sweeps into a default folder (`runs/<name>-sweep` does
not fit); `flnet plot` and `flnet report` refuse a results file that is a FIFO, a device or
huge, by its kind or size, before reading; a YAML error names the line, the column and the
kind of error, never a piece of the file; a stream whose every upload is lost stops; a gossip
run follows availability and C-DFL refuses it. Each is a real `python -m flnet.cli` process, as a
user would run it.

Issue 41's eight classes, each tested on a real process (a CLI subprocess):
1. unbounded reads: test_userfiles (a FIFO named anywhere), the plot/report tests here;
2. another file's content echoed: the YAML test here, test_fuzz_cli (a marker never printed);
3. terminal injection: test_userfiles (a hostile name), test_fuzz_cli (no escape printed);
4. reader tracebacks: test_userfiles (FedScale), test_corpus, the matrix/positions/sweep here;
5. accepted nonsense: test_nonsense; 6. untrue messages: test_true_endings and the stream
here; 7. a warning lost: test_warnings_reach; 8. a family's edge: the gossip test here."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from harness import flnet_cli

from flnet.run_folders import NAME_MAX_BYTES, default_sweep_folder

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
GOSSIP = {
    "name": "hostile-gossip",
    "device": "cpu",
    "algorithm": {
        "name": "dpsgd",
        "topology": {"kind": "ring"},
        "local": {"steps": 1, "batch_size": 8},
    },
    "clients": {"count": 3},
    "run": {"rounds": 1},
}


def flnet(*args, cwd=REPO, timeout=300):
    proc = flnet_cli(*args, cwd=cwd, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_ragged_mixing_matrix_is_one_scenario_error_naming_the_row(tmp_path):
    data = {**GOSSIP, "algorithm": {**GOSSIP["algorithm"], "topology": {"kind": "matrix"}}}
    data["algorithm"]["topology"]["matrix"] = [[0.5, 0.5], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]
    rc, _, err = flnet("validate", write(tmp_path / "ragged.yaml", data))
    assert rc == 2, err
    assert "Traceback" not in err and "inhomogeneous" not in err
    assert "algorithm.topology.matrix: row 0 has 2 entries" in err
    assert "needs 3 in every row" in err


def test_positions_beyond_earth_are_refused_naming_the_coordinate_and_the_range(tmp_path):
    data = {
        **GOSSIP,
        "clients": {
            "count": 3,
            "positions": {"kind": "given", "xy_m": [[0, 0], [1e308, 0], [0, 5.0]]},
        },
        "radio": {"mode": "direct", "d2d": {"path_loss": {"kind": "log_distance"}}},
    }
    rc, _, err = flnet("validate", write(tmp_path / "far.yaml", data))
    assert rc == 2, err
    assert "Traceback" not in err
    assert "clients.positions.xy_m[1][0]: must be <= 10000000" in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 2, err  # the header and the one coordinate


def test_the_default_sweep_folder_of_a_long_name_fits_one_folder_name():
    short = default_sweep_folder("tau")
    assert short.as_posix() == "runs/tau-sweep"
    exact = "n" * (NAME_MAX_BYTES - len("-sweep"))
    assert default_sweep_folder(exact).name == exact + "-sweep"  # just fits: kept whole
    long_a, long_b = "n" * 254 + "a", "n" * 254 + "b"
    a, b = default_sweep_folder(long_a), default_sweep_folder(long_b)
    assert len(a.name.encode()) == NAME_MAX_BYTES and a.name.endswith("-sweep")
    assert a != b  # names sharing their first 247 bytes keep apart (the hash)
    assert a == default_sweep_folder(long_a)  # the same folder each time: a sweep resumes
    wide = default_sweep_folder("é" * 127)  # 254 bytes of two-byte characters
    assert len(wide.name.encode()) <= NAME_MAX_BYTES
    assert wide.name.startswith("é" * 60)  # cut on a character, not inside one


def test_a_sweep_of_a_250_character_name_runs_into_a_bounded_folder(tmp_path):
    data = {
        "name": "n" * 250,
        "device": "cpu",
        "algorithm": {
            "name": "fedavg",
            "cohort": {"clients_per_round": 2},
            "local": {"steps": 1, "batch_size": 8},
        },
        "clients": {"count": 3},
        "run": {"rounds": 1},
    }
    scenario = write(tmp_path / "long.yaml", data)
    rc, out, err = flnet("sweep", scenario, "-q", "--grid", "seed=0,1", cwd=tmp_path)
    assert rc == 0, err
    assert "Traceback" not in err and "too long" not in err
    (folder,) = (tmp_path / "runs").iterdir()
    assert folder.name == default_sweep_folder(data["name"]).name
    assert (folder / "points.csv").read_text().count("completed") == 2


@pytest.fixture
def results(run_dir, tmp_path):
    """A copy of a finished small run's folder, to break."""
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def one_error(rc, err):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


def test_plot_refuses_a_fifo_for_records_by_its_kind_without_blocking(results, tmp_path):
    (results / "records.parquet").unlink()
    os.mkfifo(results / "records.parquet")  # a reader opening it would wait for a writer
    rc, _, err = flnet("plot", results, "-o", tmp_path / "plots", timeout=120)
    line = one_error(rc, err)
    assert "records.parquet is a named pipe (FIFO), not a regular file" in line


def test_report_refuses_a_device_summary_and_a_huge_ledger(results, tmp_path):
    (results / "summary.json").unlink()
    (results / "summary.json").symlink_to("/dev/zero")  # endless: read, it fills memory
    rc, _, err = flnet("report", results, "-o", tmp_path / "r.html", timeout=120)
    assert "summary.json is a character device" in one_error(rc, err)
    (results / "summary.json").unlink()  # none: a reader goes on without it
    with open(results / "ledger.parquet", "r+b") as f:
        f.truncate(5 << 30)  # sparse: 5 GiB on paper, nothing on disk
    rc, _, err = flnet("report", results, "-o", tmp_path / "r.html", timeout=120)
    assert "ledger.parquet is 5120 MiB; a results table may be at most 4096 MiB" in one_error(
        rc, err
    )


def test_plot_names_a_broken_scenario_yaml_without_quoting_it(results, tmp_path):
    (results / "scenario.yaml").write_text(f"name: x\nseed: !{SECRET} 1\n")
    rc, _, err = flnet("plot", results, "-o", tmp_path / "plots", timeout=120)
    line = one_error(rc, err)
    assert f"{results / 'scenario.yaml'}: not valid YAML at line 2, column 7" in line, line
    assert SECRET not in err


def test_a_fifo_in_the_lock_file_place_does_not_block_a_reader(results, tmp_path):
    summary = (results / "summary.json").read_text()
    (results / "summary.json").write_text(summary.replace('"completed"', '"running"'))
    (results / ".flnet.lock").unlink(missing_ok=True)
    os.mkfifo(results / ".flnet.lock")  # opened to probe who holds the run's lock
    rc, out, err = flnet("plot", results, "-o", tmp_path / "plots", timeout=120)
    assert rc == 0, err
    assert (tmp_path / "plots" / "accuracy_vs_time.png").exists(), out


SECRET = "SECRETxyzzy"
LEAKY_YAML = {  # what PyYAML's own message would quote -> the kind of error said instead
    f"name: !{SECRET} x": "could not determine a constructor for the tag",
    f"name: *{SECRET}": "found undefined alias",
    f"name: !{SECRET}!x y": "found undefined tag handle",
    f"%{SECRET} x\n---\nname: x": "found unknown directive name",
    f"a: [&{SECRET} 1, &{SECRET} 2]": "second occurrence",
    f"name: !!int 12{SECRET}": "not a valid int",
    "name: !!timestamp 2001-13-45": "not a valid timestamp",
    f"name: {SECRET}\x01": "character #x0001 is not allowed in YAML",
}


def test_yaml_errors_name_line_column_and_kind_never_the_files_text(tmp_path):
    """Each broken file is named by `extends:` from a scenario, as a shared scenario could
    name any local file; all go through one driver process (tests/corpus_driver.py), the
    first through its own `flnet validate` too."""
    argv = []
    for i, text in enumerate(LEAKY_YAML):
        target = tmp_path / f"other{i}.txt"
        target.write_text(text + "\n")
        scenario = tmp_path / f"s{i}.yaml"
        scenario.write_text(f"extends: {target}\nalgorithm: {{name: fedavg}}\n")
        argv.append([str(scenario)])
    results = drive(tmp_path, argv)
    results[0] = dict(zip(("rc", "stdout", "stderr"), flnet("validate", *argv[0], timeout=120)))
    assert len(results) == len(argv)
    for i, (kind, result) in enumerate(zip(LEAKY_YAML.values(), results)):
        line = one_error(result["rc"], result["stderr"])
        assert f"other{i}.txt: not valid YAML at line 1, column " in line, line
        assert kind in line, line
        assert SECRET not in line and "2001-13-45" not in line, line


def drive(tmp_path, argv):
    """`flnet validate` of each argument list in one process (tests/corpus_driver.py)."""
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps(argv))
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "corpus_driver.py"), str(cases)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=60 * len(argv),
    )
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(argv), proc.stderr
    return results


@pytest.mark.parametrize("algorithm", ["fedbuff", "fedasync"])
def test_a_stream_whose_every_upload_is_lost_stops_and_says_why(tmp_path, algorithm):
    """Every work is dropped before its upload arrives: no server update would ever come, and
    the stream used to retrain forever. It fails after 1,000 works in a row, saying so."""
    data = {
        "name": "lossy",
        "device": "cpu",
        "data": {"dataset": "synthetic"},
        "model": {"kind": "logistic"},
        "algorithm": {"name": algorithm, "concurrency": 2, "local": {"steps": 1, "batch_size": 4}},
        "clients": {"count": 4, "dropout_probability": 0.999999},
        "run": {"rounds": 2},
    }
    out = tmp_path / "out"
    rc, _, err = flnet("run", write(tmp_path / "s.yaml", data), "--out", out, "-q", timeout=300)
    line = one_error(rc, err)
    assert "no upload arrived in 1,000 works in a row (1,000 dropped)" in line, line
    assert "clients.dropout_probability" in line
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds"] == 0
    assert "no upload arrived" in summary["error"]


def test_gossip_nodes_follow_availability_and_cdfl_refuses_it(tmp_path):
    """Class 8: a feature either works with a family or is refused naming both. D-PSGD nodes
    online with p = 0.5 train in fewer than all 4 x 3 node-iterations; C-DFL, whose public
    copies an offline node would leave apart, refuses availability at validation."""
    data = {
        "name": "edge",
        "device": "cpu",
        "data": {"dataset": "synthetic"},
        "model": {"kind": "logistic"},
        "algorithm": {
            "name": "dpsgd",
            "topology": {"kind": "ring"},
            "local": {"steps": 1, "batch_size": 4},
        },
        "clients": {"count": 4, "availability": {"kind": "bernoulli", "p": 0.5}},
        "run": {"rounds": 3},
    }
    out = tmp_path / "out"
    rc, _, err = flnet("run", write(tmp_path / "g.yaml", data), "--out", out, "-q")
    assert rc == 0, err
    ledger = pd.read_parquet(out / "ledger.parquet")
    computes = int((ledger.kind == "compute").sum())
    assert 0 < computes < 4 * 3, computes
    data["algorithm"] = {"name": "cdfl", "topology": {"kind": "ring"}}
    rc, _, err = flnet("validate", write(tmp_path / "c.yaml", data))
    assert rc == 2, err
    assert "clients.availability.kind: must be 'always' for cdfl, got 'bernoulli'" in err


def test_a_d2d_link_without_a_rate_stops_the_run_with_one_error_naming_it(tmp_path):
    """An SNR that is 0 in floating point: the first message between two nodes would never
    arrive; the run ends at once with exit 2 and one error naming radio.d2d."""
    data = {
        **GOSSIP,
        "radio": {"mode": "direct", "d2d": {"snr_db": -4000}},
        "output": {"dir": str(tmp_path / "out")},
    }
    rc, _, err = flnet("run", write(tmp_path / "mute.yaml", data), timeout=300)
    assert rc == 2 and "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]  # beside the progress
    assert len(errors) == 1, err
    assert "radio.d2d: the D2D link" in errors[0] and "has a rate of 0 bit/s" in errors[0], err
    (summary,) = (tmp_path / "out").rglob("summary.json")
    recorded = json.loads(summary.read_text())
    assert recorded["status"] == "failed" and "radio.d2d" in recorded["error"]
