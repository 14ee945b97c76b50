"""Frozen features: every input replaced, once per data set, by a fixed backbone's output.

This is DRDM's Fashion-MNIST setting (Sec. 4.1, Tables 5-6): the last layer of a ResNet18 is
fine-tuned on 512 features while the backbone stays frozen. The paper used ImageNet-pretrained
weights (input resizing and channel handling unstated); flnet cannot download weights, so its
backbones are seeded and random, which keeps the shape of the problem (a 512 -> 10 head, 5,130
parameters, the only thing clients train and send) but not pretrained accuracy:

- `random_relu`: relu(x W + b), W ~ N(0, 1/D) [D, dim], b ~ N(0, 1): random features.
- `resnet18`: flnet's GroupNorm ResNet-18 trunk at torch's default init under `seed`.
- `npz`: features computed elsewhere (e.g. by a pretrained ResNet18), arrays ``x_train``
  [N, F] and ``x_test`` [M, F] in the data set's row order.

Features are standardised with the training set's mean and std, computed once and kept in
memory (`lru_cache`) for later runs in the same process. Clients are charged the head's FLOPs
only: the features count as precomputed (the paper does not say which it did).
"""

from __future__ import annotations

import functools
import zipfile

import numpy as np
import torch

from flnet.base import userfiles
from flnet.errors import DataError
from flnet.learn.data.embedded import Source
from flnet.learn.models import resnet18_trunk, seeded
from flnet.schema import Features, RandomReluFeatures, Resnet18Features


def _random_relu(x: np.ndarray, dim: int, seed: int) -> np.ndarray:
    flat = x.reshape(len(x), -1)
    rng = np.random.default_rng(seed)
    w = rng.normal(0.0, 1.0 / np.sqrt(flat.shape[1]), (flat.shape[1], dim)).astype(np.float32)
    b = rng.normal(0.0, 1.0, dim).astype(np.float32)
    return np.maximum(flat @ w + b, 0.0)


def _resnet18(x: np.ndarray, seed: int, chunk: int = 256) -> np.ndarray:
    with seeded(seed):
        trunk = resnet18_trunk(x.shape[1]).eval()
    with torch.inference_mode():
        return torch.cat(
            [trunk(torch.from_numpy(x[i : i + chunk])) for i in range(0, len(x), chunk)]
        ).numpy()


MAX_FEATURE_BYTES = 16 << 30  # a feature file larger than this is refused before reading


def _npz(path: str, src: Source) -> tuple[np.ndarray, np.ndarray]:
    """x_train [N, F] and x_test [M, F], finite numbers, N and M the data set's rows."""
    field = "data.features.path"
    try:
        error = functools.partial(DataError, field=field)
        with userfiles.open_regular(path, MAX_FEATURE_BYTES, "feature file", error) as handle:
            f = np.load(handle, allow_pickle=False)
            if not isinstance(f, np.lib.npyio.NpzFile):
                raise DataError(
                    f"{path} is a single .npy array, not an .npz archive holding x_train and "
                    "x_test",
                    field=field,
                )
            with f:
                missing = [k for k in ("x_train", "x_test") if k not in f.files]
                if missing:
                    raise DataError(
                        f"{path} has no {' or '.join(missing)} (it holds "
                        f"{', '.join(f.files) or 'no arrays'})",
                        field=field,
                    )
                tr, te = f["x_train"], f["x_test"]
    except FileNotFoundError:
        raise DataError(f"feature file not found: {path}", field=field) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise DataError(f"cannot read features from {path}: {str(e)[:160]}", field=field) from None
    for name, a in (("x_train", tr), ("x_test", te)):
        if a.ndim != 2:
            raise DataError(
                f"{path}: {name} must be [rows, features], it is {list(a.shape)}", field=field
            )
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise DataError(f"{path}: {name} must hold numbers, not {a.dtype}", field=field)
    if tr.shape[1] != te.shape[1] or tr.shape[1] == 0:
        raise DataError(
            f"{path}: x_train has {tr.shape[1]} features a row, x_test {te.shape[1]}", field=field
        )
    if len(tr) != len(src.y_train) or len(te) != len(src.y_test):
        raise DataError(
            f"{path} holds {len(tr)} / {len(te)} feature rows for a data set of "
            f"{len(src.y_train)} / {len(src.y_test)}",
            field=field,
        )
    for name, a in (("x_train", tr), ("x_test", te)):
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a).all():
            row = int(np.flatnonzero(~np.isfinite(a).all(1))[0])
            raise DataError(f"{path}: {name} row {row} holds NaN or infinity", field=field)
    return tr, te


class _Keyed:
    """Hashes as its key, so `lru_cache` keys on the data set's identity, not its arrays."""

    def __init__(self, key: tuple, src: Source) -> None:
        self.key, self.src = key, src

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Keyed) and self.key == other.key


@functools.lru_cache(maxsize=2)
def _backbone_features(
    cfg: RandomReluFeatures | Resnet18Features, keyed: _Keyed
) -> tuple[np.ndarray, np.ndarray]:
    src = keyed.src
    both = np.concatenate([src.x_train, src.x_test])
    if cfg.kind == "random_relu":
        out = _random_relu(both, cfg.dim, cfg.seed)
    elif both.ndim != 4:
        raise DataError(
            f"resnet18 features need image inputs; this data set gives {list(both.shape[1:])}",
            field="data.features.kind",
        )
    else:
        out = _resnet18(both, cfg.seed)
    return _standardised(out[: len(src.x_train)], out[len(src.x_train) :])


def _standardised(tr: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sets shifted and scaled by the training set's per-feature mean and std."""
    tr, te = np.asarray(tr, np.float32), np.asarray(te, np.float32)
    mean, std = tr.mean(0), tr.std(0)
    std = np.where(std > 0, std, 1.0).astype(np.float32)
    return (tr - mean) / std, (te - mean) / std


def apply(cfg: Features, src: Source, src_key: tuple) -> Source:
    """`src` with x_train [N, F] and x_test [M, F] replaced by standardised features.

    `src_key` identifies the data set (the same key, the same rows) for the backbones' cache;
    an npz file is read afresh every time.
    """
    if cfg.kind == "npz":
        tr, te = _standardised(*_npz(cfg.path, src))
    else:
        tr, te = _backbone_features(cfg, _Keyed(src_key, src))
    return src._replace(x_train=tr, x_test=te)
