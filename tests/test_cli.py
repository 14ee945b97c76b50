import json
import os
import signal
import subprocess
import sys
import warnings

import pytest
from harness import flnet_cli

from flnet.errors import TopologyWarning


def test_validate_bad_file_gives_one_clear_error_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {name: fedavg}\nradio: {uplink: {bandwidth_hz: -1}}\n")
    out = flnet_cli("validate", str(bad))
    assert out.returncode == 2
    assert "radio.uplink.bandwidth_hz: must be > 0" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_validate_good_file():
    out = flnet_cli("validate", "scenarios/quickstart.yaml")
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


def test_validate_checks_every_point_of_a_sweep_file(tmp_path):
    """A file with a `sweep:` section is validated point by point: a point `run` would refuse
    (SPS with a learning rate) is named with its swept values; the others pass."""
    path = tmp_path / "s.yaml"
    sweep = {"grid": {"algorithm.local.optimizer.name": ["sgd", "sps"]}, "seeds": [0, 1]}
    scenario = {"clients": {"count": 10}, "run": {"rounds": 2}, "sweep": sweep}
    path.write_text(json.dumps({**scenario, "algorithm": {"name": "fedavg"}}))
    good = flnet_cli("validate", str(path))
    assert good.returncode == 0, good.stderr
    assert "a sweep of 4 points" in good.stdout
    bad = flnet_cli("validate", str(path), "--set", "algorithm.local.lr=0.1")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    lines = [line for line in bad.stderr.splitlines() if "sweep point" in line]
    assert len(lines) == 2 and all("optimizer.name=sps" in line for line in lines), bad.stderr
    assert all("sps sets its own step size" in line for line in lines)


def test_run_writes_results_and_prints_summary(tmp_path):
    out = flnet_cli(
        "run",
        "scenarios/quickstart.yaml",
        "--quiet",
        "--out",
        str(tmp_path),
        "--set",
        "run.rounds=3",
        "--set",
        "output.format=csv",
    )
    assert out.returncode == 0, out.stderr
    assert "final test accuracy" in out.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["status"] == "completed"
    assert (tmp_path / "records.csv").exists() and (tmp_path / "ledger.csv").exists()


def test_schema_command_writes_json(tmp_path):
    out = flnet_cli("schema", "-o", str(tmp_path / "s.json"))
    assert out.returncode == 0
    assert json.loads((tmp_path / "s.json").read_text())["title"] == "Scenario"


def test_help_version_and_schema_never_load_torch(tmp_path):
    code = (
        "import sys\nfrom flnet.cli import main\n"
        "for argv in (['--help'], ['--version'], ['schema', '-o', sys.argv[1]]):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print('torch' in sys.modules, 'flnet.algorithms.fedavg' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s.json")], capture_output=True, text=True
    )
    assert out.stdout.strip().splitlines()[-1] == "False False", out.stderr


def test_version():
    import flnet

    out = flnet_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"flnet {flnet.__version__}"


def test_the_command_exits_with_its_code_past_a_native_teardown_that_aborts():
    """pyarrow's thread pool can abort in the C library's exit teardown (SIGABRT, once in a
    thousand CLI runs in CI). An `abort` registered as a C exit handler (`__cxa_atexit`, as a
    C++ static's destructor is) stands in for it: the command still ends with its own code, its
    output flushed and Python's exit handlers run."""
    code = (
        "import atexit, ctypes, sys\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)\n"
        "atexit.register(lambda: print('python exit handlers ran'))\n"
        "from flnet.cli import exit_now\n"
        "print('unflushed', end='')\n"
        "exit_now(2) if sys.argv[1] == 'flnet' else sys.exit(2)\n"
    )
    plain, ours = (
        subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True)
        for how in ("python", "flnet")
    )
    assert plain.returncode == -signal.SIGABRT  # the stand-in aborts Python's own exit
    assert ours.returncode == 2, ours.stderr
    assert ours.stdout == "unflushedpython exit handlers ran\n"


def test_the_command_says_when_its_last_output_cannot_be_written():
    """`exit_now` flushes what a command left buffered: on a full disk it says so and exits
    120 (a success must not look like one), to a reader that left 141, as a shell reports."""
    code = "from flnet.cli import exit_now\nprint('the last line')\nexit_now(0)\n"
    run = [sys.executable, "-c", code]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # left buffered
    with open("/dev/full", "w") as full:
        out = subprocess.run(run, stdout=full, stderr=subprocess.PIPE, text=True, env=env)
    assert out.returncode == 120
    assert out.stderr.startswith("error: could not write the output: [Errno 28]"), out.stderr
    reader = subprocess.Popen(run, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    reader.stdout.close()  # the reader leaves before the command flushes
    assert reader.wait() == 141 and reader.stderr.read() == b""


def test_top_level_help_lists_every_command_on_one_line():
    from flnet.cli import parser

    commands = parser()._subparsers._group_actions[0].choices
    text = flnet_cli("--help").stdout
    for name in commands:
        line = next((ln for ln in text.splitlines() if ln.split()[:1] == [name]), None)
        assert line is not None and len(line.split()) > 1, f"{name} missing from:\n{text}"


def test_validate_makes_the_checks_run_makes_with_the_same_message(tmp_path, capsys):
    from flnet.cli import main

    cases = {  # each passes the schema; run (and now validate) refuses it
        "deadline": "algorithm: {name: fedavg, cohort: {deadline_s: 1.0e-9}}\n",
        "shards": "algorithm: {name: fedavg}\n"
        "data: {partition: {kind: shards, classes_per_client: 12}}\n",
        "clients": "algorithm: {name: fedavg}\nclients: {count: 3000}\n",
        "npz": "algorithm: {name: fedavg}\nmodel: {kind: logistic}\n"
        f"data: {{features: {{kind: npz, path: {tmp_path / 'none.npz'}}}}}\n",
    }
    for name, text in cases.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text("device: cpu\n" + text)
        assert main(["validate", str(path)]) == 2
        said = capsys.readouterr().err.strip()
        assert main(["run", str(path), "--quiet", "--out", str(tmp_path / name)]) == 2
        ran = capsys.readouterr().err.strip()
        assert said.splitlines() == [f"error: {path}: {ran.removeprefix('error: ')}"], name


def test_validate_reports_every_bad_file_and_passes_good_ones(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: {name: fedavg}\nclients: {count: 3000}\n")
    out = flnet_cli("validate", str(bad), "scenarios/quickstart.yaml")
    assert out.returncode == 2
    assert out.stderr.count("error:") == 1 and "data.share_rows" in out.stderr
    assert "clients.count: 3000 clients" in out.stderr  # the field the user set
    assert "quickstart.yaml: ok" in out.stdout


def test_unit_warnings_are_one_line_each_on_stderr(tmp_path):
    path = tmp_path / "units.yaml"
    path.write_text(
        "algorithm: {name: fedavg}\nclients: {cpu_hz: 1.5}\nradio: {uplink: {bandwidth_hz: 20}}\n"
    )
    out = flnet_cli("validate", str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2 and all(ln.startswith("warning: ") for ln in lines)
    assert any("did you mean 20 MHz (20e6)?" in ln for ln in lines)


def test_output_into_a_closed_pipe_ends_quietly():
    """`flnet schema | head -1`: the reader leaves early; no traceback, the shell's SIGPIPE
    status."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flnet.cli", "schema"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.stdout.close()  # before the child writes a byte
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141, err
    assert "Traceback" not in err and "Broken pipe" not in err


@pytest.mark.parametrize(
    "algorithm",
    [
        {"name": "dpsgd", "topology": {"kind": "random_k", "k": 2}},  # directed: not doubly st.
        {"name": "oledfl_sgd", "beta": 0.9, "topology": {"kind": "ring"}},  # lambda_min -1/3
    ],
    ids=["dpsgd", "oledfl"],
)
def test_validate_gives_the_topology_warnings_a_run_gives(scenario, algorithm):
    """The gossip protocols check W (and OledFL beta's stability) before their first step:
    validate (`runner.check`) makes those checks too, with the same messages, and trains
    nothing."""
    from flnet.runner import check, run

    sc = scenario(
        algorithm={**algorithm, "local": {"steps": 1, "batch_size": 4, "lr": 0.05}},
        clients={"count": 4 if algorithm["name"] == "oledfl_sgd" else 6},
        run={"rounds": 1},
    )

    def warned(call):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        return [str(w.message) for w in caught if issubclass(w.category, TopologyWarning)]

    by_run = warned(lambda: run(sc, write=False))
    assert by_run and warned(lambda: check(sc)) == by_run


def test_validate_prints_a_topology_warning_and_passes(tmp_path):
    path = tmp_path / "directed.yaml"
    path.write_text(
        "device: cpu\nclients: {count: 6}\n"
        "algorithm: {name: dpsgd, topology: {kind: random_k, k: 2}}\n"
    )
    out = flnet_cli("validate", str(path))
    assert out.returncode == 0 and "directed.yaml: ok" in out.stdout
    assert "warning: algorithm.topology: D-PSGD's analysis assumes a doubly stochastic W" in (
        out.stderr
    )
