"""Hostile input through the real command (issue 41's leftovers): a ragged mixing matrix and
positions of 1e308 m are one clear scenario error from `flnet validate`; a scenario whose name
takes a folder name's 255 bytes still sweeps into a default folder (`runs/<name>-sweep` does
not fit). Each is a real `python -m flnet.cli` process, as a user would run it."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

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
    proc = subprocess.run(
        [sys.executable, "-m", "flnet.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=cwd,
        timeout=timeout,
    )
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
