"""The user's cache folder for data flnet can regenerate but need not: `FLNET_CACHE_DIR`, or
`$XDG_CACHE_HOME/flnet`, or `~/.cache/flnet`. Files are written atomically (a temporary file
in the same folder, then renamed), so a killed process never leaves half a file; a cache that
cannot be read or written is skipped, never an error."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    if os.environ.get("FLNET_CACHE_DIR"):
        return Path(os.environ["FLNET_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flnet"


def load_arrays(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a cached .npz file, or None when it is missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except Exception:
        return None


def save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> bool:
    """Write `arrays` to `path` atomically; False (and nothing left behind) on failure."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # mypy matches **arrays to allow_pickle
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return False
