"""Data sets that need no download: scikit-learn's digits, FedProx's Synthetic(alpha, beta) and
MNIST-1D from its procedural generator.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from flnet import cache
from flnet.schema import SyntheticConfig


class Source(NamedTuple):
    """A data set before partitioning. x: [N, *input_shape] float32, y: [N] int64."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    train_owner: np.ndarray | None = None  # [N] client that generated each row (natural split)
    test_owner: np.ndarray | None = None  # [M]


SPLIT = ("x", "y", "x_test", "y_test")  # a cached data set's arrays


def _cached_split(path: Path, make: Callable[[], dict[str, np.ndarray]]) -> Source:
    """The 10-class data set whose `SPLIT` arrays `make` returns, read from `path` in the
    user's cache folder (`flnet.cache`) where an earlier run left it; an entry missing,
    unreadable or not a split (arrays missing, rows and labels apart) is made again."""
    arrays = cache.load_arrays(path)
    if (
        arrays is None
        or set(arrays) != set(SPLIT)
        or len(arrays["x"]) != len(arrays["y"])
        or len(arrays["x_test"]) != len(arrays["y_test"])
    ):
        arrays = make()
        cache.save_arrays(path, arrays)
    f32, i64 = (lambda a: np.asarray(a, dtype=np.float32)), (lambda a: np.asarray(a, np.int64))
    return Source(
        f32(arrays["x"]), i64(arrays["y"]), f32(arrays["x_test"]), i64(arrays["y_test"]), 10
    )


@functools.lru_cache(maxsize=1)
def digits() -> Source:
    """scikit-learn's 8x8 digits as [1, 8, 8] images / 16, the fixed stratified 80/20 split of
    W1 (1437 train, 360 test). Parsing the CSV and splitting take a fresh process longer than
    reading the split back, so the split is cached (keyed by scikit-learn's version)."""

    def make() -> dict[str, np.ndarray]:
        from sklearn.datasets import load_digits  # start-up speed: seconds, once per cache
        from sklearn.model_selection import train_test_split  # start-up speed

        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
        split = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
        return dict(zip(("x", "x_test", "y", "y_test"), split))

    path = cache.cache_dir() / "digits" / f"scikit-learn-{version('scikit-learn')}.npz"
    return _cached_split(path, make)


SYNTHETIC_CHUNK_ROWS = 4096  # a client's rows are drawn in float64 this many at a time


def synthetic_sizes(num_clients: int, cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """[N] samples per client of Synthetic(alpha, beta): lognormal(4, 2) + 50, as in the
    authors' generator; drawn for every client at once (8 bytes a client)."""
    return (
        rng.lognormal(cfg.size_log_mean, cfg.size_log_std, num_clients).astype(np.int64)
        + cfg.min_samples
    )


def synthetic_train_sizes(sizes: np.ndarray, cfg: SyntheticConfig) -> np.ndarray:
    """[N] training rows of each client: its first (1 - test_fraction) rows."""
    return ((1 - cfg.test_fraction) * sizes).astype(np.int64)


@functools.cache
def _blas_threads() -> Any:
    return ThreadpoolController()  # scans the loaded libraries: ms, once


def one_blas_thread() -> contextlib.AbstractContextManager:
    """numpy's BLAS on one thread inside (as it was after): generating users one after another.
    A user's labels are one product ``x W_k`` of up to SYNTHETIC_CHUNK_ROWS rows, which
    OpenBLAS splits over threads once the rows pass a few hundred; its threads then spin
    between the products, and a million-client run took far more CPU time than wall time
    (`benchmarks/bench.py --population` prints both; they are now the same). The same bits
    either way: threads split the product's entries, not their sums."""
    return _blas_threads().limit(limits=1, user_api="blas")


def synthetic_client(
    cfg: SyntheticConfig,
    size: int,
    rng: np.random.Generator,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One user of FedProx's Synthetic(alpha, beta) (Li et al., MLSys 2020, Sec. 5.1):
    x [size, D] float32 and y [size] int64, training rows first (rows are drawn in order, so
    its first n rows are the same whatever `size` >= n); written into `out` if given.

    u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k [D, C] and b_k [C] ~ N(u_k, 1); v_k [D] ~ N(B_k, 1);
    x ~ N(v_k, Sigma) with Sigma = diag(j^-1.2); y = argmax(x W_k + b_k). Every draw comes from
    `rng`, the client's own stream, so a client is the same whenever and wherever it is made
    (lazily, for the clients of a round). The paper writes N(0, alpha); the authors' generator
    passes alpha and beta as the standard deviation (``np.random.normal(0, alpha)``), and so do
    we: that is what defines the published Synthetic(0.5, 0.5) and (1, 1) sets.
    """
    d, c = cfg.num_features, cfg.num_classes
    u, b_mean = rng.normal(0.0, cfg.alpha), rng.normal(0.0, cfg.beta)
    w = rng.normal(u, 1.0, (d, c))
    b = rng.normal(u, 1.0, c)
    v = rng.normal(b_mean, 1.0, d)
    sd = np.arange(1, d + 1, dtype=np.float64) ** -0.6  # sqrt of Sigma_jj = j^-1.2
    x, y = (
        out
        if out is not None
        else (np.empty((int(size), d), dtype=np.float32), np.empty(int(size), dtype=np.int64))
    )
    for start in range(0, int(size), SYNTHETIC_CHUNK_ROWS):  # float64 a chunk at a time
        rows = x[start : start + SYNTHETIC_CHUNK_ROWS]
        chunk = v + sd * rng.standard_normal(rows.shape)  # the same draws as in one call
        y[start : start + len(rows)] = np.argmax(chunk @ w + b, axis=1)
        rows[:] = chunk
    return x, y


def synthetic(
    num_clients: int,
    cfg: SyntheticConfig,
    sizes_rng: np.random.Generator,
    client_rng: Callable[[int], np.random.Generator],
) -> Source:
    """Every user of Synthetic(alpha, beta) generated and pooled (for partitions other than
    natural, which re-split the pool; small populations only). `client_rng(k)` is client k's
    stream."""
    sizes = synthetic_sizes(num_clients, cfg, sizes_rng)
    n_train = synthetic_train_sizes(sizes, cfg)
    parts: dict[str, list[np.ndarray]] = {
        "x_train": [],
        "y_train": [],
        "x_test": [],
        "y_test": [],
        "train_owner": [],
        "test_owner": [],
    }
    with one_blas_thread():
        for k in range(num_clients):
            x, y = synthetic_client(cfg, sizes[k], client_rng(k))
            for split, rows in (("train", slice(0, n_train[k])), ("test", slice(n_train[k], None))):
                parts[f"x_{split}"].append(x[rows])
                parts[f"y_{split}"].append(y[rows])
                parts[f"{split}_owner"].append(np.full(len(y[rows]), k, dtype=np.int64))
    cat = {name: np.concatenate(arrays) for name, arrays in parts.items()}
    return Source(num_classes=cfg.num_classes, **cat)


@contextlib.contextmanager
def global_rng_restored() -> Iterator[None]:
    """Put numpy's and Python's global RNG states back afterwards (mnist1d seeds them)."""
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


@functools.lru_cache(maxsize=2)
def mnist1d(num_samples: int, seed: int) -> Source:
    """MNIST-1D (Greydanus 2020) from the package's procedural generator: [40] signals, 10
    classes, its own 80/20 split. ``get_dataset_args`` would download a pickle: never called.

    Generating takes seconds, so the arrays are cached in the user's cache folder
    (`flnet.cache`), keyed by every generator argument and the package's version."""
    from mnist1d.data import get_dataset_args, make_dataset  # start-up speed: imports matplotlib

    args = get_dataset_args()
    args.num_samples, args.seed = num_samples, seed

    def make() -> dict[str, np.ndarray]:
        with global_rng_restored():
            d = make_dataset(args)
        return {k: np.asarray(d[k]) for k in SPLIT}

    return _cached_split(_mnist1d_cache_path(vars(args)), make)


def _mnist1d_cache_path(args: dict) -> Path:
    key = json.dumps(
        {**{k: v for k, v in args.items() if k != "url"}, "mnist1d": version("mnist1d")},
        sort_keys=True,
    )
    return cache.cache_dir() / "mnist1d" / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.npz"
