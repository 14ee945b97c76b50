"""A real `flnet run` process that waits at a gate at the end of a chosen round (an observer
after the runner's own, so that round's checkpoint, if due, is written), so a test can act on it
at a known point (send signals, start a second run) without racing the simulation."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import sys, time, pathlib
import flnet.runner as runner

gate_round, gate = int(sys.argv[1]), pathlib.Path(sys.argv[2])


class Gate:
    def on_start(self, world):
        pass

    def on_progress(self, world, progress, stopping):
        if progress.step == gate_round and not gate.exists():
            print("at the gate", file=sys.stderr, flush=True)
            while not gate.exists():
                time.sleep(0.01)
        return None

    def on_end(self, world, reason):
        pass


real = runner.run
runner.run = lambda *a, observers=(), **k: real(*a, observers=(*observers, Gate()), **k)
from flnet.cli import main
sys.exit(main(sys.argv[3:]))
"""


class Child:
    """A process whose stderr is read line by line as it comes."""

    def __init__(self, argv, gate: Path | None = None, **popen):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.gate = gate
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **popen
        )
        self.lines: list[str] = []
        self.out: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()
        threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True).start()

    def wait_for(self, predicate, timeout_s: float = 240) -> str:
        """The first stderr line for which predicate (or `in`, for a string) holds."""
        test = predicate if callable(predicate) else (lambda line: predicate in line)
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for line in list(self.lines):
                if test(line):
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the reader catch the last lines
                for line in list(self.lines):
                    if test(line):
                        return line
                raise AssertionError(f"the process ended first:\n{self.text()}")
            time.sleep(0.005)
        self.proc.kill()
        raise AssertionError(f"timed out waiting:\n{self.text()}")

    def open_gate(self) -> None:
        self.gate.write_text("go")

    def finish(self, timeout_s: float = 300) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        time.sleep(0.05)
        return rc

    def text(self) -> str:
        return "".join(self.lines) + "".join(self.out)

    def message(self) -> str:
        """stderr with the console's line wrapping undone."""
        return " ".join("".join(self.lines).split())


def gated_run(tmp_path: Path, round: int, *args) -> Child:
    gate = tmp_path / f"gate-{round}"
    return Child([sys.executable, "-c", CHILD, str(round), str(gate), *map(str, args)], gate)


def flnet_run(*args, **popen) -> Child:
    return Child([sys.executable, "-m", "flnet.cli", "run", *map(str, args)], **popen)
