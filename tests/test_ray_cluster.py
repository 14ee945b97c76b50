"""A sweep on a real two-node Ray cluster started on this machine: files only the driver has,
a node killed mid-sweep, and the gathered tables equal to a local sweep's bit for bit."""

import importlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import BASE
from harness import ON_RAY

from flnet import shipping
from flnet.cluster import ClusterOptions
from flnet.scenario import merge
from flnet.sweeps import run_sweep

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "scenarios" / "traces"
GRID = {"seed": [0, 1, 2], "radio.tx_power_dbm": [10, 20]}  # 3 trajectories, 3 replays


def traced(folder: Path) -> dict:
    """BASE reading frozen features (an npz file: digits' 1437 training and 360 test rows)
    and availability and capacity traces from `folder`."""
    for name in ("small_availability.csv", "small_capacity.csv"):
        shutil.copy(TRACES / name, folder / name)
    rng = np.random.default_rng(0)
    np.savez(
        folder / "features.npz",
        x_train=rng.normal(size=(1437, 8)),
        x_test=rng.normal(size=(360, 8)),
    )
    return merge(
        BASE,
        {
            "run": {"rounds": 2},
            "data": {"features": {"kind": "npz", "path": str(folder / "features.npz")}},
            "clients": {
                "availability": {"kind": "trace", "path": str(folder / "small_availability.csv")},
                "capacity_trace": {
                    "path": str(folder / "small_capacity.csv"),
                    "compute_power_w": 2.0,
                },
            },
        },
    )


def need(module: str):
    """`module`; missing, the test skips, except under CI (whose test extra installs ray and
    submitit) where it fails: these tests must run there."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


def test_materialised_files_are_the_driver_bytes_under_new_names(tmp_path):
    driver = tmp_path / "driver"
    driver.mkdir()
    data = traced(driver)
    parcel = shipping.Parcel()
    manifest = parcel.manifest(data)
    assert len(manifest.files) == 3 and len(parcel.blobs) == 3
    node = tmp_path / "node"
    here = shipping.materialise(data, manifest, parcel.blobs.__getitem__, node)
    for section in (here["clients"]["availability"], here["clients"]["capacity_trace"]):
        ours = Path(section["path"])
        assert ours.is_relative_to(node) and ours.read_bytes() == (driver / ours.name).read_bytes()
    features = Path(here["data"]["features"]["path"])
    assert (
        features.is_relative_to(node)
        and features.read_bytes() == (driver / "features.npz").read_bytes()
    )
    assert here["clients"]["availability"]["kind"] == "trace"  # only the paths change
    # a second point reading the same files ships nothing more and writes nothing more
    assert parcel.manifest(data) == manifest and len(parcel.blobs) == 3
    shipping.materialise(data, manifest, lambda d: pytest.fail("fetched twice"), node)


def test_a_real_data_sets_folder_travels_with_its_layout(tmp_path):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for i, name in enumerate(("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")):
        (raw / name).write_bytes(bytes([i]) * 10)
    (tmp_path / "data" / "other.bin").write_bytes(b"not the data set's")
    data = {"data": {"dataset": "mnist", "root": str(tmp_path / "data")}}
    parcel = shipping.Parcel()
    manifest = parcel.manifest(data)
    assert len(manifest.files) == 2  # the data set's folder only
    here = shipping.materialise(data, manifest, parcel.blobs.__getitem__, tmp_path / "node")
    root = Path(here["data"]["root"])
    assert root.is_relative_to(tmp_path / "node")
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert (root / "MNIST" / "raw" / name).read_bytes() == (raw / name).read_bytes()
    digits = {"data": {"dataset": "digits", "root": str(tmp_path / "data")}}
    assert parcel.manifest(digits) == shipping.Manifest()  # embedded: nothing to send


def test_a_cluster_option_out_of_range_is_refused():
    from flnet.errors import FlnetError

    with pytest.raises(FlnetError, match="gpus-per-point"):
        ClusterOptions(gpus_per_point=1.5).check()
    assert ClusterOptions(cpus_per_point=2.5).threads == 2


@ON_RAY
def test_a_point_asking_more_than_any_node_has_is_refused_not_left_waiting():
    ray = need("ray")
    from flnet.errors import FlnetError
    from flnet.ray_cluster import check_fits

    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False)
    try:
        check_fits(ray, ClusterOptions(cpus_per_point=1))
        with pytest.raises(FlnetError, match=r"2 CPUs .*\(at most 1\)"):
            check_fits(ray, ClusterOptions(cpus_per_point=2))
        with pytest.raises(FlnetError, match="0.5 GPUs"):
            check_fits(ray, ClusterOptions(gpus_per_point=0.5))
    finally:
        ray.shutdown()


@ON_RAY
def test_two_node_ray_cluster_sweep_survives_a_lost_node_and_equals_a_local_sweep(
    tmp_path, monkeypatch
):
    ray = need("ray")
    from ray.cluster_utils import Cluster

    driver = tmp_path / "driver-only"
    driver.mkdir()
    base = traced(driver)
    local = run_sweep(base, _spec(), workers=2, out_dir=tmp_path / "local")
    assert set(local.table.status) == {"completed"}

    # the nodes get their own temporary folder (Ray's session and the shipped files)
    short = tempfile.mkdtemp(prefix="flr")
    monkeypatch.setenv("TMPDIR", short)
    monkeypatch.setenv("RAY_DEDUP_LOGS", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,  # the points run on the two worker nodes only
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 4},
        },
    )
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        lost: list = []

        def kill_a_node(done: int, total: int) -> None:
            if done == 1 and not lost:  # a point finished: kill a node that runs one now
                shutil.rmtree(driver)  # from now on only the shipped copies exist
                node = busy_node(nodes)
                cluster.remove_node(node, allow_graceful=False)
                lost.append(node)

        result = run_sweep(
            base,
            _spec(),
            out_dir=tmp_path / "ray",
            backend="ray",
            address=cluster.address,
            on_progress=kill_a_node,
            cluster=ClusterOptions(cpus_per_point=1, retries=3),
        )
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(short, ignore_errors=True)
    assert lost, "no node was killed"
    assert set(result.table.status) == {"completed"}, result.table[["status", "error"]]
    wall = ["wall_s"]
    pd.testing.assert_frame_equal(
        result.table.drop(columns=wall), local.table.drop(columns=wall), check_exact=True
    )
    pd.testing.assert_frame_equal(result.records, local.records, check_exact=True)
    here, there = str(tmp_path / "ray").encode(), str(tmp_path / "local").encode()
    for key in result.table.point:  # each point's folder as a local run writes it
        for name in ("scenario.yaml", "records.parquet", "ledger.parquet", "partition.parquet"):
            ours = (tmp_path / "ray" / key / name).read_bytes().replace(here, there)
            assert ours == (tmp_path / "local" / key / name).read_bytes(), (key, name)


def busy_node(nodes: list, wait_s: float = 300.0):
    """The node one of whose Ray workers runs a point now (its process title is the task's
    name, and the node's raylet is its ancestor); waits for one up to `wait_s` (a hang guard:
    other tests' processes may share the cores)."""
    raylets = {n.all_processes["raylet"][0].process.pid: n for n in nodes}
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            try:
                running = (proc / "cmdline").read_bytes().startswith(b"ray::ray_point")
            except OSError:
                continue
            pid = int(proc.name) if running else 0
            while pid > 1 and pid not in raylets:
                pid = _parent(pid)
            if pid in raylets:
                return raylets[pid]
        time.sleep(0.05)
    pytest.fail("no node was running a point")


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _spec():
    from flnet.sweeps import spec_from

    return spec_from(GRID)
