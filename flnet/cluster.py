"""What a sweep asks of a cluster for each point: CPUs, GPUs, retries, and Slurm's settings.

One object for both cluster backends (`flnet.ray_cluster`, `flnet.slurm`), passed through
`flnet.sweeps.run_sweep` unchanged; local workers ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

from flnet.errors import FlnetError


@dataclass(frozen=True)
class ClusterOptions:
    """`cpus_per_point` and `gpus_per_point` (fractions allowed: 0.5 lets two points share a
    GPU) are what Ray reserves for each point's task (``num_cpus``, ``num_gpus``) and what each
    Slurm array task asks for; a point's torch uses that many threads (at least one).
    `retries` is how often Ray starts a point again elsewhere when its worker or node dies.
    The Slurm fields: `partition`, `time_min` (each array task's limit), `points_per_task`
    (one array task runs that many points one after the other), `max_parallel` (array tasks at
    once; 0: no limit), `executor` ("slurm"; "local" and "debug" run the same path on this
    machine, for tests)."""

    cpus_per_point: float = 1.0
    gpus_per_point: float = 0.0
    retries: int = 3
    partition: str | None = None
    time_min: int = 60
    points_per_task: int = 1
    max_parallel: int = 0
    executor: str = "slurm"

    def check(self) -> ClusterOptions:
        if self.cpus_per_point <= 0:
            raise FlnetError(f"--cpus-per-point must be > 0 (got {self.cpus_per_point:g})")
        if self.gpus_per_point < 0:
            raise FlnetError(f"--gpus-per-point must be >= 0 (got {self.gpus_per_point:g})")
        if self.gpus_per_point > 1 and self.gpus_per_point != int(self.gpus_per_point):
            raise FlnetError(
                f"--gpus-per-point above 1 must be a whole number (got {self.gpus_per_point:g})"
            )
        if self.retries < 0:
            raise FlnetError(f"retries must be >= 0 (got {self.retries})")
        if self.points_per_task < 1:
            raise FlnetError(f"--points-per-task must be >= 1 (got {self.points_per_task})")
        if self.time_min < 1:
            raise FlnetError(f"--slurm-time must be >= 1 minute (got {self.time_min})")
        if self.executor not in ("slurm", "local", "debug"):
            raise FlnetError(f"unknown Slurm executor {self.executor!r}; allowed: slurm")
        return self

    @property
    def threads(self) -> int:
        """Torch threads for a point: its whole CPUs, at least one."""
        return max(1, int(self.cpus_per_point))
