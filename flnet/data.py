"""Data sets and federated partitions.

A `FederatedData` holds the whole training and test set as tensors on the run's device, and each
client's share as indices into the training set; minibatches are gathered with one index
operation for the whole cohort.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from flnet.errors import ScenarioError
from flnet.rng import Stream, generator, minibatch_generator


@dataclass(frozen=True)
class FederatedData:
    name: str
    x_train: torch.Tensor  # [N, *input_shape] float32
    y_train: torch.Tensor  # [N] int64
    x_test: torch.Tensor  # [M, *input_shape]
    y_test: torch.Tensor  # [M]
    client_indices: list[np.ndarray]  # client k's rows of the training set
    num_classes: int

    @property
    def num_clients(self) -> int:
        return len(self.client_indices)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def num_samples(self) -> np.ndarray:
        """[K] training samples per client."""
        return np.array([len(ix) for ix in self.client_indices])

    def label_histogram(self) -> pd.DataFrame:
        """One row per client: its size and how many samples of each label it holds."""
        labels = self.y_train.cpu().numpy()
        counts = np.stack([np.bincount(labels[ix], minlength=self.num_classes)
                           for ix in self.client_indices])
        df = pd.DataFrame(counts, columns=[f"label_{c}" for c in range(self.num_classes)])
        df.insert(0, "num_samples", counts.sum(1))
        df.insert(0, "client", np.arange(self.num_clients))
        return df


def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's 8x8 digits, features / 16, the fixed stratified 80/20 split of W1."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    return x_tr, y_tr, x_te, y_te


DATASETS = {"digits": digits}


def partition_iid(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """A seeded shuffle cut into `num_clients` near-equal parts (``np.array_split``)."""
    perm = np.random.RandomState(seed).permutation(num_samples)
    return np.array_split(perm, num_clients)


def partition_dirichlet(labels: np.ndarray, num_clients: int, alpha: float, min_size: int,
                        rng: np.random.Generator, max_draws: int = 1000) -> list[np.ndarray]:
    """Label skew (Hsu et al. 2019): class c goes to clients in proportions ~ Dir(alpha 1).

    Draws again until every client holds at least `min_size` samples.
    """
    classes = np.unique(labels)
    for _ in range(max_draws):
        parts: list[list[int]] = [[] for _ in range(num_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            share = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(share) * len(idx)).astype(int)[:-1]
            for k, piece in enumerate(np.split(idx, cuts)):
                parts[k].extend(piece.tolist())
        if min(len(p) for p in parts) >= min_size:
            return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    raise ScenarioError(
        f"no Dirichlet(alpha={alpha}) draw in {max_draws} gave every one of {num_clients} "
        f"clients {min_size} samples; lower min_size, raise alpha or use fewer clients",
        field="data.partition.min_size")


def load(config, num_clients: int, seed: int, device: torch.device) -> FederatedData:
    """Build the scenario's data set and partition it over `num_clients` clients."""
    x_tr, y_tr, x_te, y_te = DATASETS[config.dataset]()
    if num_clients > len(y_tr):
        raise ScenarioError(f"{num_clients} clients but only {len(y_tr)} training samples",
                            field="clients.count")
    part = config.partition
    if part.kind == "iid":
        indices = partition_iid(len(y_tr), num_clients, seed)
    else:
        indices = partition_dirichlet(y_tr, num_clients, part.alpha, part.min_size,
                                      generator(seed, Stream.PARTITION))
    as_t = lambda a, dt: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
    return FederatedData(
        name=config.dataset,
        x_train=as_t(x_tr, torch.float32), y_train=as_t(y_tr, torch.int64),
        x_test=as_t(x_te, torch.float32), y_test=as_t(y_te, torch.int64),
        client_indices=[np.asarray(ix, dtype=np.int64) for ix in indices],
        num_classes=int(max(y_tr.max(), y_te.max()) + 1))


def minibatches(data: FederatedData, clients: np.ndarray, round: int, steps: np.ndarray,
                batch_size: int, seed: int) -> torch.Tensor:
    """[C, max(steps), B] training-set rows, drawn with replacement from each client's share.

    Client k's draw in round t is ``default_rng([seed, t, k]).integers(0, n_k, (steps_k, B))``;
    rows past a client's own step count repeat its last step and are masked by the trainer.
    """
    t_max = int(np.max(steps))
    out = np.empty((len(clients), t_max, batch_size), dtype=np.int64)
    for row, (k, s) in enumerate(zip(clients, steps)):
        own = data.client_indices[k]
        local = minibatch_generator(seed, round, int(k)).integers(0, len(own), (int(s), batch_size))
        out[row, :s] = own[local]
        out[row, s:] = out[row, s - 1]
    return torch.from_numpy(out).to(data.x_train.device)
