"""The table journal: a run's per-client rows, appended at each checkpoint, only those changed.

Per-client tables (`flnet.learn.table.ClientTable`: SCAFFOLD's c_i, persisted optimizer states)
hold a row for every client that ever took part, which at a million registered clients is far
more than the cohort that changes them in a round. So a checkpoint does not save them: it
appends to this journal the rows written since the previous checkpoint, one entry per table, and
keeps where the journal then ends (`position`: file, entries, bytes and the SHA-256 of those
bytes). A resumed run replays exactly that prefix, a later entry's row replacing an earlier row
of the same client, and cuts off what an unfinished later part of the run appended, as the
ledger's journal does (`flnet.sim.ledger`). A journal shorter than its checkpoint says, or whose
bytes hash otherwise (another run's, or edited), is a FlnetError naming the file.

A client written in many rounds piles up entries. When the journal would hold more than
`COMPACT_FACTOR` times the live rows' bytes (and more than `COMPACT_MIN_BYTES`), the checkpoint
writes every live row into the other of the two journal files instead; the old file is deleted
once the checkpoint naming the new one is on disk (`committed`), so a kill at any instant leaves
a checkpoint and the journal it names. The journal stays within a few times the live rows, and a
checkpoint costs the rows changed since the last one (amortized, the compactions included).

Layout: `HEADER`, then entries, each `MAGIC`, the payload's length (8 bytes, little endian) and
the payload, ``torch.save`` of {"table": name, "clients": [R] int64, "rows": [leaf [R, ...]]},
read back with ``torch.load(weights_only=True)``. A file is created only when it has rows to
hold: a run without per-client state writes none.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from flnet import output
from flnet.errors import FlnetError
from flnet.learn.table import ClientTable

if TYPE_CHECKING:
    from hashlib import _Hash as Hash

FILES = output.TABLE_JOURNALS  # the two files a compaction alternates between
HEADER = b"flnet table journal 1\n"
MAGIC = b"ftj1"
_FRAME = struct.Struct("<4sQ")  # MAGIC, payload bytes
COMPACT_FACTOR = 3  # rewrite once the journal would exceed this times the live rows' bytes
COMPACT_MIN_BYTES = 1 << 20  # never for a journal below this


class Tables(Protocol):
    """What the journal saves: named per-client tables (`flnet.learn.local.Learner`)."""

    def state_dict(self, changed_only: bool = False) -> dict[str, dict]: ...

    def mark_saved(self) -> None: ...

    def table_bytes(self) -> int: ...


class TableJournal:
    """The journal of one run's folder, as far as the last save (or the resumed checkpoint)."""

    def __init__(
        self, directory: Path, position: dict | None = None, digest: Hash | None = None
    ) -> None:
        self.directory = directory
        self.file = position["file"] if position else FILES[0]
        self.entries = position["entries"] if position else 0
        self.bytes = position["bytes"] if position else 0
        self._hash = digest if digest is not None else hashlib.sha256()
        self.written_bytes = 0  # bytes this process wrote to journal files (benchmarks)

    def position(self) -> dict:
        """What a checkpoint keeps to find its rows again."""
        return {
            "file": self.file,
            "entries": self.entries,
            "bytes": self.bytes,
            "sha256": self._hash.hexdigest(),
        }

    @property
    def path(self) -> Path:
        return self.directory / self.file

    # ------------------------------------------------------------------ saving

    def save(self, tables: Tables) -> dict:
        """Write the rows changed since the last save (or, past the compaction threshold, every
        live row into the other file); mark them saved; return the new position. An OSError
        leaves the position as it was (a later save writes over the partial bytes)."""
        changed = tables.state_dict(changed_only=True)
        if not changed:
            return self.position()
        entries = [_entry(name, state) for name, state in changed.items()]
        grown = self.bytes + sum(len(frame) + len(payload) for frame, payload in entries)
        if grown > max(COMPACT_MIN_BYTES, COMPACT_FACTOR * tables.table_bytes()):
            del entries, changed
            full = tables.state_dict()  # each table let go once its entry is written
            other = FILES[1 - FILES.index(self.file)]
            self._write(other, 0, (_entry(name, full.pop(name)) for name in list(full)))
        else:
            self._write(self.file, self.bytes, iter(entries))
        tables.mark_saved()
        return self.position()

    def _write(self, file: str, at: int, entries: Iterator[tuple[bytes, bytes]]) -> None:
        """Write `entries` into `file` from byte `at` (0: a new file, with its header)."""
        digest = self._hash.copy() if at else hashlib.sha256()
        count = self.entries if at else 0
        with open(self.directory / file, "r+b" if at else "wb") as f:
            f.seek(at)
            f.truncate()
            for piece in [] if at else [HEADER]:
                f.write(piece)
                digest.update(piece)
            for frame, payload in entries:
                for piece in (frame, payload):
                    f.write(piece)
                    digest.update(piece)
                count += 1
            end = f.tell()
            f.flush()
            os.fsync(f.fileno())  # on disk before the checkpoint that points into it
        if not at:
            output.fsync_directory(self.directory)  # the new file's name, too
        self.written_bytes += end - at
        self.file, self.bytes, self.entries, self._hash = file, end, count, digest

    def committed(self) -> None:
        """The checkpoint naming this position is on disk: the other file is no longer needed."""
        other = self.directory / FILES[1 - FILES.index(self.file)]
        if other.exists():
            other.unlink()

    # ------------------------------------------------------------------ resuming

    @classmethod
    def resume(cls, directory: Path, position: dict) -> tuple[TableJournal, dict[str, dict]]:
        """The journal as of `position` and the tables it holds there (the last row of each
        client); what lies beyond the position, and the other file, are removed."""
        path = directory / position["file"]
        digest = hashlib.sha256()
        tables: dict[str, ClientTable] = {}
        if position["bytes"]:
            _replay(path, position, digest, tables)
            with open(path, "r+b") as f:
                f.truncate(position["bytes"])
        else:
            path.unlink(missing_ok=True)
        journal = cls(directory, position, digest)
        journal.committed()
        return journal, {name: t.state_dict() for name, t in tables.items()}


def remove(directory: Path) -> None:
    """Delete the journal files a previous run left in `directory`."""
    for name in FILES:
        (directory / name).unlink(missing_ok=True)


def _entry(name: str, state: dict) -> tuple[bytes, bytes]:
    """(frame, payload) of one table's rows."""
    buf = io.BytesIO()
    torch.save(
        {
            "table": name,
            "clients": state["clients"].cpu(),
            "rows": [r.cpu() for r in state["rows"]],
        },
        buf,
    )
    payload = buf.getvalue()
    return _FRAME.pack(MAGIC, len(payload)), payload


def _replay(path: Path, position: dict, digest: Hash, tables: dict[str, ClientTable]) -> None:
    """Read the first ``position["bytes"]`` bytes of the journal at `path` entry by entry into
    `tables` (each made from its first entry), hashing them into `digest`; check them against
    the position."""
    size, entries = position["bytes"], position["entries"]

    def bad(what: str) -> FlnetError:
        return FlnetError(
            f"the table journal {path} {what}, so it does not match the checkpoint beside it "
            "(start afresh with --force)"
        )

    try:
        with open(path, "rb") as f:
            actual = os.fstat(f.fileno()).st_size
            if actual < size:
                raise bad(f"has {actual} bytes where the checkpoint expects {size} (truncated)")

            def read(n: int) -> bytes:
                data = f.read(n)
                digest.update(data)
                return data

            if size < len(HEADER) or read(len(HEADER)) != HEADER:
                raise bad("has no table journal header")
            at, seen = len(HEADER), 0
            while at < size:
                frame = read(_FRAME.size) if at + _FRAME.size <= size else b""
                magic, length = _FRAME.unpack(frame) if frame else (b"", 0)
                if magic != MAGIC or at + _FRAME.size + length > size:
                    raise bad(f"has a broken entry at byte {at}")
                try:
                    entry = torch.load(io.BytesIO(read(length)), weights_only=True)
                    name, clients, rows = entry["table"], entry["clients"], list(entry["rows"])
                    if name not in tables:
                        tables[name] = ClientTable([torch.zeros_like(r[0]) for r in rows])
                    tables[name].put(clients.numpy().astype(np.int64), rows)
                except Exception:
                    raise bad(f"has an unreadable entry at byte {at}") from None
                at, seen = at + _FRAME.size + length, seen + 1
    except OSError as e:
        raise FlnetError(f"cannot read the table journal {path}: {e.strerror}") from None
    if digest.hexdigest() != position["sha256"]:
        raise bad("differs from the bytes the checkpoint recorded")
    if seen != entries:
        raise bad(f"has {seen} entries where the checkpoint expects {entries}")
