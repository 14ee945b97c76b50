"""User files and strings handled safely (issue 41, classes 1-4): a file is read only if it is
a regular file and only up to a limit counted while reading; user strings reach the terminal
as text; the trace readers and the FedScale converter name the file, the line and the fault.
The hostile scenario and trace files themselves are in tests/corpus.py (run by test_corpus)."""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from flnet import fedscale
from flnet.base import userfiles
from flnet.errors import FlnetError
from flnet.sim.traces import read_availability, read_capacity

CLI = [sys.executable, "-m", "flnet.cli"]


def _flnet(*argv: str) -> subprocess.CompletedProcess:
    """A real process under a hang guard (not a speed check)."""
    return subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=300)


def test_the_limit_is_counted_while_reading_not_taken_from_the_size(tmp_path):
    status = Path("/proc/self/status")  # a regular file whose reported size is 0
    if not status.exists() or status.stat().st_size != 0:
        pytest.skip("needs Linux's /proc")
    with pytest.raises(FlnetError, match="status is over 0 MiB; a test file may be at most"):
        userfiles.read_bytes(status, 64, "test file")
    assert b"Name:" in userfiles.read_bytes(status, 1 << 20, "test file")
    big = tmp_path / "big.txt"
    big.write_text("x\n" * 1000)
    with pytest.raises(FlnetError, match="big.txt is 0.0 MiB; a test file may be at most 0 MiB"):
        list(userfiles.text_lines(big, 1000, "test file"))
    assert len(list(userfiles.text_lines(big, 2000, "test file"))) == 1000


def test_devices_folders_and_fifos_are_refused_by_kind(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (
        ("/dev/zero", "a character device"),
        (tmp_path, "a directory"),
        (fifo, r"a named pipe \(FIFO\)"),
    ):
        with pytest.raises(FlnetError, match=f"is {kind}, not a regular file; a trace"):
            userfiles.read_bytes(path, 1 << 20, "trace file")
    with pytest.raises(FlnetError, match="trace file not found"):
        userfiles.read_bytes(tmp_path / "none", 1 << 20, "trace file")


def test_a_fifo_swapped_in_after_the_check_cannot_block(tmp_path):
    """The kind is checked again on the descriptor, opened non-blocking: a FIFO that replaces
    the file between the check and the open is refused, not waited on."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "import sys; from flnet.base import userfiles\n"
        "userfiles.check_regular = lambda *a: None  # as if the file were swapped after it\n"
        "try:\n"
        f"    userfiles.read_bytes({str(fifo)!r}, 100, 'trace file')\n"
        "except Exception as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "is a named pipe (FIFO), not a regular file" in out.stdout, out.stderr


def test_validate_returns_on_a_fifo_named_anywhere(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for name, text in (
        ("extends", f"extends: {fifo}\n"),
        (
            "trace",
            "algorithm: {name: fedavg}\n"
            f"clients: {{count: 2, availability: {{kind: trace, path: {fifo}}}}}\n",
        ),
    ):
        path = tmp_path / f"{name}.yaml"
        path.write_text(text)
        out = _flnet("validate", str(path))
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and "is a named pipe (FIFO)" in out.stderr


def test_printable_escapes_control_characters_and_keeps_the_rest():
    assert userfiles.printable("x[red]y\x1b]0;T\x07\x1b[2J") == "x[red]y\\x1b]0;T\\x07\\x1b[2J"
    assert userfiles.printable("a\u202eb\x9bc\x7f") == "a\\u202eb\\x9bc\\x7f"
    assert userfiles.printable("ünï\tcode\nnext") == "ünï\tcode\nnext"
    assert userfiles.printable("one\ntwo", lines=False) == "one\\ntwo"


SCENARIO = (
    "seed: 0\ndevice: cpu\nalgorithm: {name: fedavg, cohort: {clients_per_round: 2}, "
    "local: {steps: 1, batch_size: 2}}\nclients: {count: 2}\nrun: {rounds: 1}\n"
)


def test_a_hostile_name_prints_as_text_not_as_markup_or_escapes(tmp_path):
    path = tmp_path / "s.yaml"
    name = "x[red]y\\e]0;PWNED\\a\\e[2J"
    path.write_text(f'name: "{name}"\n{SCENARIO}output: {{dir: {tmp_path / "run"}}}\n')
    runs = [
        _flnet("run", str(path), "--quiet"),
        _flnet("validate", str(path)),
        _flnet("validate", str(path), "--set", 'extends="\\e[2J\\e]0;T\\a"'),
        _flnet("validate", str(path), "--set", 'algorithm.name="\\e[2Jx"'),
    ]
    for out in runs:
        assert "\x1b" not in out.stdout + out.stderr and "\x07" not in out.stdout + out.stderr
    assert runs[0].returncode == 0, runs[0].stderr
    assert "x[red]y\\x1b]0;PWNED\\x07\\x1b[2J (fedavg, seed 0)" in runs[0].stdout
    assert [r.returncode for r in runs[1:]] == [0, 2, 2]
    assert "\\x1b[2J" in runs[3].stderr


HEADER = "client,online_from_s,online_until_s\n0,0,10\n1,5,7\n"


def test_a_byte_order_mark_as_spreadsheets_write_it_is_accepted(tmp_path):
    plain, marked = tmp_path / "plain.csv", tmp_path / "bom.csv"
    plain.write_text(HEADER)
    marked.write_bytes(b"\xef\xbb\xbf" + HEADER.encode())
    a, b = read_availability(plain), read_availability(marked)
    assert a.ids.tolist() == b.ids.tolist() == [0, 1]
    assert b.from_s.tolist() == [0.0, 5.0] and b.until_s.tolist() == [10.0, 7.0]
    cap = tmp_path / "cap.csv"
    cap.write_bytes(b"\xef\xbb\xbfclient,compute_s_per_sample,up_rate_bps,down_rate_bps\n3,1,2,4\n")
    assert read_capacity(cap).up_rate_bps.tolist() == [2.0]


def _pickle(path: Path, data) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path


AVAIL = {1: {"active": [0], "inactive": [5], "finish_time": 10}}


def test_fedscale_refuses_a_key_past_64_bits_in_one_line(tmp_path):
    pkl = _pickle(tmp_path / "a.pkl", {2**70: AVAIL[1]})
    out = _flnet("traces", "fedscale", str(pkl), "-o", str(tmp_path / "out"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "client key 1180591620717411303424 does not fit 64 bits" in out.stderr
    assert not (tmp_path / "out").exists()


def test_fedscale_replaces_a_csv_only_with_force(tmp_path):
    pkl = _pickle(tmp_path / "a.pkl", AVAIL)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "availability.csv").write_text("mine\n")
    out = _flnet("traces", "fedscale", str(pkl), "-o", str(out_dir))
    assert out.returncode == 2 and "availability.csv already exists; --force" in out.stderr
    assert (out_dir / "availability.csv").read_text() == "mine\n"
    out = _flnet("traces", "fedscale", str(pkl), "-o", str(out_dir), "--force")
    assert out.returncode == 0, out.stderr
    assert read_availability(out_dir / "availability.csv").ids.tolist() == [1]
    assert sorted(p.name for p in out_dir.iterdir()) == ["availability.csv"]  # no .part left


def test_fedscale_writes_nothing_when_either_pickle_is_bad(tmp_path):
    pkl = _pickle(tmp_path / "a.pkl", AVAIL)
    cap = _pickle(tmp_path / "c.pkl", {1: {"computation": 0, "communication": 5}})
    with pytest.raises(FlnetError, match="computation must be > 0"):
        fedscale.convert(pkl, cap, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_fedscale_output_that_cannot_be_a_folder_or_written_is_one_line(tmp_path):
    pkl = _pickle(tmp_path / "a.pkl", AVAIL)
    out = _flnet("traces", "fedscale", str(pkl), "-o", str(pkl))
    assert out.returncode == 2 and "a.pkl exists and is not a folder" in out.stderr
    assert pkl.read_bytes() == pickle.dumps(AVAIL)
    for where in ("/proc/flnet-out", "/sys/flnet-out"):  # file systems nobody can write to
        out = _flnet("traces", "fedscale", str(pkl), "-o", where)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
        assert f"cannot write {where}/availability.csv" in out.stderr
