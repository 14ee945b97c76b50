"""A population whose data is generated on demand: Synthetic(alpha, beta) with its natural
partition, one user per client, made from the client's own random stream when the client takes
part (or is in the evaluation sample). A million registered clients cost their sizes (16 bytes
a client), not their rows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from flnet.learn.data.embedded import (
    one_blas_thread,
    synthetic_client,
    synthetic_sizes,
    synthetic_train_sizes,
)
from flnet.schema import SyntheticConfig


class LazyClients:
    def __init__(
        self,
        cfg: SyntheticConfig,
        num_clients: int,
        sizes_rng: np.random.Generator,
        client_rng: Callable[[int], np.random.Generator],
    ) -> None:
        self.cfg = cfg
        self.num_clients = num_clients
        self.client_rng = client_rng  # k -> client k's own generator
        self.sizes = synthetic_sizes(num_clients, cfg, sizes_rng)  # [N] all rows
        self.train_sizes = synthetic_train_sizes(self.sizes, cfg)  # [N]

    def client(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Client k's rows, x [n_k, D] float32 and y [n_k], its training rows first; the same
        on every call."""
        return synthetic_client(self.cfg, int(self.sizes[k]), self.client_rng(int(k)))

    def train_rows(self, clients: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """The training rows of `clients`, concatenated in their order: x [R, D], y [R]; each
        client's first n_k rows made straight into their place (its test rows are not made)."""
        clients = np.asarray(clients, dtype=np.int64)
        sizes = self.train_sizes[clients]
        ends = np.cumsum(sizes)
        x = np.empty((int(ends[-1]) if len(ends) else 0, self.cfg.num_features), np.float32)
        y = np.empty(len(x), np.int64)
        with one_blas_thread():
            for k, n, end in zip(clients.tolist(), sizes.tolist(), ends.tolist()):
                synthetic_client(
                    self.cfg, n, self.client_rng(k), out=(x[end - n : end], y[end - n : end])
                )
        return x, y
