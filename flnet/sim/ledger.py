"""The ledger: one row per device per compute, transfer and evaluation event, with its time,
joules and bits, and the pattern and step that produced it.

Rows are only ever appended (cheap on the hot path): one at a time as tuples (`add`), or a
block at a time as columns (`extend`, a round computed at once), and become columns and a
DataFrame on demand (the tuples converted, the blocks joined). Running totals per kind feed
the records without rescanning the rows; energy totals are kept exactly
(Shewchuk's partials, as `math.fsum`), so a record's `energy_j` is bit for bit `math.fsum` of the
rows that ended by its time. `flush` appends the rows not yet written to a journal file (CSV,
floats written so they read back exactly): checkpoints cost the new rows, not the whole ledger,
and a resumed run replays the journal up to its checkpoint.
"""

from __future__ import annotations

import errno
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import pandas as pd

from flnet.errors import FlnetError

SERVER = -1  # node id of the server / access point
NOBODY = -2  # peer of an event that has none (compute, evaluate)
BROADCAST = -3  # peer of a D2D transmission to several receivers (each has its d2d_rx row)

PATTERNS = ("round_trip", "exchange", "stream")
KINDS = ("download", "compute", "upload", "d2d", "d2d_rx", "evaluate")
OUTCOMES = (
    "ok",
    "deadline",
    "cancelled",
    "dropped",
    "lost",
    "interrupted",
    "timeout",
    "battery",  # the device's battery ran empty (flnet.sim.battery)
)
COLUMNS = (
    "round",
    "pattern",
    "node",
    "peer",
    "kind",
    "start_s",
    "end_s",
    "energy_j",
    "bits",
    "flops",
    "outcome",
)
FLOATS = ("start_s", "end_s", "energy_j", "bits", "flops")  # the float columns


class Tag(NamedTuple):
    """Which pattern, at which step, produced a row (the ledger's `pattern` and `round`)."""

    pattern: str  # round_trip, exchange or stream
    step: int  # the pattern's unit: round, iteration, server update


Block = dict[str, np.ndarray]  # rows as columns, as `Ledger.columns` gives them


class Subscriber(Protocol):
    """What hears of each client's energy as its rows are added, replayed ones included
    (`flnet.sim.battery.Battery` drains, `flnet.sim.classes.ClassEnergy` sums by class)."""

    def spend(self, client: int, t_s: float, energy_j: float, outcome: str) -> None:
        """A row of `energy_j` on `client` that ended at `t_s` with `outcome`."""


class Ledger:
    def __init__(self, subscribers: Sequence[Subscriber] = ()) -> None:
        """`subscribers` hear of every client's row (node >= 0), in their order, until
        `unsubscribe`."""
        # the rows in order: runs of tuples (`add`) and blocks (`extend`)
        self._parts: list[list[tuple] | Block] = []
        self._open: list[tuple] | None = None  # the run of tuples `add` appends to
        self._closed_rows = 0  # rows in the parts but the open run
        self._partials: dict[str, list[float]] = defaultdict(list)  # by kind, exact sums
        self._bits: dict[str, float] = defaultdict(float)  # by kind, in row order
        self._unsummed: list[Block] = []  # blocks not in the totals yet (until they are read)
        self._flushed = 0  # rows already in the journal
        self._flushed_from = (0, 0)  # the part the journal's end is in, and the rows before it
        self._subscribers = list(subscribers)

    def add(
        self,
        tag: Tag,
        node: int,
        peer: int,
        kind: str,
        start_s: float,
        end_s: float,
        energy_j: float = 0.0,
        bits: float = 0.0,
        flops: float = 0.0,
        outcome: str = "ok",
    ) -> None:
        if self._unsummed:
            self._sum_blocks()  # the bits before this row's
        rows = self._open
        if rows is None:
            rows = self._open = []
            self._parts.append(rows)
        rows.append((tag, node, peer, kind, start_s, end_s, energy_j, bits, flops, outcome))
        if energy_j:
            _add_exact(self._partials[kind], energy_j)
        self._bits[kind] += bits
        if node >= 0:
            for subscriber in self._subscribers:
                subscriber.spend(node, end_s, energy_j, outcome)

    def extend(self, block: Block) -> None:
        """Append the rows of `block` (every column, as `columns` gives them), in order: the
        same rows and totals as `add` of each (bits summed in row order, joules exactly),
        the totals taken when they are next read or a row is added."""
        if not len(block["kind"]):
            return
        self._closed_rows += len(block["kind"]) + len(self._open or ())
        self._parts.append(block)
        self._open = None
        self._unsummed.append(block)
        if self._subscribers:
            names = [OUTCOMES[o] for o in block["outcome"].tolist()]
            for node, end_s, joules, outcome in zip(
                block["node"].tolist(), block["end_s"].tolist(), block["energy_j"].tolist(), names
            ):
                if node >= 0:
                    for subscriber in self._subscribers:
                        subscriber.spend(node, end_s, joules, outcome)

    def unsubscribe(self) -> None:
        """No row comes after the run's end: let go of the subscribers (a run's result holds
        the ledger until its table is read, not the batteries)."""
        self._subscribers = []

    def _sum_blocks(self) -> None:
        """Add the blocks not in the totals yet: each kind's bits in row order, its joules to
        the exact sums in one pass."""
        if not self._unsummed:
            return
        blocks, self._unsummed = self._unsummed, []
        kinds, bits, energy_j = (
            np.concatenate([b[c] for b in blocks]) for c in ("kind", "bits", "energy_j")
        )
        for code in np.unique(kinds).tolist():
            kind, of = KINDS[code], kinds == code
            # accumulate: a running sum, left to right, as `add`'s +=
            sums = np.add.accumulate(np.concatenate(([self._bits[kind]], bits[of])))
            self._bits[kind] = sums[-1].item()
            joules = energy_j[of]
            joules = joules[joules != 0]
            if len(joules):
                _add_all_exact(self._partials[kind], joules.tolist())

    def __len__(self) -> int:
        return self._closed_rows + len(self._open or ())

    @property
    def bits(self) -> dict[str, float]:
        """Bits by kind (each summed in row order)."""
        self._sum_blocks()
        return self._bits

    @property
    def energy_j(self) -> dict[str, float]:
        """Joules by kind (each exactly rounded)."""
        self._sum_blocks()
        out: dict[str, float] = defaultdict(float)
        out.update({kind: math.fsum(p) for kind, p in self._partials.items()})
        return out

    @property
    def total_energy_j(self) -> float:
        """math.fsum of every row's joules, bit for bit."""
        self._sum_blocks()
        return math.fsum(x for p in self._partials.values() for x in p)

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame, pattern, kind and outcome categorical."""
        cols: dict[str, Any] = dict(self.columns())  # codes become categoricals
        for c, names in _NAMES.items():
            cols[c] = pd.Categorical.from_codes(cols[c], categories=pd.Index(names))
        return pd.DataFrame(cols, columns=COLUMNS)

    def columns(self) -> dict[str, np.ndarray]:
        """Every column as an array: pattern, kind and outcome as their index in PATTERNS,
        KINDS and OUTCOMES."""
        return joined(self._blocks(0))

    def _blocks(self, start: int, first: int = 0, at: int = 0) -> list[Block]:
        """The rows from the `start`-th on, as blocks (runs of tuples converted; a closed run
        kept converted), looking from the `first` part on (`at` rows before it)."""
        out = []
        for i in range(first, len(self._parts)):
            part = self._parts[i]
            length = _length(part)
            if at + length > start:
                skip = max(start - at, 0)
                if part is self._open:  # still growing: only the rows asked for, each time
                    out.append(block_of(part[skip:]))
                else:
                    if isinstance(part, list):
                        part = self._parts[i] = block_of(part)
                    out.append({c: v[skip:] for c, v in part.items()} if skip else part)
            at += length
        return out

    # ------------------------------------------------------------------ the journal

    def flush(self, path: Path) -> tuple[int, int]:
        """Append the rows not yet written to the journal at `path` (created with a header)
        and fsync it (a checkpoint that reaches the disk must not point past what did);
        return (rows, bytes) in it, which a checkpoint keeps to resume from."""
        new = self._blocks(self._flushed, *self._flushed_from)
        fresh = not path.exists() or self._flushed == 0
        with open(path, "wb" if fresh else "ab") as f:
            if fresh:
                f.write((",".join(COLUMNS) + "\n").encode("ascii"))
            if new:
                _write_csv(joined(new), f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the checkpoint that points into it
            size = f.tell()
        if fresh:
            _fsync_directory(path.parent)  # the new file's name, too
        self._flushed = len(self)
        if self._parts:  # the next flush starts in the last part
            self._flushed_from = (len(self._parts) - 1, self._flushed - _length(self._parts[-1]))
        return self._flushed, size

    def load_journal(self, path: Path, rows: int, size: int) -> None:
        """Replay the first `rows` rows of the journal (resuming a run), cutting off what a
        later, unfinished part of the run appended: the totals come out identical."""
        try:
            with open(path, "r+", encoding="ascii") as f:
                f.truncate(size)
                lines = f.read().splitlines()[1:]
        except OSError as e:
            raise FlnetError(f"cannot read the ledger journal {path}: {e.strerror}") from None
        if len(lines) != rows:
            raise FlnetError(
                f"the ledger journal {path} has {len(lines)} rows where the "
                f"checkpoint expects {rows}; delete the checkpoint to start afresh"
            )
        for line in lines:
            step, pattern, node, peer, kind, *nums, outcome = line.split(",")
            start_s, end_s, energy_j, bits, flops = map(float, nums)
            self.add(
                Tag(pattern, int(step)),
                int(node),
                int(peer),
                kind,
                start_s,
                end_s,
                energy_j,
                bits,
                flops,
                outcome,
            )
        self._flushed = len(self)


def _add_all_exact(partials: list[float], xs: list[float]) -> None:
    """`_add_exact` of each of `xs`, at once: partials of the same exact sum, found with
    `math.fsum` (correctly rounded) as the rounded sum, then the rounded rest, and so on until
    nothing is left (each rest is below half an ulp of the one before: a few passes)."""
    values, out = [*partials, *xs], []
    try:
        while (s := math.fsum(values)) != 0.0:
            if not math.isfinite(s):
                raise OverflowError
            out.append(s)
            values.append(-s)
    except OverflowError:  # an infinite, NaN or huge joule: one at a time, as `add` does
        for x in xs:
            _add_exact(partials, x)
        return
    partials[:] = out[::-1]  # smallest first, as `_add_exact` keeps them


def _add_exact(partials: list[float], x: float) -> None:
    """Add `x` to the non-overlapping partials whose exact sum is the running total
    (Shewchuk 1997, as in the `math.fsum` recipe)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


def _fsync_directory(path: Path) -> None:
    """A file created in `path` keeps its name after a power cut (as `flnet.output`'s, which
    the time side does not import)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:  # a file system that cannot sync a folder
            raise
    finally:
        os.close(fd)


def remove_journal(path: Path) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def block_of(rows: list[tuple]) -> Block:
    """The block of `rows` (tuples of every column, as `Ledger.add` takes them)."""
    out = {}
    tags, *rest = zip(*rows) if rows else [()] * (len(COLUMNS) - 1)
    patterns, steps = zip(*tags) if tags else ((), ())  # a Tag is (pattern, step)
    for c, v in zip(COLUMNS, (steps, patterns, *rest)):
        if c in _CODES:
            out[c] = np.fromiter(map(_CODES[c].__getitem__, v), dtype=np.int8, count=len(v))
        else:
            out[c] = np.array(v, dtype=np.int64 if c in _INTS else np.float64)
    return out


def _length(part: list[tuple] | Block) -> int:
    return len(part) if isinstance(part, list) else len(part["kind"])


def joined(blocks: list[Block]) -> Block:
    """One block of the rows of `blocks`, in order."""
    if not blocks:
        return block_of([])
    return {c: np.concatenate([b[c] for b in blocks]) for c in COLUMNS}


def block(
    tag: Tag,
    node: np.ndarray,
    peer: int | np.ndarray,
    kind: np.ndarray,
    start_s: float | np.ndarray,
    end_s: np.ndarray,
    energy_j: np.ndarray,
    bits: float | np.ndarray,
    flops: float | np.ndarray,
    outcome: np.ndarray,
) -> Block:
    """A block of rows of one `tag` (`Ledger.extend`'s), each column an array or one value for
    every row; `kind` and `outcome` as their index in KINDS and OUTCOMES."""
    m = len(node)
    pattern = _CODES["pattern"][tag.pattern]
    cols = (tag.step, pattern, node, peer, kind, start_s, end_s, energy_j, bits, flops, outcome)
    out = {}
    for c, v in zip(COLUMNS, cols):
        if isinstance(v, np.ndarray):
            out[c] = v if v.dtype == _DTYPES[c] else v.astype(_DTYPES[c])
        else:
            out[c] = np.full(m, v, dtype=_DTYPES[c])
    return out


def _write_csv(columns: dict[str, np.ndarray], f: Any) -> None:
    """The journal's lines for `columns` (a `Block`), without a header, into the binary file
    `f`: Arrow's CSV writer, formatting in C what Python would a row at a time. It writes each
    float as the shortest text that reads back to the same double (double-conversion's
    ToShortest: ``1``, ``-0``, ``1e-7``, ``inf``), so `load_journal`'s float() gets every bit
    back (tests/test_ledger.py checks doubles across the whole range)."""
    import pyarrow as pa
    from pyarrow import csv

    names = {c: np.asarray(_NAMES[c]) for c in _NAMES}
    table = pa.table({c: names[c][v] if c in names else v for c, v in columns.items()})
    csv.write_csv(table, f, csv.WriteOptions(include_header=False, quoting_style="none"))


_INTS = ("round", "node", "peer")
_NAMES = {"pattern": PATTERNS, "kind": KINDS, "outcome": OUTCOMES}
_CODES = {c: {k: i for i, k in enumerate(names)} for c, names in _NAMES.items()}
_DTYPES = {c: np.int8 if c in _NAMES else np.int64 if c in _INTS else np.float64 for c in COLUMNS}
