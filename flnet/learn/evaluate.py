"""Evaluation of one model: test accuracy and loss, and how accuracy spreads over clients.

Per-client accuracy is the global model's accuracy on each client's local test split when the
data has them (``data.local_test_fraction``, or a natural partition's own held-out rows), and
on each client's own training share otherwise, so a skewed partition shows its worst-served
clients either way. It is taken over the data's evaluation sample (`FederatedData.eval_clients`:
every client up to ``data.eval_clients``, else a sample drawn once from the seed), so a
million registered clients cost no more to evaluate than a thousand; records say how many
(``clients_evaluated``). With ``data.validation_fraction`` the records also hold
``validation_accuracy`` and ``validation_loss`` on the held-out training rows.

Gossip runs have one model per node; `Evaluator.nodes` gives the test accuracy of each node's own
model over the same sample (every client is a node there), as its mean and worst.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flnet.learn.data import FederatedData
from flnet.learn.data.views import ClientViews
from flnet.learn.models import Model

METRICS = (
    "test_accuracy",
    "test_loss",
    "client_accuracy_mean",
    "client_accuracy_worst",
    "client_accuracy_p10",
    "client_accuracy_std",
)  # p10: the 10th percentile, interpolated as numpy does; std: population (numpy's ddof=0)


NODE_METRICS = ("node_accuracy_mean", "node_accuracy_worst")

TRUNK_CHUNK_BYTES = 16 << 20
"""On the CPU, a forward pass through a CNN's layers before its first dense one takes as many
rows at a time as keep their largest activation within this many bytes (C1's cnn_mcmahan: a
32x32x32 map, 128 KiB a row, so 128 rows), so that each layer's output is still in cache when
the next one reads it: its 1,000 test images took 0.47 CPU-s in one pass, 0.29-0.32 s in
passes of 64-200 rows (one-off timings)."""

Piece = tuple[torch.Tensor, torch.Tensor | None]  # inputs, and the rows of them to take (None: all)


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """``torch.quantile(values, q)`` of a 1-D tensor by torch's own steps (sort, the ranks
    below and above ``q (n - 1)``, lerp by a tensor weight; NaN if any value is), without
    the checks and broadcasting of its general version, which cost more than all the other
    metrics of an evaluation."""
    ranked = values.sort().values  # NaN sorts last
    if ranked[-1].isnan():
        return ranked[-1]
    rank = q * (len(ranked) - 1)
    below, above = ranked[math.floor(rank)], ranked[math.ceil(rank)]
    return torch.lerp(below, above, torch.tensor(rank - math.floor(rank), dtype=ranked.dtype))


class _Shares(NamedTuple):
    """The rows the evaluation sample's clients are judged on, flat, and whose each is."""

    rows: torch.Tensor  # [R] row indices (training or test set)
    sizes: torch.Tensor  # [E] float64 rows per client
    client_of_row: torch.Tensor  # [R] position in the sample

    @classmethod
    def of(cls, views: ClientViews, clients: np.ndarray, data: FederatedData) -> _Shares:
        rows, sizes = views.gather(clients)
        device = data.x_train.device
        return cls(
            torch.as_tensor(rows, device=device),
            torch.as_tensor(sizes, dtype=torch.float64, device=device),
            torch.as_tensor(np.repeat(np.arange(len(clients)), sizes), device=device),
        )


class Evaluator:
    def __init__(
        self, model: Model, data: FederatedData, chunk: int = 8192, threads: int = 1
    ) -> None:
        self.model = model
        self.data = data
        self.chunk = chunk
        # threads a CNN's trunk passes are spread over, on the CPU with one kernel thread
        # (`_logits_of`): the same logits bit for bit for any number
        self.threads = threads
        self._split: tuple[int, int] | None | Literal[False] = False  # False: not yet known
        self._local_test = data.client_test_indices is not None
        views = data.client_test_indices if self._local_test else data.client_indices
        clients = data.eval_clients
        # lazy data has local test views; eval_clients is set by FederatedData itself
        assert views is not None and clients is not None
        self.clients_evaluated = len(clients)
        # without local tests, every training row's logits when every client is evaluated
        # (each row once), else only the sampled clients' rows
        self._all_rows = self._local_test or len(clients) == data.num_clients
        self._shares: dict[int | None, _Shares] = {None: _Shares.of(views, clients, data)}

    def _shares_in(self, block: int | None) -> _Shares:
        """The evaluation sample's rows in block `block` (block-cyclic data: each client's
        training share is that block's; None: the data's own views, block 0's)."""
        if block not in self._shares:
            assert self.data.blocks is not None and block is not None
            views, clients = self.data.blocks.train[block], self.data.eval_clients
            assert clients is not None  # set by FederatedData
            self._shares[block] = _Shares.of(views, clients, self.data)
        return self._shares[block]

    def _logits(
        self, params: torch.Tensor, x: torch.Tensor, rows: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._logits_of(params, [(x, rows)])[0]

    def _logits_of(self, params: torch.Tensor, pieces: list[Piece]) -> list[torch.Tensor]:
        """Each piece's logits: its rows by `chunk` at a time through the model; on the CPU
        with one kernel thread (`runner.threads_for`: models under 5M parameters), a CNN's
        trunk (the layers before its first dense one) by `TRUNK_CHUNK_BYTES` rows at a time,
        the pieces' passes spread over `threads` threads, then its dense layers by `chunk`
        rows as before. The passes are the same for any number of threads, so are the logits,
        bit for bit. Against passes of `chunk` rows they are the same values, but not always
        the same bits: a convolution kernel may compute a row differently by batch size (its
        algorithm or blocking), which depends on the CPU."""
        on_cpu = pieces[0][0].device.type == "cpu"
        predictor = self.model.predictor(params) if on_cpu else None
        split = None if predictor is None else self._trunk_split(predictor)
        if predictor is None or split is None or torch.get_num_threads() != 1:
            return [
                torch.cat([self.model.predict(params, take(i)) for i in range(0, size, self.chunk)])
                for size, take in map(self._taker, pieces)
            ]
        first_dense, rows_per_pass = split
        layers = list(predictor.children())
        trunk, head = nn.Sequential(*layers[:first_dense]), nn.Sequential(*layers[first_dense:])
        passes = [
            (k, i, take)
            for k, (size, take) in enumerate(map(self._taker, pieces))
            for i in range(0, size, rows_per_pass)
        ]

        def run(job: tuple[int, int, Callable[[int, int], torch.Tensor]]) -> torch.Tensor:
            with torch.no_grad():
                return trunk(job[2](job[1], rows_per_pass))

        workers = min(self.threads, len(passes))
        if workers > 1:
            with ThreadPoolExecutor(workers, thread_name_prefix="flnet-evaluate") as pool:
                features = list(pool.map(run, passes))
        else:
            features = [run(job) for job in passes]
        out = []
        with torch.no_grad():
            for k in range(len(pieces)):
                z = torch.cat([f for (piece, _, _), f in zip(passes, features) if piece == k])
                out.append(
                    torch.cat([head(z[i : i + self.chunk]) for i in range(0, len(z), self.chunk)])
                )
        return out

    def _taker(self, piece: Piece) -> tuple[int, Callable[..., torch.Tensor]]:
        """(rows in the piece, (i, n) -> its rows i to i + n), n `chunk` unless given."""
        x, rows = piece
        if rows is None:
            return len(x), lambda i, n=self.chunk: x[i : i + n]
        return len(rows), lambda i, n=self.chunk: x[rows[i : i + n]]

    def _trunk_split(self, predictor: nn.Module) -> tuple[int, int] | None:
        """(the inference copy's first dense layer, rows a pass through the layers before it
        takes), for a CNN: an nn.Sequential whose layers before its first nn.Linear have
        parameters. None for others (MLPs: nothing there is worth a pass of its own)."""
        if self._split is not False:
            return self._split
        self._split = None
        layers = list(predictor.children())
        if not isinstance(predictor, nn.Sequential):
            return None
        first_dense = next((i for i, layer in enumerate(layers) if isinstance(layer, nn.Linear)), 0)
        if not any(True for layer in layers[:first_dense] for _ in layer.parameters()):
            return None
        largest, z = 0, torch.zeros((1, *self.model.input_shape))
        with torch.no_grad():
            for layer in layers[:first_dense]:
                z = layer(z)
                largest = max(largest, z.numel() * z.element_size())
        self._split = first_dense, max(1, min(self.chunk, TRUNK_CHUNK_BYTES // largest))
        return self._split

    def __call__(self, params: torch.Tensor, block: int | None = None) -> dict[str, float]:
        """params [P] -> accuracy and loss on the test set; client accuracy mean/worst/p10/std
        over the evaluation sample, and its size. With block-cyclic data each client's
        accuracy is on its training share of block `block` (the block in force; None: block
        0), the rows it trains on then."""
        shares = self._shares[None] if block is None else self._shares_in(block)
        y_train = self.data.y_train
        pieces: list[Piece] = [(self.data.x_test, None)]
        if not self._local_test:  # every training row, in place, or the sampled clients' rows
            pieces.append((self.data.x_train, None if self._all_rows else shares.rows))
        logits, *train_logits = self._logits_of(params, pieces)
        test_loss = F.cross_entropy(logits, self.data.y_test)
        test_correct = (logits.argmax(1) == self.data.y_test).double()
        if self._local_test:  # local test rows are test-set rows: reuse their logits
            correct = test_correct[shares.rows]
        elif self._all_rows:  # every row's, then each client's: no copy of the inputs
            correct = (train_logits[0].argmax(1) == y_train).double()[shares.rows]
        else:  # the sampled clients' rows only
            correct = (train_logits[0].argmax(1) == y_train[shares.rows]).double()
        per_client = torch.zeros_like(shares.sizes).index_add_(0, shares.client_of_row, correct)
        per_client /= shares.sizes
        values = torch.stack(
            [
                test_correct.mean(),
                test_loss.double(),
                per_client.mean(),
                per_client.min(),
                quantile(per_client, 0.1),
                per_client.std(correction=0),  # the DRDM paper's spread (its Fig. 1b)
            ]
        ).tolist()
        out = {**dict(zip(METRICS, values)), "clients_evaluated": self.clients_evaluated}
        return {**out, **self.validation(params)}

    def global_train_loss(self, params: torch.Tensor) -> dict[str, float]:
        """The model's mean cross-entropy over every training row (``run.global_train_loss``):
        sum_k (n_k / n) F_k(x), the global objective FedProx's figures plot as training
        loss, by `chunk` rows a forward pass."""
        x, y = self.data.x_train, self.data.y_train
        logits = self._logits(params, x)
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        for i in range(0, len(x), self.chunk):
            part = logits[i : i + self.chunk]
            total += F.cross_entropy(part, y[i : i + self.chunk], reduction="sum").double()
        return {"global_train_loss": float(total) / max(1, len(x))}

    def validation(self, params: torch.Tensor) -> dict[str, float]:
        """Accuracy and loss on the validation rows held out of the training set (none
        without ``data.validation_fraction``): what a hyper-parameter is chosen on."""
        x, y = self.data.x_val, self.data.y_val
        if x is None or y is None:
            return {}
        logits = self._logits(params, x)
        return {
            "validation_accuracy": float((logits.argmax(1) == y).double().mean()),
            "validation_loss": float(F.cross_entropy(logits, y)),
        }

    def blocks(self, models: torch.Tensor) -> dict[str, float]:
        """Block-cyclic data (`data.blocks`): `models` is one model [P] (FedAvg: judged on every
        block) or one predictor per block [M, P]. Predictor m's accuracy on block m's test rows
        (block_m_accuracy), their mean, min and max (the paper's block-averaged accuracy), and
        with predictors each one's accuracy on the whole test set (predictor_m_test_accuracy,
        the digest's block-agnostic diagnostic). No figures for data without blocks."""
        blocks = self.data.blocks
        if blocks is None:
            return {}
        per_block = models.dim() == 2
        out: dict[str, float] = {}
        for m, rows in enumerate(blocks.test):
            params = models[m] if per_block else models
            ix = torch.as_tensor(rows, device=self.data.x_test.device)
            hits = self._logits(params, self.data.x_test, ix).argmax(1) == self.data.y_test[ix]
            out[f"block_{m}_accuracy"] = float(hits.double().mean())
            if per_block:
                logits = self._logits(params, self.data.x_test)
                out[f"predictor_{m}_test_accuracy"] = float(
                    (logits.argmax(1) == self.data.y_test).double().mean()
                )
        accs = [out[f"block_{m}_accuracy"] for m in range(len(blocks.test))]
        out.update(
            block_accuracy_mean=float(np.mean(accs)),
            block_accuracy_min=min(accs),
            block_accuracy_max=max(accs),
        )
        return out

    def nodes(self, x: torch.Tensor) -> dict[str, float]:
        """x [n, P] the nodes' models -> test accuracy of each sampled node's model (the
        evaluation sample's clients), its mean and worst."""
        sample = self.data.eval_clients
        assert sample is not None  # set by FederatedData
        acc = torch.stack(
            [
                (self._logits(x[int(i)], self.data.x_test).argmax(1) == self.data.y_test)
                .double()
                .mean()
                for i in sample
            ]
        )
        return dict(zip(NODE_METRICS, (float(acc.mean()), float(acc.min()))))
