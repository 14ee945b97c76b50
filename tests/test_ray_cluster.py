"""A sweep on a real two-node Ray cluster started on this machine: files only the driver has,
a node killed mid-sweep, and the gathered tables equal to a local sweep's bit for bit."""

import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from conftest import BASE

from flnet import shipping
from flnet.cluster import ClusterOptions
from flnet.scenario import merge
from flnet.sweeps import run_sweep

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "scenarios" / "traces"
GRID = {"seed": [0, 1, 2], "radio.tx_power_dbm": [10, 20]}  # 3 trajectories, 3 replays


def traced(folder: Path) -> dict:
    """BASE reading availability and capacity traces from `folder`, by relative paths."""
    for name in ("small_availability.csv", "small_capacity.csv"):
        shutil.copy(TRACES / name, folder / name)
    return merge(
        BASE,
        {
            "run": {"rounds": 2},
            "clients": {
                "availability": {"kind": "trace", "path": str(folder / "small_availability.csv")},
                "capacity_trace": {
                    "path": str(folder / "small_capacity.csv"),
                    "compute_power_w": 2.0,
                },
            },
        },
    )


def test_materialised_files_are_the_driver_bytes_under_new_names(tmp_path):
    driver = tmp_path / "driver"
    driver.mkdir()
    data = traced(driver)
    parcel = shipping.Parcel()
    manifest = parcel.manifest(data)
    assert len(manifest.files) == 2 and len(parcel.blobs) == 2
    node = tmp_path / "node"
    here = shipping.materialise(data, manifest, parcel.blobs.__getitem__, node)
    for section in ("availability", "capacity_trace"):
        theirs, ours = Path(data["clients"][section]["path"]), here["clients"][section]["path"]
        assert ours.startswith(str(node)) and Path(ours).read_bytes() == theirs.read_bytes()
    assert here["clients"]["availability"]["kind"] == "trace"  # only the paths change
    # a second point reading the same files ships nothing more and writes nothing more
    assert parcel.manifest(data) == manifest and len(parcel.blobs) == 2
    shipping.materialise(data, manifest, lambda d: pytest.fail("fetched twice"), node)


def test_a_cluster_option_out_of_range_is_refused():
    from flnet.errors import FlnetError

    with pytest.raises(FlnetError, match="gpus-per-point"):
        ClusterOptions(gpus_per_point=1.5).check()
    assert ClusterOptions(cpus_per_point=2.5).threads == 2


def test_two_node_ray_cluster_sweep_survives_a_lost_node_and_equals_a_local_sweep(
    tmp_path, monkeypatch
):
    ray = pytest.importorskip("ray")
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
            if done == 1 and not lost:  # a point finished: the other node is mid-point
                shutil.rmtree(driver)  # from now on only the shipped copies exist
                cluster.remove_node(nodes[0], allow_graceful=False)
                lost.append(nodes[0])

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


def _spec():
    from flnet.sweeps import spec_from

    return spec_from(GRID)
