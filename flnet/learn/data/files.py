"""Real data sets read from files in their standard layout (torchvision's), with opt-in download.

- MNIST, Fashion-MNIST, KMNIST: the four IDX files (``.gz`` or plain) in ``<root>/MNIST/raw``,
  ``<root>/FashionMNIST/raw``, ``<root>/KMNIST/raw``.
- CIFAR-10 / CIFAR-100: the python pickle batches in ``<root>/cifar-10-batches-py`` and
  ``<root>/cifar-100-python``, read with an unpickler that only builds numpy arrays.

Images become float32 in [0, 1]: [N, 1, 28, 28] and [N, 3, 32, 32].
"""

from __future__ import annotations

import codecs
import gzip
import hashlib
import math
import pickle
import shutil
import tarfile
import tempfile
import urllib.request
import zlib
from pathlib import Path
from typing import Any, NamedTuple, cast

import numpy as np

from flnet.base.userfiles import open_bounded
from flnet.errors import DataError
from flnet.learn.data.embedded import Source


class IdxSet(NamedTuple):
    folder: str
    mirrors: tuple[str, ...]
    md5: dict[str, str]  # .gz file name -> md5 of the official file


class CifarSet(NamedTuple):
    folder: str
    url: str
    md5: str  # of the .tar.gz archive
    train: tuple[str, ...]
    test: tuple[str, ...]
    label_key: str
    num_classes: int


IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)

IDX_SETS = {
    "mnist": IdxSet(
        "MNIST/raw",
        ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"),
        dict(
            zip(
                IDX_NAMES,
                (
                    "f68b3c2dcbeaaa9fbdd348bbdeb94873",
                    "d53e105ee54ea40749a09fcbcd1e9432",
                    "9fb629c4189551a2d022fa330f9573f3",
                    "ec29112dd5afa0611ce80d1b7f02629c",
                ),
            )
        ),
    ),
    "fashion_mnist": IdxSet(
        "FashionMNIST/raw",
        ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
        dict(
            zip(
                IDX_NAMES,
                (
                    "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                    "25c81989df183df01b3e8a0aad5dffbe",
                    "bef4ecab320f06d8554ea6380940ec79",
                    "bb300cfdad3c16e7a12a480ee83cd310",
                ),
            )
        ),
    ),
    "kmnist": IdxSet(
        "KMNIST/raw",
        ("http://codh.rois.ac.jp/kmnist/dataset/kmnist/",),
        dict(
            zip(
                IDX_NAMES,
                (
                    "bdb82020997e1d708af4cf47b453dcf7",
                    "e144d726b3acfaa3e44228e80efcd344",
                    "5c965bf0a639b31b8f53240b1b52f4d7",
                    "7320c461ea6c1c855c0b718fb2a4b134",
                ),
            )
        ),
    ),
}

CIFAR_SETS = {
    "cifar10": CifarSet(
        "cifar-10-batches-py",
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "c58f30108f718f92721af3b95e74349a",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        ("test_batch",),
        "labels",
        10,
    ),
    "cifar100": CifarSet(
        "cifar-100-python",
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        "eb9058c3a382ffc7106e4002c42a8d85",
        ("train",),
        ("test",),
        "fine_labels",
        100,
    ),
}

# ---------------------------------------------------------------- IDX

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


MAX_IDX_BYTES = 4 * 2**30  # larger than any data set flnet reads (MNIST's train images: 47 MB)


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (LeCun's format), gzipped or plain: zero, zero, type code, number of
    dimensions; the sizes as big-endian int32; then the values, big-endian, row-major.

    Only as many bytes as the header promises are read (a gzip bomb cannot fill memory), and
    every way the file can be wrong is a `DataError` naming it."""
    try:
        raw_file = open_bounded(path, MAX_IDX_BYTES + 4096, "data file", DataError)
        with raw_file, gzip.GzipFile(fileobj=raw_file) if path.suffix == ".gz" else raw_file as f:
            head = f.read(4)
            if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in _IDX_DTYPES:
                raise DataError(
                    f"{path} is not an IDX file (bad magic number "
                    f"{head.hex() or 'of an empty file'})"
                )
            ndim = head[3]
            dims = f.read(4 * ndim)
            if len(dims) < 4 * ndim:
                raise DataError(f"{path} is truncated: its header promises {ndim} sizes")
            shape = tuple(int(d) for d in np.frombuffer(dims, ">i4"))
            dtype = np.dtype(_IDX_DTYPES[head[2]])
            if ndim == 0 or min(shape) < 0:
                raise DataError(f"{path}: the header gives the shape {list(shape)}")
            size = math.prod(shape) * dtype.itemsize
            if size > MAX_IDX_BYTES:
                raise DataError(
                    f"{path}: the header's shape {list(shape)} means {size:,} "
                    f"bytes, more than any data set flnet reads"
                )
            raw = f.read(size + 1)
    except (OSError, EOFError, zlib.error) as e:
        what = "not a readable gzip file" if path.suffix == ".gz" else "not readable"
        raise DataError(f"{path} is {what}: {e}") from None
    if len(raw) != size:
        state = "truncated" if len(raw) < size else "longer than its header says"
        raise DataError(
            f"{path} is {state}: the header's shape {list(shape)} needs {size:,} "
            f"bytes of values, the file has {len(raw):,}" + ("" if len(raw) < size else " or more")
        )
    return np.frombuffer(raw, dtype, count=math.prod(shape)).reshape(shape)


def check_labels(y: np.ndarray, num_classes: int, where: str) -> None:
    """Labels are integers 0..num_classes-1: anything else would surface later as an error
    deep inside training or evaluation."""
    if len(y) and (y.min() < 0 or y.max() >= num_classes):
        bad = y[(y < 0) | (y >= num_classes)][0]
        raise DataError(
            f"{where}: label {bad} is outside 0..{num_classes - 1} ({num_classes} classes)"
        )


def _idx_file(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def load_idx_set(name: str, root: Path, download: bool) -> Source:
    spec = IDX_SETS[name]
    folder = root / spec.folder
    if download:
        for file, md5 in spec.md5.items():
            if _idx_file(folder, file) is None:
                _fetch([m + file + ".gz" for m in spec.mirrors], folder / f"{file}.gz", md5)
    paths = {file: _idx_file(folder, file) for file in IDX_NAMES}
    missing = [f for f, p in paths.items() if p is None]
    if missing:
        raise missing_error(name, folder, [f"{f}(.gz)" for f in missing])
    x_tr, y_tr, x_te, y_te = (read_idx(cast(Path, paths[f])) for f in IDX_NAMES)  # none missing
    for images, labels in ((IDX_NAMES[0], IDX_NAMES[1]), (IDX_NAMES[2], IDX_NAMES[3])):
        x, y = (x_tr, y_tr) if images == IDX_NAMES[0] else (x_te, y_te)
        if x.ndim != 3:
            raise DataError(
                f"{paths[images]}: images must be [N, height, width], the file "
                f"holds {list(x.shape)}"
            )
        if y.ndim != 1:
            raise DataError(f"{paths[labels]}: labels must be [N], the file holds {list(y.shape)}")
        if len(x) != len(y):
            raise DataError(
                f"{paths[labels]} holds {len(y)} labels for the {len(x)} images of {paths[images]}"
            )
        if not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{paths[labels]}: labels must be integers, not {y.dtype}")
        check_labels(y, 10, str(paths[labels]))
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise DataError(
            f"{paths[IDX_NAMES[0]]} holds {list(x_tr.shape[1:])} images but "
            f"{paths[IDX_NAMES[2]]} holds {list(x_te.shape[1:])}"
        )
    as_images = lambda a: (a.astype(np.float32) / 255.0)[:, None]  # noqa: E731
    return Source(
        as_images(x_tr), y_tr.astype(np.int64), as_images(x_te), y_te.astype(np.int64), 10
    )


# ---------------------------------------------------------------- CIFAR


class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts, lists, strings, numbers and numpy arrays, and refuses anything else.

    The CIFAR batches hold only those; an array pickle names at most numpy's array
    reconstructors, `ndarray`, `dtype`, `scalar`, and ``_codecs.encode`` (protocol-2 bytes).
    """

    _NUMPY_MODULES = {
        "numpy",
        "numpy.core.multiarray",
        "numpy._core.multiarray",
        "numpy.core.numeric",
        "numpy._core.numeric",
    }
    _ARRAY = np.zeros(1)
    _NUMPY_NAMES = {
        "_reconstruct": _ARRAY.__reduce__()[0],
        "_frombuffer": _ARRAY.__reduce_ex__(5)[0],
        "scalar": np.float64(0).__reduce__()[0],
        "ndarray": np.ndarray,
        "dtype": np.dtype,
    }

    def find_class(self, module: str, name: str) -> Any:
        if module in self._NUMPY_MODULES and name in self._NUMPY_NAMES:
            return self._NUMPY_NAMES[name]
        if (module, name) == ("_codecs", "encode"):
            return codecs.encode
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


MAX_CIFAR_BATCH_BYTES = 1 << 30  # CIFAR-100's train batch, the largest: 155 MB


def read_cifar_batch(path: Path) -> dict:
    """One CIFAR python batch: a dict with bytes or str keys, through `_ArraysOnly`."""
    try:
        with open_bounded(path, MAX_CIFAR_BATCH_BYTES, "CIFAR batch", DataError) as f:
            batch = _ArraysOnly(f, encoding="latin1").load()
    except DataError:
        raise
    except Exception as e:
        raise DataError(
            f"{path} is not a CIFAR python batch: {type(e).__name__}: {str(e)[:120]}"
        ) from None
    if not isinstance(batch, dict):
        raise DataError(
            f"{path} is not a CIFAR python batch: it holds a {type(batch).__name__}, not a dict"
        )
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}


CIFAR_ROW = 3 * 32 * 32  # one image: 1024 red, 1024 green, 1024 blue bytes


def cifar_arrays(
    batch: dict, path: Path, label_key: str, num_classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """The batch's images [N, 3072] uint8 and labels [N], checked."""
    for key in ("data", label_key):
        if key not in batch:
            raise DataError(
                f"{path}: the batch has no {key!r} entry (it has "
                f"{', '.join(map(repr, sorted(map(str, batch)))) or 'nothing'})"
            )
    try:
        x, y = np.asarray(batch["data"]), np.asarray(batch[label_key])
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: 'data' or {label_key!r} is not an array: {e}") from None
    if x.ndim != 2 or x.shape[1] != CIFAR_ROW:
        raise DataError(
            f"{path}: 'data' must be [N, {CIFAR_ROW}] (3x32x32 bytes a row), it is {list(x.shape)}"
        )
    if not np.issubdtype(x.dtype, np.integer) or (x.size and (x.min() < 0 or x.max() > 255)):
        raise DataError(f"{path}: 'data' must hold bytes 0..255 ({x.dtype})")
    if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
        raise DataError(
            f"{path}: {label_key!r} must be {len(x)} integer labels, one per row "
            f"of 'data'; it is {list(y.shape)} {y.dtype}"
        )
    check_labels(y, num_classes, str(path))
    return x.astype(np.uint8, copy=False), y.astype(np.int64, copy=False)


def load_cifar_set(name: str, root: Path, download: bool) -> Source:
    spec = CIFAR_SETS[name]
    folder = root / spec.folder
    expected = (*spec.train, *spec.test)
    if download and not all((folder / f).is_file() for f in expected):
        _fetch_archive(spec, root)
    missing = [f for f in expected if not (folder / f).is_file()]
    if missing:
        raise missing_error(name, folder, missing)

    def read(files: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        arrays = [
            cifar_arrays(read_cifar_batch(folder / f), folder / f, spec.label_key, spec.num_classes)
            for f in files
        ]
        x = np.concatenate([a[0] for a in arrays])
        y = np.concatenate([a[1] for a in arrays])
        # x.astype(np.float32) / 255.0 in one pass, into one new array
        images = np.empty((len(x), 3, 32, 32), np.float32)
        return np.divide(x.reshape(images.shape), np.float32(255.0), out=images), y

    (x_tr, y_tr), (x_te, y_te) = read(spec.train), read(spec.test)
    return Source(x_tr, y_tr, x_te, y_te, spec.num_classes)


# ---------------------------------------------------------------- missing files and download


def missing_error(name: str, folder: Path, files: list[str]) -> DataError:
    return DataError(
        f"data set {name!r} not found: {folder} must hold {', '.join(files)}. Put the files "
        f"there (torchvision's layout under data.root), or set data.download: true on a "
        f"machine with network access",
        field="data.root",
    )


def _md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fetch(urls: list[str], dest: Path, md5: str) -> None:
    """Download the first URL that answers to `dest`, checking its md5; nothing is left
    behind on failure."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for url in urls:
        with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
            tmp_path = Path(tmp.name)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp_path, "wb") as f:
                shutil.copyfileobj(response, f)
            got = _md5(tmp_path)
            if got != md5:
                raise DataError(f"{url}: md5 {got}, expected {md5}")
            tmp_path.replace(dest)
            return
        except (OSError, DataError) as e:
            errors.append(f"{url}: {e}")
        finally:
            tmp_path.unlink(missing_ok=True)
    raise DataError(f"could not download {dest.name}: " + "; ".join(errors), field="data.download")


def _fetch_archive(spec: CifarSet, root: Path) -> None:
    archive = root / spec.url.rsplit("/", 1)[1]
    if not archive.is_file():
        _fetch([spec.url], archive, spec.md5)
    with tarfile.open(archive, "r:gz") as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.isfile() and Path(m.name).parts[0] == spec.folder and ".." not in m.name
        ]
        safe: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(root, members=members, **safe)
