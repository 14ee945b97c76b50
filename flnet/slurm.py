"""A sweep's points as Slurm job arrays, through submitit: no Ray, no server to keep alive.

- **What is submitted**: the points to run, in chunks of `ClusterOptions.points_per_task`;
  one array task per chunk runs its points one after the other, each asking for
  `cpus_per_point` CPUs, `gpus_per_point` GPUs (rounded up: Slurm gives whole GPUs),
  `time_min` minutes, on `partition`. Replays of a trajectory run (`flnet.reuse`) go in a
  further array once their trajectory's task has ended.
- **Where results go**: each task writes its points' folders into the sweep folder itself, as
  a local worker does: on a Slurm cluster the sweep folder, the scenario's files and flnet must
  be on the filesystem the nodes share (they are on any cluster's home or scratch). submitit
  keeps its scripts and each task's log in ``<sweep folder>/slurm/``.
- **The driver** (``flnet sweep ... --slurm``) submits, waits, and gathers the tables as a
  local sweep does; run it where it can stay (tmux on the login node, or a small job). Ctrl-C
  cancels the tasks still queued or running; ``flnet sweep ... --status`` shows, from any
  shell, which points have finished; the same command started again runs only the points not
  finished (a point whose task was cut by its time limit continues from its checkpoint).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flnet.cluster import ClusterOptions
from flnet.errors import FlnetError
from flnet.tasks import Follow, run_point

POLL_S = {"slurm": 10.0, "local": 0.5, "debug": 0.0}  # how often the driver asks after tasks


def run_chunk(chunk: list[tuple[str, Any]], threads: int) -> list[tuple[str, dict]]:
    """An array task: run its points in turn, each writing its own folder."""
    import torch  # the task's: the sweep's own process never loads torch

    torch.set_num_threads(threads)
    return [(key, run_point(data)[0]) for key, data in chunk]


def executor_for(folder: Path, options: ClusterOptions) -> Any:
    try:
        import submitit  # optional: only for the Slurm backend
    except ImportError:
        raise FlnetError(
            "the Slurm backend needs the submitit package: pip install 'flnet[cluster]'"
        ) from None
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster=options.executor)
    except RuntimeError as e:  # submitit's words when this machine has no Slurm
        raise FlnetError(
            f"cannot submit to Slurm from here ({e}): run flnet sweep --slurm on a machine "
            "of the cluster (its login node)"
        ) from None
    parameters: dict[str, Any] = {
        "name": "flnet-sweep",
        "timeout_min": options.time_min,
        "cpus_per_task": math.ceil(options.cpus_per_point),
        "tasks_per_node": 1,
        "nodes": 1,
    }
    if options.gpus_per_point:
        parameters["gpus_per_node"] = math.ceil(options.gpus_per_point)
    if options.partition:
        parameters["slurm_partition"] = options.partition
    if options.max_parallel:
        parameters["slurm_array_parallelism"] = options.max_parallel
    executor.update_parameters(**parameters)
    return executor


def chunks(tasks: list[tuple[str, Any]], size: int) -> list[list[tuple[str, Any]]]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def _ended(job: Any, chunk: list[tuple[str, Any]]) -> list[tuple[str, dict]]:
    """The chunk's outcomes; a task that died (time limit, node failure, cancelled) fails
    the points it had not answered (a point it wrote counts from its folder)."""
    try:
        return list(job.result())
    except Exception as e:  # submitit's errors for a task that did not return
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        error = f"Slurm task {job.job_id} ended without answering: {type(e).__name__}: {first}"
        return [(key, {"status": "failed", "error": error}) for key, _ in chunk]


def run_slurm(
    tasks: list[tuple[str, Any]],
    out: Path,
    follow: Follow | None = None,
    options: ClusterOptions | None = None,
) -> Iterator[tuple]:
    """Yield (key, outcome) as array tasks end; `follow(key)`'s tasks go in a further array."""
    options = (options or ClusterOptions()).check()
    executor = executor_for(out / "slurm", options)
    pending: list[tuple[Any, list[tuple[str, Any]]]] = []

    def submit(more: list[tuple[str, Any]]) -> None:
        parts = chunks(more, options.points_per_task)
        if parts:
            jobs = executor.map_array(run_chunk, parts, [options.threads] * len(parts))
            pending.extend(zip(jobs, parts))

    try:
        submit(tasks)
        while pending:
            done = [(job, chunk) for job, chunk in pending if job.done()]
            if not done:
                time.sleep(POLL_S[options.executor])
                continue
            for job, chunk in done:
                pending.remove((job, chunk))
                more: list[tuple[str, Any]] = []
                for key, outcome in _ended(job, chunk):
                    yield key, outcome
                    if follow is not None:
                        more += follow(key)
                submit(more)
    finally:  # Ctrl-C or an error here: no task outlives the sweep that waits for it
        for job, _ in pending:
            with contextlib.suppress(Exception):  # a task that ended has nothing to cancel
                job.cancel(check=False)
