"""What comes from the user, handled safely: a file the user named (a scenario, a trace, a
pickle, a data file) is read only if it is a regular file, and never past a byte limit; a
string the user wrote (a name, a path, a value) is shown with its control characters escaped.

A path can name a device (``/dev/zero`` never ends, ``/dev/urandom`` neither), a FIFO (opening
it blocks until someone writes), a directory or a socket; each is refused by its kind before
it is opened for reading, and once more on the opened descriptor (opened non-blocking, so a
FIFO swapped in between cannot block). The size the file system reports is not trusted (it is
0 for a device and for ``/proc`` files): the limit is counted while reading. Every refusal is
one message naming the file and what is wrong, raised as the caller's error type.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from flnet.errors import FlnetError

MakeError = Callable[[str], Exception]  # the caller's error type, or one with its field bound

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / 2**20:.1f}" if n_bytes < 2**20 else f"{n_bytes / 2**20:.0f}"


def _too_big(path: Path, what: str, limit_bytes: int, size: str) -> str:
    return f"{path} is {size}; a {what} may be at most {limit_bytes >> 20} MiB"


class _Bounded(io.RawIOBase):
    """A raw reader that raises once more than `limit_bytes` have come through."""

    def __init__(self, fd: int, path: Path, limit_bytes: int, what: str, error: MakeError) -> None:
        self._file = io.FileIO(fd, "rb")
        self._path, self._limit, self._what, self._error = path, limit_bytes, what, error
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        n = self._file.readinto(buffer) or 0
        self._read += n
        if self._read > self._limit:
            raise self._error(
                _too_big(self._path, self._what, self._limit, f"over {self._limit >> 20} MiB")
            )
        return n

    def close(self) -> None:
        self._file.close()
        super().close()


def check_regular(path: str | Path, what: str, error: MakeError = FlnetError) -> None:
    """Refuse a missing path, or one that is not a regular file, without opening it."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror}") from None
    except ValueError:  # a NUL character: no file can have that name
        raise error(
            f"{what} path {printable(str(path), lines=False)} holds a NUL character"
        ) from None
    if not stat.S_ISREG(mode):
        raise error(f"{path} is {_kind(mode)}, not a regular file; a {what} must be a file")


def _open_fd(path: Path, what: str, error: MakeError) -> tuple[int, int]:
    """A blocking read descriptor of regular file `path` and its reported size."""
    check_regular(path, what, error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise error(f"{what} not found: {path}") from None
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped since the check above
            raise error(
                f"{path} is {_kind(st.st_mode)}, not a regular file; a {what} must be a file"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def open_regular(
    path: str | Path, limit_bytes: int, what: str, error: MakeError = FlnetError
) -> io.BufferedReader:
    """`path` opened for binary reading (seekable: for readers such as ``np.load`` and
    ``torch.load`` that seek) if it is a regular file whose size is at most `limit_bytes`."""
    path = Path(path)
    fd, size = _open_fd(path, what, error)
    if size > limit_bytes:
        os.close(fd)
        raise error(_too_big(path, what, limit_bytes, f"{_mib(size)} MiB"))
    return os.fdopen(fd, "rb")


def open_bounded(
    path: str | Path, limit_bytes: int, what: str, error: MakeError = FlnetError
) -> io.BufferedReader:
    """`path` opened for binary reading if it is a regular file, raising `error` once more
    than `limit_bytes` are read (or at once when its size already says so)."""
    path = Path(path)
    fd, size = _open_fd(path, what, error)
    if size > limit_bytes:
        os.close(fd)
        raise error(_too_big(path, what, limit_bytes, f"{_mib(size)} MiB"))
    return io.BufferedReader(_Bounded(fd, path, limit_bytes, what, error))


def read_bytes(
    path: str | Path, limit_bytes: int, what: str, error: MakeError = FlnetError
) -> bytes:
    """The whole of a regular file of at most `limit_bytes`."""
    with open_bounded(path, limit_bytes, what, error) as f:
        try:
            return f.read()
        except OSError as e:
            raise error(f"cannot read {path}: {e.strerror}") from None


def read_text(path: str | Path, limit_bytes: int, what: str, error: MakeError = FlnetError) -> str:
    """The whole of a regular UTF-8 file of at most `limit_bytes` (a leading byte-order mark
    dropped: spreadsheets write one)."""
    raw = read_bytes(path, limit_bytes, what, error)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{path} is not UTF-8 text (byte {e.start})") from None


def text_lines(
    path: str | Path, limit_bytes: int, what: str, error: MakeError = FlnetError
) -> Iterator[tuple[int, str]]:
    """(line number, text) of a regular UTF-8 file, read as it goes (a byte-order mark
    dropped), refused clearly once over `limit_bytes` or not UTF-8."""
    f = io.TextIOWrapper(
        open_bounded(path, limit_bytes, what, error), encoding="utf-8-sig", newline=""
    )
    with f:
        try:
            yield from enumerate(f, start=1)
        except UnicodeDecodeError as e:
            raise error(f"{path} is not UTF-8 text ({e.reason})") from None
        except OSError as e:
            raise error(f"cannot read {path}: {e.strerror}") from None


def _escapes() -> dict[int, str]:
    codes = [*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
    return {c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}" for c in codes if c not in (9, 10)}


_CONTROL = _escapes()


def printable(text: str, *, lines: bool = True) -> str:
    """`text` with control characters shown as escapes (ESC as ``\\x1b``): a user's string
    printed to a terminal cannot retitle the window, clear the screen or reorder what follows
    (bidirectional overrides). With `lines` False, newlines are escaped too (a one-line
    message stays one line)."""
    shown = text.translate(_CONTROL)
    return shown if lines else shown.replace("\n", "\\n")
