"""A corpus of broken inputs: scenario files and data files in every format flnet reads (IDX
plain and .gz, CIFAR-10/100 batches, npz features, YAML), each made here in a temporary folder.

`build(folder)` returns the cases; each is the argument list of `flnet validate`, the text its
one error message must hold (the field or the file), and how many lines that message has (a
scenario error: a header and one line per offending field; anything else: one line).
"""

from __future__ import annotations

import gzip
import os
import pickle
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np


class Case(NamedTuple):
    name: str
    argv: list[str]
    expect: str  # a piece of the message: what is wrong, or the field
    lines: int = 1
    names: str = ""  # the file (or field) the message must name too
    absent: str = ""  # text of the input file that the message must not echo


BASE = (
    "seed: 0\ndevice: cpu\nalgorithm: {name: fedavg, cohort: {clients_per_round: 2}, "
    "local: {steps: 1, batch_size: 2}}\nclients: {count: 2}\nrun: {rounds: 1}\n"
)


def _scenario(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _idx_bytes(a: np.ndarray, type_code: int = 0x08) -> bytes:
    dtype = {0x08: ">u1", 0x0B: ">i2"}[type_code]
    return (
        bytes([0, 0, type_code, a.ndim])
        + struct.pack(f">{a.ndim}i", *a.shape)
        + a.astype(dtype).tobytes()
    )


IDX = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _idx_set(root: Path, gz: bool) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    arrays = (
        rng.integers(0, 256, (12, 28, 28)),
        np.arange(12) % 10,
        rng.integers(0, 256, (5, 28, 28)),
        np.arange(5) % 10,
    )
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True)
    paths = {}
    for name, a in zip(IDX, arrays):
        raw = _idx_bytes(a)
        path = folder / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(raw) if gz else raw)
        paths[name] = path
    return paths


def _cifar_sets(root: Path, which: str) -> dict[str, Path]:
    rng = np.random.default_rng(1)
    if which == "cifar10":
        folder, names, key, k = (
            root / "cifar-10-batches-py",
            [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"],
            b"labels",
            10,
        )
    else:
        folder, names, key, k = root / "cifar-100-python", ["train", "test"], b"fine_labels", 100
    folder.mkdir(parents=True)
    paths = {}
    for name in names:
        batch = {
            b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8),
            key: [int(v) for v in rng.integers(0, k, 4)],
        }
        paths[name] = folder / name
        paths[name].write_bytes(pickle.dumps(batch, protocol=2))
    return paths


def _pickle(path: Path, obj) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))


def _data_case(folder: Path, name: str, dataset: str, expect: str, broken: Path) -> Case:
    text = BASE + f"data: {{dataset: {dataset}, root: {folder}}}\n"
    if dataset.startswith("cifar"):
        text += "model: {kind: logistic}\n"
    return Case(name, [str(_scenario(folder, "scenario", text))], expect, 1, broken.name)


def idx_cases(tmp: Path, gz: bool) -> list[Case]:
    tag = "idx-gz" if gz else "idx"
    breaks = {  # file to replace -> bytes (before gzip when gz) and the text the error holds
        "bad-magic": ("train-images-idx3-ubyte", b"\x12\x34\x56\x78" + bytes(20), "bad magic"),
        "truncated": (
            "t10k-images-idx3-ubyte",
            _idx_bytes(np.zeros((5, 28, 28)))[:-7],
            "truncated",
        ),
        "label-count": (
            "train-labels-idx1-ubyte",
            _idx_bytes(np.arange(11) % 10),
            "11 labels for the 12 images",
        ),
        "label-range": (
            "t10k-labels-idx1-ubyte",
            _idx_bytes(np.array([0, 1, 2, 10, 3])),
            "label 10 is outside 0..9",
        ),
        "images-2d": (
            "train-images-idx3-ubyte",
            _idx_bytes(np.zeros((12, 784))),
            "images must be [N, height, width]",
        ),
        "labels-2d": (
            "train-labels-idx1-ubyte",
            _idx_bytes(np.zeros((12, 1))),
            "labels must be [N]",
        ),
        "empty": ("t10k-labels-idx1-ubyte", b"", "bad magic"),
        "huge-header": (
            "train-images-idx3-ubyte",
            bytes([0, 0, 8, 3]) + struct.pack(">3i", 2**31 - 1, 2**20, 2**20),
            "more than any data set",
        ),
        "too-long": (
            "t10k-labels-idx1-ubyte",
            _idx_bytes(np.arange(5)) + b"\0\0",
            "longer than its header",
        ),
        "signed-negative-label": (
            "train-labels-idx1-ubyte",
            _idx_bytes(np.array([0, 1, -1] + [2] * 9), 0x0B),
            "label -1 is outside",
        ),
    }
    if gz:
        breaks["not-gzip"] = ("train-labels-idx1-ubyte", None, "not a readable gzip file")
        breaks["gzip-cut"] = ("t10k-images-idx3-ubyte", "cut", "not a readable gzip file")
    cases = []
    for name, (file, raw, expect) in breaks.items():
        folder = tmp / f"{tag}-{name}"
        paths = _idx_set(folder, gz)
        path = paths[file]
        if raw is None:  # a .gz name over plain bytes
            path.write_bytes(_idx_bytes(np.arange(12) % 10))
        elif raw == "cut":
            path.write_bytes(path.read_bytes()[:40])
        else:
            path.write_bytes(gzip.compress(raw) if gz else raw)
        cases.append(_data_case(folder, f"{tag}-{name}", "mnist", expect, path))
    return cases


def cifar_cases(tmp: Path, which: str) -> list[Case]:
    key = b"labels" if which == "cifar10" else b"fine_labels"
    k = 10 if which == "cifar10" else 100
    train = "data_batch_2" if which == "cifar10" else "train"
    rows = np.zeros((4, 3072), dtype=np.uint8)
    breaks = {
        "no-data": ({key: [0, 1, 2, 3]}, "no 'data' entry"),
        "no-labels": (
            {b"data": rows, b"coarse_labels": [0, 1, 2, 3]},
            f"no '{key.decode()}' entry",
        ),
        "row-width": (
            {b"data": np.zeros((4, 3071), np.uint8), key: [0, 1, 2, 3]},
            "'data' must be [N, 3072]",
        ),
        "label-range": ({b"data": rows, key: [0, 1, k, 3]}, f"label {k} is outside"),
        "negative-label": ({b"data": rows, key: [0, -1, 2, 3]}, "label -1 is outside"),
        "label-count": ({b"data": rows, key: [0, 1, 2]}, "must be 4 integer labels"),
        "data-1d": ({b"data": np.zeros(3072, np.uint8), key: [0]}, "'data' must be [N, 3072]"),
        "data-not-bytes": (
            {b"data": np.full((4, 3072), 300, np.int16), key: [0, 1, 2, 3]},
            "bytes 0..255",
        ),
        "a-list": ([1, 2, 3], "not a dict"),
        "not-a-pickle": (b"\x00garbage\xff" * 9, "is not a CIFAR python batch"),
        "forbidden-class": ("os.system", "refusing to load"),
        "truncated": ("cut", "is not a CIFAR python batch"),
    }
    cases = []
    for name, (obj, expect) in breaks.items():
        folder = tmp / f"{which}-{name}"
        path = _cifar_sets(folder, which)[train]
        if isinstance(obj, bytes):
            path.write_bytes(obj)
        elif obj == "os.system":
            path.write_bytes(b"cos\nsystem\n(S'true'\ntR.")
        elif obj == "cut":
            path.write_bytes(path.read_bytes()[:100])
        else:
            _pickle(path, obj)
        cases.append(_data_case(folder, f"{which}-{name}", which, expect, path))
    return cases


def npz_cases(tmp: Path) -> list[Case]:
    """Features for digits (1437 train / 360 test rows)."""
    good_tr, good_te = np.ones((1437, 3)), np.zeros((360, 3))
    nan_tr = good_tr.copy()
    nan_tr[7, 1] = np.nan
    inf_te = good_te.copy()
    inf_te[3, 0] = np.inf
    breaks = {
        "missing-file": (None, "feature file not found"),
        "no-x-test": ({"x_train": good_tr}, "has no x_test"),
        "no-arrays": ({"y": np.zeros(3)}, "has no x_train or x_test"),
        "rank-3": (
            {"x_train": np.ones((1437, 3, 1)), "x_test": good_te},
            "x_train must be [rows, features]",
        ),
        "rows": ({"x_train": np.ones((1000, 3)), "x_test": good_te}, "1000 / 360 feature rows"),
        "nan": ({"x_train": nan_tr, "x_test": good_te}, "x_train row 7 holds NaN"),
        "inf": ({"x_train": good_tr, "x_test": inf_te}, "x_test row 3 holds NaN or infinity"),
        "width": ({"x_train": good_tr, "x_test": np.zeros((360, 4))}, "3 features a row"),
        "strings": (
            {"x_train": np.array([["a"] * 3] * 1437), "x_test": good_te},
            "must hold numbers",
        ),
        "objects": (
            {"x_train": np.array([None] * 1437, dtype=object), "x_test": good_te},
            "cannot read features",
        ),
        "garbage": (b"PK\x03\x04 not really a zip", "cannot read features"),
        "npy": ("npy", "not an .npz archive"),
    }
    cases = []
    for name, (arrays, expect) in breaks.items():
        folder = tmp / f"npz-{name}"
        folder.mkdir()
        path = folder / "features.npz"
        if isinstance(arrays, dict):
            with open(path, "wb") as f:
                np.savez(f, **arrays)
        elif isinstance(arrays, bytes):
            path.write_bytes(arrays)
        elif arrays == "npy":
            with open(path, "wb") as f:
                np.save(f, good_tr)
        text = BASE + (
            f"data: {{features: {{kind: npz, path: {path}}}}}\nmodel: {{kind: logistic}}\n"
        )
        cases.append(
            Case(
                f"npz-{name}",
                [str(_scenario(folder, "scenario", text))],
                expect,
                1,
                "data.features.path",
            )
        )
    return cases


BOMB = "".join(
    f"{c}: &{c} [" + ",".join([f"*{p}"] * 9 if p else ['"lol"'] * 9) + "]\n"
    for p, c in zip([None, *"abcdefgh"], "abcdefghi")
)

YAML = {  # name -> (scenario text (BASE is prepended unless it starts with '!'), expect, lines)
    "alias-bomb": ("!" + BOMB + "name: *i\nalgorithm: {name: fedavg}\n", "YAML aliases", 1),
    "alias-self": ("!name: &a [*a]\nalgorithm: {name: fedavg}\n", "contain itself", 1),
    "syntax": ("!algorithm: {name: fedavg\n", "not valid YAML", 1),
    "top-level-list": ("!- 1\n- 2\n", "top level must be a mapping", 1),
    "deep-nesting": ("!name: " + "[" * 20000 + "]" * 20000 + "\n", "YAML", 1),
    "python-tag": (
        "!name: !!python/object/apply:os.system [true]\nalgorithm: {name: fedavg}\n",
        "not valid YAML",
        1,
    ),
    "name-dotdot": ('name: "x/../.."\n', "name: holds a path separator", 2),
    "name-empty": ('name: ""\n', "name: is empty", 2),
    "name-parent": ('name: ".."\n', "name: is '.' or '..'", 2),
    "name-dot": ('name: "."\n', "name: is '.' or '..'", 2),
    "name-nul": ('name: "a\\0b"\n', "name: holds a NUL", 2),
    "name-long": ('name: "' + "n" * 300 + '"\n', "name: is longer than 255 bytes", 2),
    "name-backslash": ('name: "a\\\\b"\n', "name: holds a path separator", 2),
    "deadline-1ns": (
        "algorithm: {name: fedavg, cohort: {deadline_s: 1.0e-9}}\n",
        "algorithm.cohort.deadline_s",
        1,
    ),
    "shards-12-classes": (
        "data: {partition: {kind: shards, classes_per_client: 12}}\n",
        "data.partition.classes_per_client",
        1,
    ),
    "3000-clients": ("clients: {count: 3000}\nalgorithm: {name: fedavg}\n", "data.share_rows", 1),
    "bandwidth-1e-300": (
        "radio: {uplink: {bandwidth_hz: 1.0e-300}}\n",
        "radio.uplink.bandwidth_hz",
        2,
    ),
    "bandwidth-half-hz": (
        "radio: {downlink: {bandwidth_hz: 0.5}}\n",
        "radio.downlink.bandwidth_hz",
        2,
    ),
    "bandwidth-inf": ("radio: {uplink: {bandwidth_hz: .inf}}\n", "radio.uplink.bandwidth_hz", 2),
    "distance-1e-9": ("radio: {distance_m: 1.0e-9}\n", "radio.distance_m", 2),
    "distance-uniform-0": (
        "radio: {distance_m: {kind: uniform, low: 0, high: 100}}\n",
        "radio.distance_m",
        2,
    ),
    "distance-per-client": (
        "radio: {distance_m: {kind: per_client, values: [0.5, 100]}}\n",
        "radio.distance_m",
        2,
    ),
    "distance-lognormal-tail": (
        "radio: {distance_m: {kind: lognormal, median: 50, sigma: 2}}\n",
        "radio.distance_m",
        2,
    ),
    "gain-above-one": ("radio: {path_loss_at_1km_db: -400}\n", "radio.path_loss_at_1km_db", 2),
    "nan-cpu": ("clients: {cpu_hz: .nan}\n", "clients.cpu_hz", 2),
    "nan-per-client": (
        "clients: {count: 2, cpu_hz: {kind: per_client, values: [1.0e9, .nan]}}\n",
        "clients.cpu_hz",
        2,
    ),
    "nan-lognormal": (
        "clients: {kappa: {kind: lognormal, median: .nan, sigma: 1}}\n",
        "clients.kappa",
        2,
    ),
    "nan-tx-power": (
        "radio: {tx_power_dbm: {kind: normal, mean: .nan, std: 1}}\n",
        "radio.tx_power_dbm",
        2,
    ),
    "bool-per-client": (
        "clients: {count: 2, kappa: {kind: per_client, values: [1.0e-28, true]}}\n",
        "clients.kappa",
        2,
    ),
    "bool-choice": (
        "clients: {flops_per_cycle: {kind: choice, values: [4, false]}}\n",
        "clients.flops_per_cycle",
        2,
    ),
    "no-signal": ("radio: {noise_psd_dbm_hz: 1.0e+182}\n", "radio: client 0's uplink", 1),
    "unknown-field": ("colour: blue\n", "colour: unknown field", 2),
    "two-bad-fields": ("clients: {count: 0}\nrun: {rounds: 0}\n", "clients.count", 3),
    "missing-algorithm": ("!name: x\n", "algorithm: this field is required", 2),
    "lr-with-sps": (
        "algorithm: {name: fedavg, local: {lr: 0.1, optimizer: {name: sps}}}\n",
        "algorithm.local.lr",
        2,
    ),
    "cohort-too-big": (
        "algorithm: {name: fedavg, cohort: {clients_per_round: 5}}\n",
        "algorithm.cohort.clients_per_round",
        2,
    ),
    "extends-missing": (
        "!extends: nothere.yaml\nalgorithm: {name: fedavg}\n",
        "scenario file not found",
        1,
    ),
    "negative-kappa": ("clients: {kappa: -1.0e-28}\n", "clients.kappa", 2),
}


def yaml_cases(tmp: Path) -> list[Case]:
    folder = tmp / "yaml"
    folder.mkdir()
    cases = []
    for name, (text, expect, lines) in YAML.items():
        text = text[1:] if text.startswith("!") else BASE + text
        cases.append(Case(f"yaml-{name}", [str(_scenario(folder, name, text))], expect, lines))
    big = folder / "too-big.yaml"
    with open(big, "w") as f:
        f.write(BASE + "# " + "x" * (17 * 2**20) + "\n")
    cases.append(Case("yaml-too-big", [str(big)], "at most 16 MiB"))
    not_utf8 = folder / "latin1.yaml"
    not_utf8.write_bytes(BASE.encode() + "name: caf\xe9\n".encode("latin-1"))
    cases.append(Case("yaml-not-utf8", [str(not_utf8)], "not UTF-8"))
    cycle_a, cycle_b = folder / "cycle_a.yaml", folder / "cycle_b.yaml"
    cycle_a.write_text("extends: cycle_b.yaml\n")
    cycle_b.write_text("extends: cycle_a.yaml\n")
    cases.append(Case("yaml-extends-cycle", [str(cycle_a)], "extends: extends forms a cycle"))
    ok = _scenario(folder, "ok", BASE)
    cases.append(
        Case(
            "yaml-set-bomb",
            [str(ok), "--set", "name=" + "[&a [1,1,1,1,1,1,1,1], " + ", ".join(["*a"] * 2) + "]"],
            "name:",
            2,
        )
    )
    return cases


SHADOW_SECRET = "$6$saltsalt$SECRETHASHdoNotEcho"
# a file shaped like /etc/shadow (made here: the real one is never read)
SHADOW = f"root:{SHADOW_SECRET}:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"
TRACE_HEADER = "client,online_from_s,online_until_s\n"
CAPACITY_HEADER = "client,compute_s_per_sample,up_rate_bps,down_rate_bps\n"


def unsafe_cases(tmp: Path) -> list[Case]:
    """Files that are not what they claim: devices, a FIFO, a folder, another kind of file
    (read until memory runs out, blocked on forever, or echoed before); trace CSV cells that
    csv or int64 cannot hold."""
    folder = tmp / "unsafe"
    folder.mkdir()
    fifo = folder / "fifo"
    os.mkfifo(fifo)
    shadow = folder / "shadow"
    shadow.write_text(SHADOW)
    cases = [
        Case("yaml-dev-zero", ["/dev/zero"], "/dev/zero is a character device"),
        Case("yaml-a-folder", [str(folder)], "is a directory", names=str(folder)),
        Case("yaml-a-fifo", [str(fifo)], "is a named pipe (FIFO)"),
        Case("yaml-shadow", [str(shadow)], "is not a scenario file", absent=SHADOW_SECRET),
    ]
    mixed = _scenario(folder, "mixed", BASE + SHADOW)  # scenario fields and a password line
    cases.append(Case("yaml-shadow-lines", [str(mixed)], "not a scenario", absent=SHADOW_SECRET))
    for name, target, expect in (
        ("urandom", "/dev/urandom", "/dev/urandom is a character device"),
        ("fifo", str(fifo), "is a named pipe (FIFO)"),
        ("folder", str(folder), "is a directory"),
        ("shadow", str(shadow), "is not a scenario file"),
    ):
        path = _scenario(folder, f"extends-{name}", f"extends: {target}\n" + BASE)
        cases.append(Case(f"yaml-extends-{name}", [str(path)], expect, absent=SHADOW_SECRET))
    traces = {
        "dev-zero": ("/dev/zero", "/dev/zero is a character device"),
        "fifo": (str(fifo), "is a named pipe (FIFO)"),
        "folder": (str(folder), "is a directory"),
        "shadow": (str(shadow), "header has missing column(s)"),
        "long-field": (TRACE_HEADER + "0,0,1\n1,0," + "9" * 140_000 + "\n", "line 3: field larger"),
        "huge-id": (TRACE_HEADER + "0,0,1\n" + "1" + "0" * 23 + ",0,1\n", "line 3: client id"),
        "digits": (TRACE_HEADER + "1" * 5000 + ",0,1\n", "line 2: client must be an integer"),
        "unclosed-quote": (TRACE_HEADER + '0,"0,1\n1,0,1\n2,0,1\n', "line 2: a quote opened"),
        "last-quote": (TRACE_HEADER + '0,0,1\n1,"0,1\n', "line 3: a quote opened"),
    }
    for name, (source, expect) in traces.items():
        if "\n" in source:
            trace = folder / f"{name}.csv"
            trace.write_text(source)
            source = str(trace)
        text = f"clients: {{count: 2, availability: {{kind: trace, path: '{source}'}}}}\n"
        path = _scenario(folder, f"trace-{name}", BASE.replace("clients: {count: 2}\n", text))
        cases.append(Case(f"yaml-trace-{name}", [str(path)], expect, absent=SHADOW_SECRET))
    nul = _scenario(folder, "extends-nul", 'extends: "a\\0b"\n' + BASE)
    cases.append(Case("yaml-extends-nul", [str(nul)], "extends: must be a path"))
    text = 'clients: {count: 2, availability: {kind: trace, path: "a\\0b"}}\n'
    nul = _scenario(folder, "trace-nul", BASE.replace("clients: {count: 2}\n", text))
    cases.append(Case("yaml-trace-nul", [str(nul)], "path a\\x00b holds a NUL character"))
    capacity = folder / "capacity-huge-id.csv"
    capacity.write_text(CAPACITY_HEADER + str(2**70) + ",1,1,1\n")
    text = f"clients: {{count: 2, capacity_trace: {{path: '{capacity}', compute_power_w: 1.0}}}}\n"
    path = _scenario(folder, "capacity-huge-id", BASE.replace("clients: {count: 2}\n", text))
    cases.append(Case("yaml-capacity-huge-id", [str(path)], "line 2: client id"))
    return cases


def build(tmp: Path) -> list[Case]:
    return [
        *yaml_cases(tmp),
        *unsafe_cases(tmp),
        *idx_cases(tmp, gz=False),
        *idx_cases(tmp, gz=True),
        *cifar_cases(tmp, "cifar10"),
        *cifar_cases(tmp, "cifar100"),
        *npz_cases(tmp),
    ]
