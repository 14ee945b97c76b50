"""The results folder of one run: created with clear errors, locked while a run writes it,
never mixed with another run's files, and written file by file atomically.

A folder "holds a run" when it has any of the files a run writes (`RUN_FILES`). A new run into
such a folder is refused unless it resumes that run (`resume=True`, `flnet run --resume`: the
checkpoint must be there) or replaces it (`force=True`, `--force`: the old run's files are
deleted first; other files in the folder are left alone). While a run writes the folder it holds
an exclusive `flock` on `.flnet.lock` there, so a second run into the same folder is refused,
naming the process that holds it; the lock ends with the process, even one killed with -9.
A forked child (a multiprocessing worker, a data loader) would share the lock's open file, and
so hold the lock after the run's process died: it closes its copy as it starts (`os.fork`'s
`after_in_child` hook), and the lock file is opened close-on-exec, so no program run holds it.

Every file is written to a temporary name unique to the writer (`.NAME.PID.RANDOM.tmp`) and
renamed into place, so a reader sees the old file or the new one, never half of one, and two
writers never share a temporary file. Temporary files are deleted when a write fails; ones left
by a killed run are deleted by the next run that takes the lock.

A run's summary says `running` from its first checkpoint until it ends; a run killed with -9 (or
a power cut) never replaces it. So readers never show the summary's status as it is: they ask
`run_status`, which calls a `running` summary in a folder whose lock nobody holds `killed`
(`killed_note` says how it was known and how to continue). The files on disk are left as the
run left them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flnet.errors import FlnetError

if TYPE_CHECKING:
    import pandas as pd

LOCK = ".flnet.lock"
CHECKPOINT = "checkpoint.pt"
JOURNAL = "ledger-journal.csv"  # the ledger, appended as the run goes (flnet.sim.ledger)
TABLE_JOURNALS = ("tables-journal-a.bin", "tables-journal-b.bin")  # flnet.journal
TABLES = ("records", "ledger", "partition")
FORMATS = ("parquet", "csv")
RUN_FILES = (
    "scenario.yaml",
    "summary.json",
    CHECKPOINT,
    JOURNAL,
    *TABLE_JOURNALS,
    *(f"{t}.{f}" for t in TABLES for f in FORMATS),
)
RUNNING = "running"  # a summary's status while its run goes on (written at each checkpoint)
KILLED = "killed"  # what readers show for a running summary whose folder nobody locks
LOCK_WAIT_S = 0.2  # how long a new run waits for a lock held briefly by a reader's probe
_TMP = re.compile(r"^\.(?P<name>.+)\.\d+\.[0-9a-f]+\.tmp$")
_LEGACY_TMP = tuple(f"{name}.tmp" for name in RUN_FILES)  # names older versions wrote to


class WriteError(FlnetError):
    """A results file could not be written; the message says which, why, and what was kept."""


# ---------------------------------------------------------------------- the folder


class Folder:
    """An open results folder: its absolute path and the lock this process holds on it."""

    def __init__(self, path: Path, lock_fd: int, made: list[Path]) -> None:
        self.path = path
        self._lock_fd: int | None = lock_fd
        self.made = made  # the folders created for it, outermost first
        _HELD.add(self)

    def discard_if_unused(self) -> None:
        """Remove the folders made for this run when nothing but the lock was written there
        (a run refused before it started leaves nothing behind)."""
        if self.made and [e.name for e in os.scandir(self.path)] == [LOCK]:
            with contextlib.suppress(OSError):
                os.unlink(self.path / LOCK)
                for part in reversed(self.made):
                    os.rmdir(part)
        self.release()

    def release(self) -> None:
        _HELD.discard(self)
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def _forget_in_child(self) -> None:
        """In a forked child: close this process's copy of the lock's descriptor, so the lock
        is the parent's alone (an flock belongs to the open file, which fork shares, and lasts
        until its last descriptor closes); never unlock, which would unlock the parent's."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD: set[Folder] = set()  # the folders this process has locked and not released


def _drop_locks_in_forked_child() -> None:
    for folder in list(_HELD):
        folder._forget_in_child()
    _HELD.clear()


os.register_at_fork(after_in_child=_drop_locks_in_forked_child)


def absolute(path: str | Path) -> Path:
    """The folder as an absolute path, without following symbolic links (a dangling link must
    be reported as one, not as the missing folder it points to)."""
    return Path(os.path.abspath(os.fspath(path)))


def open_folder(path: str | Path, *, resume: bool = False, force: bool = False) -> Folder:
    """Create (if needed) and lock the results folder for a new, resumed or replacing run.

    Refuses, with one FlnetError naming the folder and the cause: a folder that cannot be
    created, one another run is writing, one that holds a run when neither `resume` nor `force`
    is given, and `resume` where there is no checkpoint to resume from.
    """
    if resume and force:
        raise FlnetError(
            "--resume continues the run in the output folder and --force deletes "
            "it: give one of them"
        )
    path = absolute(path)
    if resume and not (path / CHECKPOINT).is_file():
        raise FlnetError(
            f"nothing to resume: {path} has no {CHECKPOINT}"
            + ("" if path.is_dir() else " (the folder does not exist)")
            + "; run without --resume to start afresh"
        )
    made = create(path)
    folder = Folder(path, _lock(path), made)
    try:
        held = holds_run(path)
        if held and not resume and not force:
            # this process holds the lock now, so a run whose summary says running is dead
            killed = _summary_status(path) == RUNNING
            raise FlnetError(
                f"{path} already holds a run "
                + (
                    "that was killed (its summary says running, but no process held the "
                    "folder's lock)"
                    if killed
                    else f"({', '.join(held)})"
                )
                + "; continue it with --resume, "
                "replace it with --force (deletes that run's files), or choose another --out"
            )
        if force:
            for name in held:
                (path / name).unlink()
        remove_temporaries(path)
    except BaseException:
        folder.release()
        raise
    return folder


def holds_run(path: Path) -> list[str]:
    """The run files present in `path` (empty: no run there)."""
    return [name for name in RUN_FILES if os.path.lexists(path / name)]


def create(path: Path) -> list[Path]:
    """mkdir -p with one clear error, creating nothing when it fails part-way (the parents
    it made are removed again); returns the folders it made."""
    made: list[Path] = []
    try:
        for part in [*reversed(path.parents), path]:
            if os.path.lexists(part):
                if part.is_symlink() and not part.exists():
                    raise FlnetError(
                        f"cannot create the output folder {path}: {part} is a "
                        f"symbolic link to {os.readlink(part)}, which does not exist"
                    )
                if not part.is_dir():
                    raise FlnetError(
                        f"cannot create the output folder {path}: {part} exists and is not a folder"
                    )
                continue
            try:
                os.mkdir(part)
            except FileExistsError:  # made by another process since we looked (two sweeps)
                if part.is_dir():
                    continue
                raise
            made.append(part)
        return made
    except OSError as e:
        for part in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(part)
        raise FlnetError(f"cannot create the output folder {path}: {_why(e)}") from None
    except FlnetError:
        for part in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(part)
        raise


def _why(e: OSError) -> str:
    """The cause in words, with the name too long spelled out (the bare errno text does not
    say which part)."""
    if e.errno == errno.ENAMETOOLONG:
        longest = max(Path(e.filename or "").parts or [""], key=len)
        return (
            f"{e.strerror} (a name of {len(longest)} characters; this file system allows "
            f"{_name_max(Path(e.filename or '/').parent)})"
        )
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}"


def _name_max(path: Path) -> int | str:
    for p in (path, *path.parents):
        with contextlib.suppress(OSError):
            return os.pathconf(p, "PC_NAME_MAX")
    return "fewer"


def lock_sweep(path: str | Path) -> Folder:
    """Create (if needed) and lock a sweep's folder for the whole sweep: a second sweep into it
    is refused, naming the process that holds it, until this one ends (the lock ends with the
    process, even one killed with -9). Checking each point's own lock once is not enough:
    two sweeps started together both find every point free."""
    path = absolute(path)
    made = create(path)
    return Folder(path, _lock(path, "flnet sweep"), made)


def _lock(path: Path, writer: str = "flnet run") -> int:
    lock = path / LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise FlnetError(f"cannot write to the output folder {path}: {_why(e)}") from None
    try:
        _flock_waiting(fd)
    except OSError as e:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise FlnetError(
                f"{path} is being written by another {writer} (pid {holder}); "
                "wait for it to end, or choose another --out"
            ) from None
        raise FlnetError(f"cannot lock the output folder {path}: {_why(e)}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _flock_waiting(fd: int) -> None:
    """The exclusive lock, waiting up to LOCK_WAIT_S while it is taken (a reader's
    `lock_holder` probe holds it for microseconds; a run holds it for its whole life)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


# ---------------------------------------------------------------------- what readers show


def lock_holder(path: Path) -> str | None:
    """Who holds the lock of the results folder `path` now: the pid written in the lock file
    ("unknown" when unreadable), None when no process does. Probes with a shared lock on a
    descriptor of its own, released at once; never creates the lock file (a folder without one
    is locked by nobody). When the lock cannot be probed at all, says held: a reader then keeps
    what the summary says rather than call a live run killed."""
    try:  # non-blocking: a FIFO put in the lock's place must not block a reader
        fd = os.open(path / LOCK, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            with contextlib.suppress(OSError):
                return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            return "unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def run_status(path: Path, status: str) -> str:
    """The status a reader shows for a run whose summary in folder `path` says `status`:
    `killed` for `running` when no process holds the folder's lock, else `status` as it is."""
    if status == RUNNING and lock_holder(path) is None:
        return KILLED
    return status


def killed_note(path: Path) -> str:
    """What a reader says about a killed run: how it is known, and how to continue it."""
    how = (
        f"continue it with `flnet run {path / 'scenario.yaml'} --resume`"
        if (path / CHECKPOINT).is_file()
        else "it left no checkpoint: run it again with --force"
    )
    return (
        f"killed: its summary says running, but no process holds {path}'s lock "
        f"(kill -9, a crash or a power cut); its records so far are kept; {how}"
    )


def _summary_status(path: Path) -> str | None:
    """The status written in `path`'s summary.json (None: none, or unreadable)."""
    try:
        status = json.loads((path / "summary.json").read_text()).get("status")
    except (OSError, ValueError, AttributeError):
        return None
    return status if isinstance(status, str) else None


def remove_temporaries(path: Path) -> None:
    """Delete temporary files left by killed writers (call only while holding the lock)."""
    for entry in os.scandir(path):
        if (_TMP.match(entry.name) or entry.name in _LEGACY_TMP) and entry.is_file(
            follow_symlinks=False
        ):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def remove_stale_tables(path: Path, fmt: str) -> None:
    """Delete this run's tables in the other formats (a resumed run that changed
    output.format must not leave the old format's tables beside the new)."""
    for table in TABLES:
        for other in FORMATS:
            if other != fmt:
                with contextlib.suppress(FileNotFoundError):
                    (path / f"{table}.{other}").unlink()


# ---------------------------------------------------------------------- atomic writes


@contextlib.contextmanager
def atomic(
    path: Path, committed: Callable[[], None] | None = None, *, durable: bool = False
) -> Iterator[Path]:
    """A temporary name beside `path`, unique to this writer, to write to; on success it is
    renamed over `path` (with SIGINT/SIGTERM held back for the rename, so what is on disk and
    what the run believes it wrote never disagree), on any failure deleted.

    `durable`: the folder is fsynced right after the rename, so the rename is on disk before
    `committed` runs (the caller fsyncs what it wrote to the temporary file).
    `committed()`, if given, runs right after the rename with the signals still held back (to
    note what is now on disk). Raises OSError as the system gave it: callers say which file and
    what was kept.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        with signals_held():
            os.replace(tmp, path)
            if durable:
                fsync_directory(path.parent)
            if committed is not None:
                committed()
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (a few instructions: a rename and the
    bookkeeping that goes with it).

    Blocking them holds them back from this thread only: the kernel hands a signal for the
    process to another thread that does not block it (a progress bar's refresh thread), and
    Python then runs the handler in the main thread at once, inside the block. So in the main
    thread the Python handlers are also swapped, for the block, for one that notes the signal;
    each noted signal is raised again after it."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    noted: list[int] = []
    swapped: dict[signal.Signals, Any] = {}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        if threading.current_thread() is threading.main_thread():
            for s in sigs:
                if callable(signal.getsignal(s)):  # not SIG_DFL, SIG_IGN or a C handler
                    swapped[s] = signal.signal(s, lambda signum, frame: noted.append(signum))
        yield
    finally:
        for s, handler in swapped.items():
            signal.signal(s, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        for signum in noted:
            signal.raise_signal(signum)


def fsync_directory(path: Path) -> None:
    """Make the names in folder `path` durable (a rename over a file, a file created): fsync
    of the folder itself. A file system that cannot sync a folder (EINVAL) is left as it is."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def os_error(e: BaseException | None) -> OSError | None:
    """The OSError behind an exception, if any (torch.save reports a failed write to a file
    object as a RuntimeError whose context is the OSError)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def write_text(path: Path, text: str) -> None:
    with atomic(path) as tmp:
        tmp.write_text(text)


def summary_text(summary: dict) -> str:
    """summary.json's text: numpy and torch scalars as numbers, anything else JSON has no type
    for as its str."""
    return json.dumps(summary, indent=2, default=_jsonable)


def _jsonable(value: Any) -> Any:
    try:
        return value.item()
    except AttributeError:
        return str(value)


def write_table(df: pd.DataFrame, path: Path) -> None:
    with atomic(path) as tmp:
        if path.suffix == ".csv":
            df.to_csv(tmp, index=False)
        else:
            _write_parquet(df, tmp)


def _write_parquet(df: pd.DataFrame, path: Path) -> None:
    """On one thread (a pool costs more than it saves on tables of this size), and with
    dictionary encoding for labels only: on columns of numbers it saves little space, and its
    hash tables made a process's first ledger write take 15-25 ms instead of 2."""
    import pandas as pd  # start-up speed: the CLI imports this module
    import pyarrow as pa  # start-up speed
    import pyarrow.parquet as pq  # start-up speed

    labels = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    pq.write_table(
        pa.Table.from_pandas(df, preserve_index=False, nthreads=1), path, use_dictionary=labels
    )
