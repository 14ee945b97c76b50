"""A sweep's points as Ray tasks: on a local instance, or on a cluster that need not share disks.

- **Where**: ``address=None`` starts a local instance for the sweep (shut down after);
  ``"auto"`` or ``ray://host:10001`` or ``host:6379`` joins an existing cluster; a Ray already
  started in this process is used as it is.
- **Files**: the point's input files (data set folder, npz features, traces) go through the
  object store, once per distinct file, and each node writes them once into a folder of its
  own (`flnet.shipping`), so the workers need no shared filesystem. flnet itself must be
  installed on every node (the same version as the driver's).
- **Results**: a task runs its point without writing (its node's disk may be another machine's)
  and returns the result; the driver writes the point's folder, with its own paths in
  scenario.yaml, so the sweep folder is the one a local sweep writes.
- **Resources**: each task reserves `ClusterOptions.cpus_per_point` CPUs and
  `gpus_per_point` GPUs (``num_cpus``, ``num_gpus``).
- **Failures**: a task whose worker process or node dies is started again elsewhere, up to
  `ClusterOptions.retries` times (Ray's ``max_retries``), from the start of its point (its
  checkpoints were on the lost node). A point that still fails is a row with its error; the
  driver stopping loses only the points not yet written, and the same sweep command started
  again runs those alone.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flnet import reuse, shipping
from flnet.cluster import ClusterOptions
from flnet.errors import FlnetError

if TYPE_CHECKING:  # for annotations only: the runner loads torch
    from flnet.runner import Result
    from flnet.tasks import Follow


def ray_point(
    data: Any, manifest: shipping.Manifest, blobs: dict[str, Any], threads: int
) -> tuple[dict, Result | None]:
    """A Ray task: the point's files written on this node, then the point run without
    writing; the driver writes its results."""
    import ray
    import torch  # the Ray worker's: the sweep's own process never loads torch

    from flnet.tasks import run_point

    torch.set_num_threads(threads)
    here = shipping.materialise(
        reuse.scenario_data(data), manifest, lambda digest: ray.get(blobs[digest])
    )
    job = dataclasses.replace(data, data=here) if isinstance(data, reuse.Job) else here
    return run_point(job, write=False)


def write_on_driver(result: Result, data: dict) -> None:
    """The point's folder as a local run writes it: the results, and scenario.yaml naming the
    driver's files (not the copies the worker read). The point ran from its start (a worker
    cannot read a checkpoint on the driver's disk), so files an earlier, unfinished run of it
    left go first."""
    from flnet.runner import absolute_paths, write_inputs, write_results  # loads torch
    from flnet.scenario import Scenario

    out = Path(data["output"]["dir"])
    shutil.rmtree(out, ignore_errors=True)  # what an earlier, unfinished run of it left
    out.mkdir(parents=True)
    scenario = absolute_paths(Scenario.model_validate(data))
    result.output_dir = out
    result.scenario = scenario
    write_inputs(scenario, result.partition, out)
    write_results(result)


def _connect(ray: Any, address: str | None) -> bool:
    """Join or start Ray; whether this call started it (and must shut it down)."""
    if ray.is_initialized():
        return False
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except ConnectionError as e:
        raise FlnetError(
            f"cannot reach the Ray cluster at {address}: {e}. Start one with `ray start "
            "--head` (then --ray auto), or give its address (ray://host:10001)"
        ) from None
    return True


def check_fits(ray: Any, options: ClusterOptions) -> None:
    """Refuse resources no node of the cluster has: Ray would keep such tasks waiting for ever."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    for name, wanted in (("CPU", options.cpus_per_point), ("GPU", options.gpus_per_point)):
        most = max((n.get(name, 0.0) for n in nodes), default=0.0)
        if wanted > most:
            raise FlnetError(
                f"each point asks for {wanted:g} {name}s (--{name.lower()}s-per-point), but no "
                f"node of the Ray cluster has that many (at most {most:g})"
            )


def run_ray(
    tasks: list[tuple[str, Any]],
    address: str | None,
    follow: Follow | None = None,
    options: ClusterOptions | None = None,
) -> Iterator[tuple]:
    """Yield (key, outcome) as Ray tasks finish; `follow(key)` gives tasks to start then."""
    try:
        import ray  # optional, heavy: only for the Ray backend
    except ImportError:
        raise FlnetError("the Ray backend needs the ray package: pip install ray") from None
    options = (options or ClusterOptions()).check()
    own = _connect(ray, address)
    try:
        check_fits(ray, options)
    except FlnetError:
        if own:
            ray.shutdown()
        raise
    remote = ray.remote(
        num_cpus=options.cpus_per_point,
        num_gpus=options.gpus_per_point,
        max_retries=options.retries,
        retry_exceptions=False,
    )(ray_point)
    parcel = shipping.Parcel(put=ray.put)
    keys: dict[Any, tuple[str, Any]] = {}
    pending: list[Any] = []

    def submit(more: list[tuple[str, Any]]) -> None:
        for key, data in more:
            manifest = parcel.manifest(reuse.scenario_data(data))
            blobs = {digest: parcel.blobs[digest] for _, digest in manifest.files}
            ref = remote.remote(data, manifest, blobs, options.threads)
            keys[ref] = (key, data)
            pending.append(ref)

    try:
        submit(tasks)
        while pending:
            ready, pending[:] = ray.wait(pending, num_returns=1)
            key, data = keys.pop(ready[0])
            try:
                outcome, result = ray.get(ready[0])
            except ray.exceptions.RayError as e:
                first = str(e).splitlines()[0] if str(e) else ""
                outcome, result = (
                    {"status": "failed", "error": f"Ray task failed: {type(e).__name__}: {first}"},
                    None,
                )
            if result is not None:
                write_on_driver(result, reuse.scenario_data(data))
            yield key, outcome
            if follow is not None:
                submit(follow(key))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if own:
            ray.shutdown()
