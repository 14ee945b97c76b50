"""A point's input files carried to a machine that cannot read the driver's disk.

A scenario names files by path: an npz features file, availability and capacity traces, and
the real data sets' folder under ``data.root`` (its ``extends`` chain is merged into the point's
scenario before anything is shipped, so it needs nothing). On a cluster the worker nodes may not
share the driver's filesystem, so the driver sends each file's bytes once (`Parcel`; on Ray, one
object in the object store per distinct file, shared by every point) and a worker writes them
into a folder of its node's own (`materialise`), named by the bytes' sha256: a file is written
once per node however many points read it, two workers writing it at once each write a copy of
their own and rename it into place, and a point never sees another file under the same name.
The point's scenario then names those copies instead of the driver's paths.

What a point is (its identity, its summary's input digests) does not change: both come from the
bytes, never from where they lie. The driver writes the point's results and its scenario.yaml
with its own paths (`flnet.ray_cluster`), so the sweep folder is the same as a local sweep's.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flnet.errors import FlnetError
from flnet.scenario import merge, nest

# the fields that name single files a run reads (as `flnet.runner.input_files` lists them)
FILE_FIELDS = ("data.features.path", "clients.availability.path", "clients.capacity_trace.path")
ROOT_FIELD = "data.root"


def _get(tree: dict, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(tree, dict):
            return None
        tree = tree.get(part)  # type: ignore[assignment]
    return tree


def named_files(data: dict) -> dict[str, Path]:
    """{field: path} of the single files the point's scenario `data` reads (relative paths
    against the current directory, as a run reads them)."""
    out = {}
    features = _get(data, "data.features")
    for name in FILE_FIELDS:
        if name == "data.features.path" and not (
            isinstance(features, dict) and features.get("kind") == "npz"
        ):
            continue
        path = _get(data, name)
        if isinstance(path, str):
            out[name] = Path(path).absolute()
    return out


def data_set_folder(data: dict) -> tuple[Path, str] | None:
    """(data.root, the data set's folder inside it) for a real data set whose folder exists
    here; None for an embedded or generated one, or one to be downloaded where it runs."""
    if _get(data, "data.dataset") in ("digits", "synthetic", "mnist1d"):
        return None  # embedded or generated: nothing to read
    from flnet.learn.data import files as data_files  # its package loads torch

    name = _get(data, "data.dataset")
    spec: Any = data_files.IDX_SETS.get(name) or data_files.CIFAR_SETS.get(name)
    root = _get(data, ROOT_FIELD)
    if spec is None or not isinstance(root, str):
        return None
    root_path = Path(root).expanduser().absolute()
    return (root_path, spec.folder) if (root_path / spec.folder).is_dir() else None


def digest_of(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


@dataclass(frozen=True)
class Manifest:
    """Where a point's files go on the worker: `files` (place relative to the node's folder,
    sha256 of the bytes) and `paths` {field: place of what the field names now}."""

    files: tuple[tuple[str, str], ...] = ()
    paths: dict[str, str] = field(default_factory=dict)


@dataclass
class Parcel:
    """The driver's side: each distinct file read and digested once per sweep, its bytes
    handed to `put` once (Ray: `ray.put`); `blobs` maps a digest to what `put` returned."""

    put: Callable[[bytes], Any] = lambda b: b
    blobs: dict[str, Any] = field(default_factory=dict)
    _digests: dict[Path, str] = field(default_factory=dict)

    def _add(self, path: Path, where: str) -> str:
        if path not in self._digests:
            try:
                body = path.read_bytes()
            except OSError as e:
                raise FlnetError(
                    f"{where}: cannot read {path} to send it to the workers: {e.strerror or e}"
                ) from None
            digest = hashlib.sha256(body).hexdigest()
            self._digests[path] = digest
            if digest not in self.blobs:
                self.blobs[digest] = self.put(body)
        return self._digests[path]

    def manifest(self, data: dict) -> Manifest:
        """What the point's scenario `data` reads, added to the parcel."""
        files: list[tuple[str, str]] = []
        paths: dict[str, str] = {}
        for name, path in named_files(data).items():
            digest = self._add(path, name)
            place = f"f-{digest[:32]}/{path.name}"
            files.append((place, digest))
            paths[name] = place
        found = data_set_folder(data)
        if found is not None:
            root, folder = found
            inside = sorted(p for p in (root / folder).rglob("*") if p.is_file())
            tree = [(str(p.relative_to(root)), self._add(p, ROOT_FIELD)) for p in inside]
            tree_digest = hashlib.sha256(repr(tree).encode()).hexdigest()[:32]
            files += [(f"d-{tree_digest}/{rel}", digest) for rel, digest in tree]
            paths[ROOT_FIELD] = f"d-{tree_digest}"
        return Manifest(tuple(files), paths)


def node_folder() -> Path:
    """This node's folder of shipped files (kept between sweeps: named by content)."""
    return Path(tempfile.gettempdir()) / f"flnet-inputs-{os.getuid()}"


def materialise(
    data: dict, manifest: Manifest, fetch: Callable[[str], bytes], folder: Path | None = None
) -> dict:
    """Write the manifest's files that this node lacks into `folder` (`fetch(digest)` gives
    their bytes) and return `data` naming them."""
    folder = node_folder() if folder is None else folder
    for place, digest in manifest.files:
        dest = folder / place
        if dest.is_file():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        tmp.write_bytes(fetch(digest))
        os.replace(tmp, dest)
    for name, place in manifest.paths.items():
        data = merge(data, nest(name, str(folder / place)))
    return data
