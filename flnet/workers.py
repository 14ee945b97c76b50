"""Where a sweep's points run: worker processes on this machine, Ray tasks
(`flnet.ray_cluster`) or Slurm array tasks (`flnet.slurm`).

Local workers are plain child interpreters (``python -m flnet.workers``) fed one point at a time
over a pipe, each with one torch thread. They never import the caller's ``__main__`` (unlike
multiprocessing's spawn), so a script that calls ``flnet.sweep(workers=2)`` needs no
``if __name__ == "__main__":`` guard. A worker that dies (killed for memory, ``os._exit``)
closes its pipe: its point is reported as failed with how the worker ended, and a fresh worker
takes the next point.
"""

from __future__ import annotations

import os
import pickle
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import wait
from pathlib import Path
from typing import IO, Any

from flnet.cluster import ClusterOptions
from flnet.errors import FlnetError
from flnet.tasks import Follow, run_point

HEADER = struct.Struct("!Q")
STOP_GRACE_S = 5.0  # after Ctrl-C, how long workers get to exit before they are killed


# ---------------------------------------------------------------- the pipe protocol


def _send(stream: IO[bytes], message: Any) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def _read_exactly(stream: IO[bytes], n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(stream: IO[bytes]) -> Any:
    """The next message, or None when the other side closed the pipe (or died mid-write)."""
    head = _read_exactly(stream, HEADER.size)
    if head is None:
        return None
    body = _read_exactly(stream, HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def serve() -> None:
    """A worker's life: read a point, run it, answer; exit when the pipe closes."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed goes to the log, never into the answers
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    import torch  # the worker process's: the sweep's own process never loads torch

    torch.set_num_threads(1)
    requests = sys.stdin.buffer
    try:
        while (message := _receive(requests)) is not None:
            key, data = message
            outcome, _ = run_point(data)
            _send(answers, (key, outcome))
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:  # the sweep is gone
        sys.exit(1)


# ---------------------------------------------------------------- local workers


def _how_it_ended(code: int | None) -> str:
    if code is None:
        return "worker stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"worker exited with status {code}"


class Worker:
    """One child interpreter running points one at a time."""

    def __init__(self, log: IO[bytes]) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flnet.workers"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            bufsize=0,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both are pipes
        self.requests, self.answers = self.proc.stdin, self.proc.stdout
        self.key: str | None = None

    def start(self, key: str, data: dict) -> None:
        self.key = key
        _send(self.requests, (key, data))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def close(self) -> None:
        try:
            self.requests.close()
        except OSError:
            pass


def run_local(
    tasks: list[tuple[str, Any]], workers: int, log: Path, follow: Follow | None = None
) -> Iterator[tuple]:
    """Yield (key, outcome) as points finish, `workers` at a time; `follow(key)`, called as
    each point finishes, gives tasks that may start now (queued after those waiting)."""
    todo = list(reversed(tasks))
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as log_file:
        pool = [Worker(log_file) for _ in range(min(workers, len(tasks)))]
        try:
            for w in pool:
                if todo:
                    w.start(*todo.pop())
            while any(w.key for w in pool):
                busy: dict[Any, Worker] = {w.answers: w for w in pool if w.key}
                for stream in wait(list(busy)):
                    w = busy[stream]
                    answer = _receive(w.answers)  # the stream that is ready
                    if answer is None:  # the worker died with its point
                        w.close()
                        code = w.proc.wait()
                        answer = (w.key, {"status": "failed", "error": _how_it_ended(code)})
                        pool[pool.index(w)] = w = Worker(log_file)
                    w.key = None
                    yield answer
                    if follow is not None:
                        todo[:0] = reversed(follow(answer[0]))
                    if todo:
                        w.start(*todo.pop())
                    while todo and len(pool) < workers:  # work enough for another worker
                        pool.append(Worker(log_file))
                        pool[-1].start(*todo.pop())
        finally:  # normal end, Ctrl-C or an error here: no worker outlives the sweep
            for w in pool:
                w.close()
                if w.key is not None:
                    w.stop()
            deadline = time.monotonic() + STOP_GRACE_S
            for w in pool:
                try:
                    w.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    w.proc.kill()
                    w.proc.wait()


def run_here(tasks: list[tuple[str, Any]], follow: Follow | None = None) -> Iterator[tuple]:
    """Every point in this process, one after the other (workers=0; for debugging)."""
    todo = list(tasks)
    while todo:
        key, data = todo.pop(0)
        outcome, _ = run_point(data)
        yield key, outcome
        if follow is not None:
            todo += follow(key)


def execute(
    tasks: list[tuple[str, Any]],
    *,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    log: Path,
    follow: Follow | None = None,
    cluster: ClusterOptions | None = None,
) -> Iterator[tuple]:
    """Run the tasks on the chosen backend; yield (key, outcome) as each finishes.
    `follow(key)`, called once each has finished, returns tasks that may start then (a
    trajectory run's replays). `cluster` gives each point's resources on Ray or Slurm."""
    if not tasks:
        return iter(())
    if backend == "ray":
        from flnet.ray_cluster import run_ray

        return run_ray(tasks, address, follow, cluster)
    if backend == "slurm":
        from flnet.slurm import run_slurm

        return run_slurm(tasks, log.parent, follow, cluster)
    if backend != "local":
        raise FlnetError(f"unknown sweep backend {backend!r}; allowed: local, ray, slurm")
    if workers < 0:
        raise FlnetError(f"workers must be >= 0 (got {workers})")
    return run_here(tasks, follow) if workers == 0 else run_local(tasks, workers, log, follow)


if __name__ == "__main__":
    serve()
