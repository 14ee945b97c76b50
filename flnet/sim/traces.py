"""Device traces: when each client is online (availability) and how fast it is (capacity).

flnet's own trace formats are plain CSV (UTF-8; a leading byte-order mark, as spreadsheets
write, is skipped) with a header row; lines that start with ``#`` are comments, except a
``# period_s: P`` line before the header, which makes every client of the file periodic with
period P seconds.

Availability: ``client, online_from_s, online_until_s`` and optionally ``tz_offset_s``,
``period_s`` and ``charging``. A row says the client is online on ``[online_from_s,
online_until_s)`` of its local clock; a row with both times empty declares a client that is
never online. A client's rows come in time order and never overlap (touching is fine: they are
merged). ``period_s`` (one value per client; a column overrides the header) repeats the
client's intervals every P seconds, so each must lie in ``[0, P]``. ``tz_offset_s`` (one per
client, at most one day or the client's period in magnitude) is the client's local clock minus
the simulated clock: the client is online at simulated time t when its local time ``t +
tz_offset_s`` (modulo P if periodic) lies in one of its intervals. ``charging`` (0 or 1 per
interval; empty: 0) says the device is plugged in throughout that online interval: with
``clients.battery.charging: trace`` it charges then (and only then).

Capacity: ``client, compute_s_per_sample, up_rate_bps, down_rate_bps``: the seconds one
training sample takes on the device and its link rates (see `flnet.sim.world` for how they
replace the FLOP- and Shannon-based costs).

Both are stored as columns (`IntervalTrace`, `CapacityTrace`), never a Python object per
client. Simulated clients map to trace clients by `TraceMap`.
"""

from __future__ import annotations

import bisect
import csv
import math
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

import numpy as np

from flnet.base import userfiles
from flnet.errors import ScenarioError
from flnet.rng import Stream, generator
from flnet.schema import CapacityTraceConfig, TraceAvailability

MAX_TRACE_BYTES = 1 << 30  # a trace larger than this is refused before it is read
AVAILABILITY_COLUMNS = ("client", "online_from_s", "online_until_s")
AVAILABILITY_OPTIONAL = ("tz_offset_s", "period_s", "charging")
CAPACITY_COLUMNS = ("client", "compute_s_per_sample", "up_rate_bps", "down_rate_bps")
# |tz_offset_s| at most: one day (every time zone, -12 h..+14 h, with room to spare), or a
# periodic client's period if longer (a phase within it); beyond, a clock is nonsense
TZ_OFFSET_LIMIT_S = 86_400.0

Mapping = Literal["permuted", "in_order", "by_id"]
_T = TypeVar("_T")


class TraceError(ScenarioError):
    """A trace file that cannot be used: names the file, the line and what is wrong."""


class IntervalTrace(NamedTuple):
    """Online intervals of M trace clients, as columns. Client i's intervals are rows
    ``offsets[i]:offsets[i+1]`` of `from_s`/`until_s`, sorted, disjoint and not touching."""

    ids: np.ndarray  # [M] int64, the file's client ids, ascending
    offsets: np.ndarray  # [M+1] int64
    from_s: np.ndarray  # [R] float64, local clock
    until_s: np.ndarray  # [R] float64
    tz_offset_s: np.ndarray  # [M] float64: local clock minus simulated clock
    period_s: np.ndarray  # [M] float64: inf when the client's trace does not repeat
    # the intervals flagged `charging`, as a trace of their own (None: no charging column)
    charging: IntervalTrace | None = None

    @property
    def size(self) -> int:
        return len(self.ids)

    def state_until(self, row: int, t_s: float) -> tuple[bool, float]:
        """(is trace client `row` inside one of its intervals at simulated `t_s`, the next
        simulated instant that changes: the interval's end, or the next one's start; inf:
        never). One client; what a battery walks its charging timeline with."""
        period = float(self.period_s[row])
        local = t_s + float(self.tz_offset_s[row])
        if math.isfinite(period):
            local = local % period
        lo, hi = int(self.offsets[row]), int(self.offsets[row + 1])
        if lo == hi:
            return False, math.inf
        j = lo + int(np.searchsorted(self.from_s[lo:hi], local, side="right")) - 1
        if j >= lo and local < self.until_s[j]:
            return True, t_s + (float(self.until_s[j]) - local)
        if j + 1 < hi:
            return False, t_s + (float(self.from_s[j + 1]) - local)
        if math.isfinite(period):  # the first interval of the next period
            return False, t_s + (float(self.from_s[lo]) + period - local)
        return False, math.inf

    def online_until(self, rows: np.ndarray, t_s: float) -> np.ndarray:
        """[k] for trace clients `rows`: the simulated time the session holding `t_s` ends
        (inf: stays online), or `t_s` when offline."""
        rows = np.asarray(rows, dtype=np.int64)
        period = self.period_s[rows]
        periodic = np.isfinite(period)
        local = t_s + self.tz_offset_s[rows]
        local = np.where(periodic, np.mod(local, np.where(periodic, period, 1.0)), local)
        lo, hi = self.offsets[rows], self.offsets[rows + 1]
        j = _last_start_at_or_before(self.from_s, lo, hi, local)  # -1 where none
        has = j >= lo
        jj = np.where(has, j, 0)
        end = self.until_s[jj] if len(self.until_s) else np.zeros(len(rows))
        on = has & (local < end)
        left_s = np.where(on, end - local, 0.0)
        # a session that runs to the end of the period goes on in the next one
        first = np.minimum(lo, max(len(self.from_s) - 1, 0))
        wraps = on & periodic & (end >= period)
        if wraps.any() and len(self.from_s):
            starts_at_zero = wraps & (self.from_s[first] <= 0.0)
            whole = starts_at_zero & (jj == first)  # one interval [0, P): always online
            left_s = np.where(starts_at_zero, left_s + self.until_s[first], left_s)
            left_s = np.where(whole, np.inf, left_s)
        on &= left_s > _rounding_s(np.asarray(t_s), t_s + self.tz_offset_s[rows])
        return np.where(on, t_s + left_s, t_s)

    def online(self, rows: np.ndarray, t_s: float) -> np.ndarray:
        """[k] bool: trace clients `rows` online at simulated time `t_s`."""
        return self.online_until(rows, t_s) > t_s


# An interval is [online_from_s, online_until_s) of a client's local clock, and the simulated
# instant t is local time t + tz_offset_s (mod the period): one rounding. So at the simulated
# instant a session was computed to end (`online_until`: t0 + (until - local(t0))), local(t)
# can fall a few ulps short of `until`, and the client would count as online for ~1e-13 s:
# selected at a round's start and interrupted at once, zero-joule rows. A session with no more
# than this many ulps (of the clocks' magnitude) left has ended: half-open at both ends.
ENDED_WITHIN_ULPS = 8


def _rounding_s(t_s: np.ndarray, local: np.ndarray) -> np.ndarray:
    """What is left of a session at `t_s` (local clock `local`) that counts as nothing: the
    rounding of converting between the two clocks."""
    return ENDED_WITHIN_ULPS * np.spacing(np.maximum(np.abs(t_s), np.abs(local)))


FEW_QUERIES = 16  # at most this many, `_last_start_at_or_before` searches one at a time


def _last_start_at_or_before(
    starts: np.ndarray, lo: np.ndarray, hi: np.ndarray, x: np.ndarray
) -> np.ndarray:
    """Per query i, the last index j in [lo_i, hi_i) with starts[j] <= x_i (lo_i - 1 if none):
    a binary search run for all queries at once, O(k log R) and no per-client Python; up to
    FEW_QUERIES (a stream's pick, a work's fate) each searches its own slice, which costs
    less than the shared search's passes over arrays (the same indices)."""
    if len(x) <= FEW_QUERIES:
        return np.fromiter(
            (
                a + int(np.searchsorted(starts[a:b], v, side="right")) - 1
                for a, b, v in zip(lo.tolist(), hi.tolist(), x.tolist())
            ),
            dtype=np.int64,
            count=len(x),
        )
    lo, hi = lo.copy(), hi.copy()
    while True:
        active = lo < hi
        if not active.any():
            return lo - 1
        mid = (lo + hi) // 2
        go_right = active & (starts[np.where(active, mid, 0)] <= x)
        lo = np.where(go_right, mid + 1, lo)
        hi = np.where(active & ~go_right, mid, hi)


class CapacityTrace(NamedTuple):
    """Speeds of M trace clients, as columns."""

    ids: np.ndarray  # [M] int64, ascending
    compute_s_per_sample: np.ndarray  # [M] seconds per training sample (forward + backward)
    up_rate_bps: np.ndarray  # [M]
    down_rate_bps: np.ndarray  # [M]

    @property
    def size(self) -> int:
        return len(self.ids)


class TraceMap(NamedTuple):
    """Which trace client (an index into the trace's ascending ids) simulated client k plays.

    `permuted`: ``order[k mod M]``, `order` a permutation of the M trace clients drawn from the
    run's seed and the trace's stream, so which simulated clients share a trace client is
    random but fixed by the seed (a resumed run gets the same); `in_order`: the identity, so
    client k plays the k-th trace client (cyclically); `by_id`: the trace client whose id is
    k, and -1 (none: never online) when the file has no such id. Costs O(M), never O(N)."""

    order: np.ndarray  # [M] int64; by_id: the trace's ascending ids
    by_id: bool = False

    def __call__(self, clients: np.ndarray) -> np.ndarray:
        clients = np.asarray(clients, dtype=np.int64)
        if self.by_id:
            row = np.minimum(np.searchsorted(self.order, clients), len(self.order) - 1)
            return np.where(self.order[row] == clients, row, -1)
        return self.order[clients % len(self.order)]

    def one(self, client: int) -> int:
        """This map of one client (a Python int in, one out: no arrays)."""
        if self.by_id:
            row = min(int(np.searchsorted(self.order, client)), len(self.order) - 1)
            return row if int(self.order[row]) == client else -1
        return int(self.order[client % len(self.order)])


def trace_map(ids: np.ndarray, mapping: Mapping, seed: int, stream: Stream) -> TraceMap:
    if mapping == "by_id":
        return TraceMap(ids, by_id=True)
    if mapping == "in_order":
        return TraceMap(np.arange(len(ids), dtype=np.int64))
    return TraceMap(generator(seed, stream).permutation(len(ids)).astype(np.int64))


class TraceReplay:
    """Availability (`flnet.sim.availability.Availability`) replayed from an `IntervalTrace`:
    client k is online exactly when its trace client is (`TraceMap`; with none, never);
    `draw` plays no part."""

    def __init__(self, trace: IntervalTrace, mapping: TraceMap) -> None:
        self.trace, self.mapping = trace, mapping
        self._columns: _Columns | None = None  # the one-client path's, made on first use

    def online(self, clients: np.ndarray, t_s: float, draw: int = 0) -> np.ndarray:
        return self.online_until(clients, t_s) > t_s

    def online_until(self, clients: np.ndarray, t_s: float, draw: int = 0) -> np.ndarray:
        """Up to FEW_CLIENTS (a stream's pick, a work's fate) are answered one at a time in
        plain floats (`_Columns.until`), which costs less than the arrays' passes (the same
        numbers: tests/test_traces.py)."""
        if len(clients) <= FEW_CLIENTS:
            one = self._one().until
            return np.array([one(c, t_s) for c in np.asarray(clients).tolist()], dtype=float)
        rows = self.mapping(clients)
        absent = rows < 0
        until = self.trace.online_until(np.where(absent, 0, rows), t_s)
        return np.where(absent, t_s, until)

    def online_until_one(self, client: int, t_s: float) -> float:
        """`online_until` of one client, in plain floats."""
        return self._one().until(client, t_s)

    def first_online(self, clients: list[int], t_s: float) -> int:
        """The position of the first of `clients` online at `t_s` (`online`'s answer), -1 if
        none: one client at a time in plain floats, stopping there."""
        online = self._one().online
        for i, client in enumerate(clients):
            if online(client, t_s):
                return i
        return -1

    def _one(self) -> _Columns:
        """The one-client path's columns, made on first use."""
        if self._columns is None:
            self._columns = _Columns(self.trace, self.mapping)
        return self._columns

    def charging_until(self, client: int, t_s: float) -> tuple[bool, float]:
        """(is `client` charging at `t_s` by its trace's `charging` flag, when that next
        changes); a client without a trace client never charges."""
        assert self.trace.charging is not None
        row = int(self.mapping(np.asarray([client]))[0])
        return (False, math.inf) if row < 0 else self.trace.charging.state_until(row, t_s)


KNOWN_KEPT = 1 << 16  # clients whose last answer `_Columns.online` keeps, at most
FEW_CLIENTS = 24  # at most this many, `TraceReplay.online_until` asks about one at a time


class _Columns:
    """One client's session end in plain float arithmetic, each step the one
    `IntervalTrace.online_until` takes on arrays (Python's float ``%`` is numpy's ``mod``,
    `math.ulp` its ``spacing`` of a non-negative number, `bisect_right` its
    ``searchsorted(side="right")``), from its trace client's intervals as Python lists: made
    when first asked for, for at most KNOWN_KEPT trace clients at a time (memory for those
    asked lately, never the whole trace)."""

    def __init__(self, trace: IntervalTrace, mapping: TraceMap) -> None:
        self.trace, self.mapping = trace, mapping
        # trace row -> (tz_offset_s, period_s, its intervals' starts and ends)
        self.rows: dict[int, tuple[float, float, list[float], list[float]]] = {}
        # client -> (since, until, online): its state from `since` until (before) `until`
        self.known: dict[int, tuple[float, float, bool]] = {}

    def intervals(self, row: int) -> tuple[float, float, list[float], list[float]]:
        got = self.rows.get(row)
        if got is None:
            if len(self.rows) >= KNOWN_KEPT:
                self.rows.clear()
            t = self.trace
            lo, hi = int(t.offsets[row]), int(t.offsets[row + 1])
            got = self.rows[row] = (
                float(t.tz_offset_s[row]),
                float(t.period_s[row]),
                t.from_s[lo:hi].tolist(),
                t.until_s[lo:hi].tolist(),
            )
        return got

    def until(self, client: int, t_s: float) -> float:
        """`TraceReplay.online_until` of one client."""
        return self.answer(client, t_s)[0]

    def online(self, client: int, t_s: float) -> bool:
        """``until(client, t_s) > t_s``, from the client's last answer while that holds (the
        clock only moves on: a pick asks the same offline clients again and again)."""
        known = self.known.get(client)
        if known is not None and known[0] <= t_s < known[1]:
            return known[2]
        until_s, holds_until_s = self.answer(client, t_s)
        online = until_s > t_s
        if len(self.known) >= KNOWN_KEPT:  # memory for the clients asked lately, not all N
            self.known.clear()
        self.known[client] = (t_s, holds_until_s, online)
        return online

    def answer(self, client: int, t_s: float) -> tuple[float, float]:
        """(`until`, an instant before which the client's state (online or not) is sure not
        to change from `t_s` on). That instant stays short of the state's change by a margin
        of 1e-9 of the clocks' magnitude, a million times their rounding: the local clock
        (t + tz, mod the period, exact where t + tz >= 0) is monotone within a period, so
        until then the same interval (or the same gap between intervals) holds it."""
        row = self.mapping.one(client)
        if row < 0:
            return t_s, math.inf
        tz, period, starts, ends = self.intervals(row)
        periodic = math.isfinite(period)
        local = t_s + tz
        # a negative local time's modulo rounds (numpy's as Python's): it can reach the
        # period itself, so its state is not held
        sure = not periodic or local >= 0.0
        if periodic:
            local = local % period
        j = bisect.bisect_right(starts, local) - 1
        if j < 0 or not local < ends[j]:  # in a gap: offline until the next start
            after = starts[j + 1] if j + 1 < len(starts) else (period if periodic else math.inf)
            if not sure:
                return t_s, t_s
            return t_s, t_s + (after - local) - _margin_s(t_s, tz, period, after)
        end = ends[j]
        left_s = end - local
        if periodic and end >= period and starts[0] <= 0.0:  # wraps into the next period
            left_s = math.inf if j == 0 else left_s + ends[0]
        if not left_s > ENDED_WITHIN_ULPS * math.ulp(max(abs(t_s), abs(t_s + tz))):
            return t_s, t_s  # (a session ending now: nothing held)
        if not sure:
            return t_s + left_s, t_s
        return t_s + left_s, t_s + left_s - _margin_s(t_s, tz, period, end)


def _margin_s(t_s: float, tz: float, period: float, local: float) -> float:
    """What an instant computed across the clocks stays short of (`_Columns.answer`)."""
    big = abs(t_s) + abs(tz) + (period if math.isfinite(period) else 0.0)
    return 1e-9 * (1.0 + big + (abs(local) if math.isfinite(local) else 0.0))


class TraceSpeeds(NamedTuple):
    """A capacity trace as the World uses it: per trace client, seconds per training FLOP
    (the trace's seconds per sample over the FLOPs charged per sample) and link rates; the
    device draws `compute_power_w` while it computes."""

    s_per_flop: np.ndarray  # [M]
    up_rate_bps: np.ndarray  # [M]
    down_rate_bps: np.ndarray  # [M]
    compute_power_w: float
    mapping: TraceMap


def trace_speeds(
    trace: CapacityTrace,
    flops_per_sample: float,
    compute_power_w: float,
    mapping: Mapping,
    seed: int,
) -> TraceSpeeds:
    return TraceSpeeds(
        trace.compute_s_per_sample / flops_per_sample,
        trace.up_rate_bps,
        trace.down_rate_bps,
        compute_power_w,
        trace_map(trace.ids, mapping, seed, Stream.TRACE_CAPACITY),
    )


def replay_from(cfg: TraceAvailability, seed: int, field: str) -> TraceReplay:
    """The scenario's availability trace, read and checked (errors name `field`)."""
    trace = _named(read_availability, cfg.path, f"{field}.path")
    return TraceReplay(trace, trace_map(trace.ids, cfg.mapping, seed, Stream.TRACE_AVAILABILITY))


def speeds_from(
    cfg: CapacityTraceConfig, seed: int, flops_per_sample: float, n: int
) -> TraceSpeeds:
    """The scenario's capacity trace for `n` clients, read and checked (errors name the
    field). Every client needs speeds: with `by_id` the file must have ids 0..n-1."""
    trace = _named(read_capacity, cfg.path, "clients.capacity_trace.path")
    ids = trace.ids
    if cfg.mapping == "by_id" and not (len(ids) >= n and ids[0] == 0 and ids[n - 1] == n - 1):
        have = ids[: min(n, len(ids))]
        gaps = np.flatnonzero(have != np.arange(len(have)))
        missing = int(gaps[0]) if len(gaps) else len(have)
        raise TraceError(
            f"by_id needs a row for every client 0..{n - 1}, but {cfg.path} has no client "
            f"{missing}; use permuted or in_order to reuse trace clients",
            field="clients.capacity_trace.mapping",
        )
    return trace_speeds(trace, flops_per_sample, cfg.compute_power_w, cfg.mapping, seed)


def _named(read: Callable[[str], _T], path: str, field: str) -> _T:
    try:
        return read(path)
    except TraceError as e:
        raise TraceError(str(e), field=field) from None


# ------------------------------------------------------------------ reading


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a regular UTF-8 file of at most MAX_TRACE_BYTES (counted while
    reading; a byte-order mark, as spreadsheets write, dropped), refused clearly otherwise."""
    return userfiles.text_lines(path, MAX_TRACE_BYTES, "trace file", TraceError)


def _table(
    path: Path, required: tuple[str, ...], optional: tuple[str, ...]
) -> tuple[dict[str, float], list[str], Iterator[tuple[int, list[str]]]]:
    """The header comments (``# name: value``), the column names and the data rows."""
    lines = _lines(path)
    meta: dict[str, float] = {}
    for number, text in lines:
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            key, sep, value = stripped[1:].partition(":")
            if sep and key.strip() == "period_s":
                meta["period_s"] = _number(path, number, "period_s", value.strip())
            continue
        try:
            columns = [c.strip() for c in next(csv.reader([stripped]))]
        except csv.Error as e:
            raise TraceError(f"{path}, line {number}: {e}") from None
        missing = [c for c in required if c not in columns]
        unknown = [c for c in columns if c not in required + optional]
        if missing or unknown or len(set(columns)) != len(columns):
            what = (
                f"missing column(s) {', '.join(missing)}"
                if missing
                else f"unknown column(s) {_names(unknown)}"
                if unknown
                else "a column named twice"
            )
            raise TraceError(
                f"{path}, line {number}: header has {what}; the columns are "
                f"{', '.join(required)} (required) and {', '.join(optional) or 'none'} (optional)"
            )
        return meta, columns, _rows(path, lines, len(columns))
    raise TraceError(f"{path}: no header row (columns {', '.join(required)})")


def _names(columns: list[str]) -> str:
    """Unknown column names, each shown only if it looks like one (a header of another kind of
    file, such as a password file's first line, is not echoed)."""
    if all(re.fullmatch(r"[A-Za-z_]\w{0,39}", c) for c in columns[:5]):
        return ", ".join(columns[:5]) + (
            f" and {len(columns) - 5} more" if len(columns) > 5 else ""
        )
    return f"({len(columns)} not shown: this may not be a trace file)"


def _rows(
    path: Path, lines: Iterator[tuple[int, str]], width: int
) -> Iterator[tuple[int, list[str]]]:
    numbers: list[int] = []  # the line numbers the csv reader took for the current row

    def data() -> Iterator[str]:
        for number, text in lines:
            stripped = text.strip()
            if stripped and not stripped.startswith("#"):
                if stripped.count('"') % 2:  # quoted fields pair their quotes on one line
                    raise TraceError(f"{path}, line {number}: a quote opened here is not closed")
                numbers.append(number)
                yield stripped

    reader = csv.reader(data())
    while True:
        numbers.clear()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # a field over csv's limit (131,072 characters)
            raise TraceError(f"{path}, line {numbers[0] if numbers else '?'}: {e}") from None
        if len(numbers) > 1:  # every field is a number: no row spans lines
            raise TraceError(f"{path}, line {numbers[0]}: a quote opened here is not closed")
        if len(cells) != width:
            raise TraceError(
                f"{path}, line {numbers[0]}: {len(cells)} fields, the header has {width}"
            )
        yield numbers[0], [c.strip() for c in cells]


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{path}, line {line}: {column} is not a number: {_clip(text)}") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}, line {line}: {column} must be finite (got {text})")
    return value


def _client(path: Path, line: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:  # also a number of over 4,300 digits
        raise TraceError(
            f"{path}, line {line}: client must be an integer id (got {_clip(text)})"
        ) from None
    if not -(2**63) <= value < 2**63:
        raise TraceError(
            f"{path}, line {line}: client id {_clip(text)} does not fit 64 bits "
            f"(at most {2**63 - 1:,})"
        )
    return value


def _clip(text: str, limit: int = 40) -> str:
    """`text` quoted, cut to `limit` characters: a cell of a file is not echoed whole."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def read_availability(path: str | Path) -> IntervalTrace:
    """Read and check an availability trace (module docstring), row by row, so that a
    problem is named with its line."""
    path = Path(path)
    meta, columns, rows = _table(path, AVAILABILITY_COLUMNS, AVAILABILITY_OPTIONAL)
    at = {c: i for i, c in enumerate(columns)}
    default_period = meta.get("period_s", math.inf)
    if default_period <= 0:
        raise TraceError(f"{path}: period_s in the header must be > 0 (got {default_period:g})")
    # per trace client while reading: its constants and its last interval (line, from, until)
    constants: dict[int, tuple[float, float, int]] = {}
    last: dict[int, tuple[int, float, float]] = {}
    ids: list[int] = []
    froms: list[float] = []
    untils: list[float] = []
    plugged: list[bool] = []  # each interval's charging flag
    for line, cells in rows:
        client = _client(path, line, cells[at["client"]])
        tz = (
            _number(path, line, "tz_offset_s", cells[at["tz_offset_s"]])
            if "tz_offset_s" in at
            else 0.0
        )
        period = (
            _number(path, line, "period_s", cells[at["period_s"]])
            if "period_s" in at and cells[at["period_s"]]
            else default_period
        )
        if period <= 0:
            raise TraceError(f"{path}, line {line}: period_s must be > 0 (got {period:g})")
        tz_limit_s = max(TZ_OFFSET_LIMIT_S, period if math.isfinite(period) else 0.0)
        if abs(tz) > tz_limit_s:
            raise TraceError(
                f"{path}, line {line}: tz_offset_s {tz:g} is beyond +-{tz_limit_s:g} s (one "
                "day, or the client's period if longer): a time zone is within -12 h..+14 h"
            )
        seen = constants.setdefault(client, (tz, period, line))
        if seen[:2] != (tz, period):
            raise TraceError(
                f"{path}, line {line}: client {client} has tz_offset_s {tz:g} and period_s "
                f"{period:g} here but {seen[0]:g} and {seen[1]:g} on line {seen[2]}; they "
                "are one value per client"
            )
        a_text, b_text = cells[at["online_from_s"]], cells[at["online_until_s"]]
        if not a_text and not b_text:  # a client that is never online
            continue
        a = _number(path, line, "online_from_s", a_text)
        b = _number(path, line, "online_until_s", b_text)
        if a < 0 or b < 0:
            raise TraceError(
                f"{path}, line {line}: times must be >= 0 (online_from_s {a:g}, "
                f"online_until_s {b:g})"
            )
        if a >= b:
            raise TraceError(
                f"{path}, line {line}: online_from_s {a:g} is not before online_until_s {b:g}"
            )
        if b > period:
            raise TraceError(
                f"{path}, line {line}: online_until_s {b:g} is past the period {period:g} s "
                "(a periodic client's intervals lie within [0, period_s])"
            )
        if client in last:
            prev_line, prev_a, prev_b = last[client]
            if a < prev_a:
                raise TraceError(
                    f"{path}, line {line}: client {client}'s intervals are not in time order "
                    f"({a:g} s starts before line {prev_line}'s {prev_a:g} s)"
                )
            if a < prev_b:
                raise TraceError(
                    f"{path}, line {line}: client {client}'s interval [{a:g}, {b:g}) overlaps "
                    f"line {prev_line}'s [{prev_a:g}, {prev_b:g})"
                )
        last[client] = (line, a, b)
        ids.append(client)
        froms.append(a)
        untils.append(b)
        plugged.append("charging" in at and _flag(path, line, cells[at["charging"]]))
    if not constants:
        raise TraceError(f"{path}: no clients (the file has a header but no rows)")
    clients = np.array(sorted(constants), dtype=np.int64)
    tz_col = np.array([constants[int(c)][0] for c in clients])
    period_col = np.array([constants[int(c)][1] for c in clients])
    rows_of = np.array(ids, dtype=np.int64)
    from_col, until_col = np.array(froms, dtype=np.float64), np.array(untils, dtype=np.float64)
    trace = _as_columns(clients, tz_col, period_col, rows_of, from_col, until_col)
    if "charging" not in at:
        return trace
    on = np.array(plugged, dtype=bool)
    return trace._replace(
        charging=_as_columns(clients, tz_col, period_col, rows_of[on], from_col[on], until_col[on])
    )


def _flag(path: Path, line: int, text: str) -> bool:
    if text not in ("", "0", "1"):
        raise TraceError(f"{path}, line {line}: charging must be 0 or 1 (got {_clip(text)})")
    return text == "1"


def _as_columns(
    clients: np.ndarray,
    tz_offset_s: np.ndarray,
    period_s: np.ndarray,
    row_client: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
) -> IntervalTrace:
    """The trace's columns from checked rows: `clients` ascending with their constants, and
    one (client, from, until) per interval in any order."""
    order = np.lexsort((a, row_client))  # by client, then time
    row_client, a, b = row_client[order], a[order], b[order]
    # merge touching intervals of a client, so a session's end is where it really ends
    joins = np.zeros(len(a), dtype=bool)
    joins[1:] = (row_client[1:] == row_client[:-1]) & (a[1:] == b[:-1])
    keep = ~joins
    merged_b = np.zeros(int(keep.sum()))
    np.maximum.at(merged_b, np.cumsum(keep) - 1, b)
    a, row_client = a[keep], row_client[keep]
    offsets = np.zeros(len(clients) + 1, dtype=np.int64)
    np.add.at(offsets, np.searchsorted(clients, row_client) + 1, 1)
    return IntervalTrace(clients, np.cumsum(offsets), a, merged_b, tz_offset_s, period_s)


def read_capacity(path: str | Path) -> CapacityTrace:
    """Read and check a capacity trace (module docstring): one row per client, every figure
    > 0."""
    path = Path(path)
    _, columns, rows = _table(path, CAPACITY_COLUMNS, ())
    at = {c: i for i, c in enumerate(columns)}
    values: dict[int, tuple[float, ...]] = {}
    lines: dict[int, int] = {}
    for line, cells in rows:
        client = _client(path, line, cells[at["client"]])
        if client in values:
            raise TraceError(
                f"{path}, line {line}: client {client} again (first on line {lines[client]}); "
                "a capacity trace has one row per client"
            )
        figures = tuple(_number(path, line, c, cells[at[c]]) for c in CAPACITY_COLUMNS[1:])
        for column, value in zip(CAPACITY_COLUMNS[1:], figures):
            if value <= 0:
                raise TraceError(f"{path}, line {line}: {column} must be > 0 (got {value:g})")
        values[client], lines[client] = figures, line
    if not values:
        raise TraceError(f"{path}: no clients (the file has a header but no rows)")
    ids = np.array(sorted(values), dtype=np.int64)
    table = np.array([values[int(c)] for c in ids], dtype=np.float64).reshape(len(ids), 3)
    return CapacityTrace(ids, table[:, 0].copy(), table[:, 1].copy(), table[:, 2].copy())


# ------------------------------------------------------------------ writing


def write_availability(
    path: str | Path,
    ids: np.ndarray,
    from_s: np.ndarray,
    until_s: np.ndarray,
    *,
    period_s: np.ndarray | None = None,
    never_online: np.ndarray | None = None,
    comment: str = "",
) -> None:
    """Write rows (one per interval) in flnet's availability format; `period_s` per row,
    `never_online` ids get a row with empty times."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text in comment.splitlines():
            f.write(f"# {text}\n")
        header = list(AVAILABILITY_COLUMNS) + (["period_s"] if period_s is not None else [])
        f.write(",".join(header) + "\n")
        for i in range(len(ids)):
            row = [str(int(ids[i])), repr(float(from_s[i])), repr(float(until_s[i]))]
            if period_s is not None:
                row.append(repr(float(period_s[i])))
            f.write(",".join(row) + "\n")
        for c in never_online if never_online is not None else ():
            f.write(f"{int(c)},," + ("," if period_s is not None else "") + "\n")


def write_capacity(path: str | Path, trace: CapacityTrace, comment: str = "") -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text in comment.splitlines():
            f.write(f"# {text}\n")
        f.write(",".join(CAPACITY_COLUMNS) + "\n")
        for row in zip(trace.ids, *trace[1:]):
            f.write(",".join([str(int(row[0])), *(repr(float(v)) for v in row[1:])]) + "\n")
