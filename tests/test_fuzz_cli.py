"""Fuzz test of the real command (issue 41): hypothesis makes hostile scenario files, trace CSVs
and FedScale pickles, and files that are not what the paths naming them claim (a password file,
a key, YAML whose errors would quote a token, binary junk) holding a secret marker; the real
CLI (`flnet validate`, `flnet traces fedscale`) runs on them in a subprocess under a wall-clock
guard. Every case must end (no hang) with exit 0, or exit 2 and one error: one `error:` line
(a scenario error adds one indented line per field), no traceback, no escape sequence, and the
marker never printed. A pickle's code never runs.

To stay within a minute in CI each example is a batch of cases run by one driver process
(tests/corpus_driver.py: a process start costs about a second), and the examples are few and
derandomized (tests/conftest.py; FLNET_FUZZ_SCALE=30 searches thirty times as many, at random).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import FUZZ_SCALE
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
MARKER = "QZXsecret7"  # in files that are not what their path claims: never to be printed
CASE_ALARM_S = 30  # a case over this is a hang (the driver's alarm)

VALID = {
    "name": "fuzz",
    "seed": 0,
    "device": "cpu",
    "model": {"kind": "logistic"},
    "algorithm": {
        "name": "fedavg",
        "cohort": {"clients_per_round": 2},
        "local": {"steps": 1, "batch_size": 4},
    },
    "clients": {"count": 4},
    "run": {"rounds": 1},
}

# ---------------------------------------------------- files that are not what their path claims

YAML_TOKENS = [  # PyYAML's own message would quote each marker
    f"!{MARKER} x",
    f"*{MARKER}",
    f"!{MARKER}!x y",
    f"[&{MARKER} 1, &{MARKER} 2]",
    f"!!int {MARKER}",
    f"!!float {MARKER}",
    f"!!timestamp 2001-13-45{MARKER}",
    f'"\\{MARKER}"',
    f"{MARKER}\x01",
    f"{MARKER}: [unclosed",
]


@st.composite
def secret_texts(draw) -> bytes:
    """A file holding the marker that is no scenario, trace or pickle."""
    shape = draw(st.sampled_from(["shadow", "key", "yaml", "mapping", "binary", "ini", "list"]))
    lead = draw(st.sampled_from(["", "seed: 0\n", "name: x\nseed: 1\n"]))
    if shape == "shadow":
        users = draw(st.lists(st.sampled_from(["root", "daemon", "bin"]), min_size=1, max_size=3))
        text = "".join(f"{u}:$6$salt${MARKER}:19000:0:99999:7:::\n" for u in users)
    elif shape == "key":
        text = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{MARKER}AAAA\n-----END-----\n"
    elif shape == "yaml":
        key = draw(st.sampled_from(["name", "seed", "x", "clients"]))
        text = (
            lead
            + draw(st.sampled_from([f"{key}: ", "", "- "]))
            + draw(st.sampled_from(YAML_TOKENS))
        )
    elif shape == "mapping":  # keys no scenario has, and that do not look like field names
        keys = draw(st.lists(st.sampled_from(["$", "$$", "-", "$x-"]), min_size=1, max_size=3))
        text = lead + "".join(f'"{k}{MARKER}": {i}\n' for i, k in enumerate(keys))
    elif shape == "binary":
        junk = draw(st.binary(min_size=1, max_size=40))
        return junk + MARKER.encode() + b"\xff\xfe" + junk
    elif shape == "ini":
        text = f"[core]\n\turl = https://{MARKER}@example.org\n"
    else:
        text = f'["{MARKER}", 1]\n'
    return text.encode()


def secret_case(folder: Path, text: bytes, via: str) -> dict:
    """The argument list naming the secret file as `via` says."""
    secret = folder / "other.txt"
    secret.write_bytes(text)
    if via == "direct":
        return {"argv": ["validate", str(secret)], "secret": True}
    if via == "fedscale":
        return {
            "argv": ["traces", "fedscale", str(secret), "-o", str(folder / "traces")],
            "secret": True,
        }
    data = json.loads(json.dumps(VALID))
    if via == "extends":
        data["extends"] = str(secret)
    elif via == "trace":
        data["clients"]["availability"] = {"kind": "trace", "path": str(secret)}
    elif via == "capacity":
        data["clients"]["capacity_trace"] = {"path": str(secret), "compute_power_w": 1.0}
    elif via == "features":
        data["data"] = {"features": {"kind": "npz", "path": str(secret)}}
    scenario = folder / "s.yaml"
    scenario.write_text(yaml.safe_dump(data))
    return {"argv": ["validate", str(scenario)], "secret": True}


VIA = ["direct", "extends", "trace", "capacity", "features", "fedscale"]

# ---------------------------------------------------------------- hostile scenario values

HOSTILE = [
    None,
    True,
    -1,
    0,
    2**63,
    10**30,
    -1e308,
    1e308,
    float("nan"),
    float("inf"),
    5e-324,
    "",
    "x" * 300,
    "[red]x\x1b]0;PWNED\x07y\x1b[2J",
    "../../etc",
    "a\x00b",
    "/dev/zero",
    [],
    [[1, 2], [3]],
    {"kind": "zzz"},
    {"kind": "given", "xy_m": [[1e308, 0], [0, 0], [1, 1], [2, 2]]},
    {"kind": "matrix", "matrix": [[0.5, 0.5], [1.0]]},
    {"kind": "trace", "path": "/dev/zero"},
    "dpsgd",
]
FIELDS = [
    "name",
    "label",
    "seed",
    "device",
    "extends",
    "algorithm.name",
    "algorithm.topology",
    "algorithm.cohort.clients_per_round",
    "algorithm.local.steps",
    "algorithm.local.batch_size",
    "clients.count",
    "clients.cpu_hz",
    "clients.positions",
    "clients.availability",
    "clients.dropout_probability",
    "clients.battery",
    "radio.uplink.bandwidth_hz",
    "radio.distance_m",
    "data.partition",
    "run.rounds",
    "output.dir",
]


def set_path(data: dict, path: str, value) -> None:
    node = data
    *parents, last = path.split(".")
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[last] = value


def scenario_case(folder: Path, changes: list) -> dict:
    data = json.loads(json.dumps(VALID))
    for path, value in changes:
        set_path(data, path, value)
    scenario = folder / "s.yaml"
    # allow_unicode=False: control characters are written as YAML escapes, so the file is YAML
    scenario.write_text(yaml.safe_dump(data, allow_unicode=False))
    return {"argv": ["validate", str(scenario)], "secret": False}


# ---------------------------------------------------------------- trace CSVs

CELLS = ["0", "1", "-1", "2", "60", "1e308", "nan", "inf", "", "x", "1_0", "0x10", " 5 ", '"0"']
CELLS += ['"', '"0', "1" * 5000, "9" * 140_000, "1" + "0" * 23, "١", "1e-320"]
HEADERS = [
    "client,online_from_s,online_until_s",
    "\ufeffclient,online_from_s,online_until_s",
    "client,online_from_s,online_until_s,tz_offset_s",
    "client,online_from_s,online_until_s,charging",
    "client,online_from_s",
    "client,client,online_until_s",
    "",
]


@st.composite
def trace_texts(draw) -> str:
    header = draw(st.sampled_from(HEADERS))
    width = max(1, header.count(",") + 1)
    period = draw(st.sampled_from(["", "# period_s: 60\n", "# period_s: -1\n", "# period_s: x\n"]))
    rows = draw(
        st.lists(
            st.lists(st.sampled_from(CELLS), min_size=width - 1, max_size=width + 1),
            max_size=4,
        )
    )
    return period + header + "\n" + "".join(",".join(r) + "\n" for r in rows)


def trace_case(folder: Path, text: str, count: int) -> dict:
    trace = folder / "trace.csv"
    trace.write_text(text)
    data = json.loads(json.dumps(VALID))
    data["clients"]["count"] = count
    data["algorithm"]["cohort"]["clients_per_round"] = 1
    data["clients"]["availability"] = {"kind": "trace", "path": str(trace)}
    scenario = folder / "s.yaml"
    scenario.write_text(yaml.safe_dump(data))
    return {"argv": ["validate", str(scenario)], "secret": False}


# ---------------------------------------------------------------- FedScale pickles

numbers = st.one_of(
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
)
sessions = st.fixed_dictionaries(
    {},
    optional={
        "active": st.lists(numbers, max_size=3),
        "inactive": st.lists(numbers, max_size=3),
        "finish_time": numbers,
        "computation": numbers,
        "communication": numbers,
    },
)
traces = st.dictionaries(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=3)), sessions)
plain = st.recursive(numbers, lambda inner: st.lists(inner, max_size=3), max_leaves=6)
EVIL = b"cos\nsystem\n(S'touch pwned'\ntR."  # __reduce__ to os.system


@st.composite
def pickles(draw) -> bytes:
    kind = draw(st.sampled_from(["trace", "plain", "evil", "torn"]))
    if kind == "evil":
        return EVIL
    obj = draw(traces if kind != "plain" else plain)
    raw = pickle.dumps(obj, protocol=draw(st.integers(0, pickle.HIGHEST_PROTOCOL)))
    return raw[: draw(st.integers(1, max(1, len(raw) - 1)))] if kind == "torn" else raw


def pickle_case(folder: Path, avail: bytes, capacity: bytes | None) -> dict:
    (folder / "a.pkl").write_bytes(avail)
    argv = ["traces", "fedscale", str(folder / "a.pkl")]
    if capacity is not None:
        (folder / "c.pkl").write_bytes(capacity)
        argv.append(str(folder / "c.pkl"))
    return {"argv": [*argv, "-o", str(folder / "out")], "secret": False}


# ---------------------------------------------------------------- the test

batches = st.tuples(
    st.lists(st.tuples(secret_texts(), st.sampled_from(VIA)), min_size=2, max_size=2),
    st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(HOSTILE)), min_size=1, max_size=3),
    st.tuples(trace_texts(), st.integers(1, 3)),
    st.tuples(pickles(), st.one_of(st.none(), pickles())),
)


def run_batch(folder: Path, cases: list[dict]) -> list[dict]:
    """Every case in one driver process; a case past the alarm, or the process past its own
    limit, is a hang."""
    argv = folder / "cases.json"
    argv.write_text(json.dumps([{"argv": c["argv"]} for c in cases]))
    limit_s = CASE_ALARM_S * len(cases) + 60
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "tests" / "corpus_driver.py"),
                str(argv),
                str(CASE_ALARM_S),
            ],
            capture_output=True,
            text=True,
            env=ENV,
            cwd=folder,
            timeout=limit_s,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: the driver ran past {limit_s} s on {[c['argv'] for c in cases]}")
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(cases), proc.stderr[-2000:]
    return results


def check(case: dict, result: dict) -> None:
    said = result["stderr"] + result["stdout"]
    where = f"{case['argv']}: exit {result['rc']}: {said[-1500:]}"
    assert result["rc"] != "hang", f"hang: {where}"
    assert "Traceback" not in said, where
    assert result["rc"] in (0, 2), where
    assert "\x1b" not in said and "\x07" not in said, f"escape sequence printed: {where}"
    if case["secret"]:
        assert MARKER not in said, f"echoed a file's content: {where}"
        assert result["rc"] == 2, where
    if result["rc"] == 2:
        lines = [ln for ln in result["stderr"].splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith("warning:")]
        assert lines and lines[0].startswith("error:"), where
        assert all(ln.startswith("  ") for ln in lines[1:]), f"more than one error: {where}"
        assert not case["secret"] or len(lines) == 1, where


@settings(
    max_examples=4 * FUZZ_SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=batches)
def test_hostile_files_through_the_real_command(tmp_path_factory, batch):
    secrets, changes, (trace, count), (avail, capacity) = batch
    root = tmp_path_factory.mktemp("fuzz")
    cases = []
    for i, (text, via) in enumerate(secrets):
        (root / f"secret{i}").mkdir()
        cases.append(secret_case(root / f"secret{i}", text, via))
    for name, make in (
        ("scenario", lambda f: scenario_case(f, changes)),
        ("trace", lambda f: trace_case(f, trace, count)),
        ("pickle", lambda f: pickle_case(f, avail, capacity)),
    ):
        (root / name).mkdir()
        cases.append(make(root / name))
    for case, result in zip(cases, run_batch(root, cases)):
        check(case, result)
    assert not list(root.rglob("pwned")), "a pickle ran code"
