"""Ctrl-C and SIGTERM during a run: stop at the next safe point, keeping a checkpoint.

The signal handler only sets a flag and asks the World to stop (`World.request_stop`, safe in a
handler): at the next published step (a pattern's safe point: for `round_trip` the end of a
round) every observer sees the stop reason "interrupted", so the Recorder adds no evaluation
(a resumed run gives the same records) and the checkpointer keeps that step; the run then ends
like any other stop, with its records, ledger and summary written. `StopOnSignal` is the
observer that holds the flag: it learns the World at `on_start`, so a signal that came while the
run was being built stops it at its first step. A second signal stops at once: it raises
KeyboardInterrupt wherever the run is, and the runner writes the results so far and keeps the
last checkpoint (`flnet.runner.Interrupted` says which). So does the first where no safe point
will come: a stream with nobody online and nothing under way, or whose works go on failing
with no server update for a second (`flnet.sim.world.StoppedAtOnce`). Signals after that are
ignored while those files are written (SIGKILL still ends the process).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from flnet.sim.world import INTERRUPTED as REASON


class StopOnSignal:
    """Observer that turns the first SIGINT/SIGTERM into a stop at the next progress point."""

    def __init__(self) -> None:
        self.signal: str | None = None  # name of the first signal received
        self.count = 0
        self.world: Any = None
        self.ended = False  # the simulation is over: the run is writing its results

    def on_start(self, world: Any) -> None:
        self.world = world
        if self.signal is not None:
            world.request_stop(REASON)

    def on_progress(self, world: Any, progress: Any, stopping: str | None) -> str | None:
        return None  # the stop was requested from the handler: every observer sees it

    def on_end(self, world: Any, reason: str | None) -> None:
        self.ended = True

    def handle(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.signal = signal.Signals(signum).name
            if self.world is not None:
                self.world.request_stop(REASON)
            _say(
                f"{self.signal}: "
                + (
                    "the run has ended; writing its results and final checkpoint"
                    if self.ended
                    else "stopping at the end of this round (a stream's next server update) to "
                    "keep a checkpoint, or at once where none will come"
                )
                + " (press Ctrl-C again to stop at once, keeping the last checkpoint)"
            )
            return
        if self.count == 2:
            raise KeyboardInterrupt
        _say("still writing the results so far; they will be done in a moment")

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopOnSignal]:
        """Handle SIGINT and SIGTERM inside the block (only the main thread can), restoring
        the previous handlers after it."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        old = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)


def _say(text: str) -> None:
    """Straight to stderr's descriptor: safe inside a signal handler, whatever else (a progress
    bar) is writing."""
    with contextlib.suppress(OSError):
        os.write(2, f"\n{text}\n".encode())
