"""Work that must end at a known instant (a client's online session ends mid-work), with one
SimPy timer for the earliest such instant rather than one per member.

A member that finishes first cancels its entry, so what is held is O(members under way), never
O(members ever started): with hour-long sessions and rounds of milliseconds, a timer per member
would keep every round's members alive in SimPy's queue for an hour of simulated time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import simpy

from flnet.sim.channel import timeout_at


class ScheduledStops:
    """Calls `stop(outcome)` at each registered instant unless cancelled first."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._heap: list[tuple[float, int]] = []  # (t_s, token), cancelled ones dropped lazily
        self._live: dict[int, tuple[Callable[[str], None], str]] = {}
        self._tokens = 0
        self._armed_s = math.inf  # the instant the current timer fires at

    def __len__(self) -> int:
        return len(self._live)

    def add(self, t_s: float, stop: Callable[[str], None], outcome: str) -> int:
        """Register; the token (0 when `t_s` is inf: nothing to do) cancels it."""
        if not math.isfinite(t_s):
            return 0
        self._tokens += 1
        heapq.heappush(self._heap, (t_s, self._tokens))
        self._live[self._tokens] = (stop, outcome)
        if t_s < self._armed_s:
            self._arm(t_s)
        return self._tokens

    def cancel(self, token: int) -> None:
        if self._live.pop(token, None) is not None and len(self._heap) > 2 * len(self._live) + 64:
            self._heap = [entry for entry in self._heap if entry[1] in self._live]
            heapq.heapify(self._heap)

    def _arm(self, t_s: float) -> None:
        self._armed_s = t_s
        timeout_at(self.env, max(t_s, self.env.now)).callbacks.append(self._fire)

    def _fire(self, _event: simpy.Event) -> None:
        if self.env.now < self._armed_s:  # superseded by an earlier instant, already handled
            return
        self._armed_s = math.inf
        while self._heap and self._heap[0][0] <= self.env.now:
            entry = self._live.pop(heapq.heappop(self._heap)[1], None)
            if entry is not None:
                entry[0](entry[1])
        if self._heap:
            self._arm(self._heap[0][0])
