import json
import subprocess
import sys


def flnet(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "flnet.cli", *args], capture_output=True,
                          text=True, cwd=cwd)


def test_validate_bad_file_gives_one_clear_error_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {name: fedavg}\nradio: {uplink: {bandwidth_hz: -1}}\n")
    out = flnet("validate", str(bad))
    assert out.returncode == 2
    assert "radio.uplink.bandwidth_hz: must be > 0" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_validate_good_file():
    out = flnet("validate", "scenarios/quickstart.yaml")
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


def test_run_writes_results_and_prints_summary(tmp_path):
    out = flnet("run", "scenarios/quickstart.yaml", "--quiet", "--out", str(tmp_path),
                "--set", "run.rounds=3", "--set", "output.format=csv")
    assert out.returncode == 0, out.stderr
    assert "final test accuracy" in out.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["status"] == "completed"
    assert (tmp_path / "records.csv").exists() and (tmp_path / "ledger.csv").exists()


def test_schema_command_writes_json(tmp_path):
    out = flnet("schema", "-o", str(tmp_path / "s.json"))
    assert out.returncode == 0
    assert json.loads((tmp_path / "s.json").read_text())["title"] == "Scenario"
