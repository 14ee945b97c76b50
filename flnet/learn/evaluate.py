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
from typing import NamedTuple

import numpy as np
import torch
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
    def __init__(self, model: Model, data: FederatedData, chunk: int = 8192) -> None:
        self.model = model
        self.data = data
        self.chunk = chunk
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
        n = len(x) if rows is None else len(rows)
        take = (
            (lambda i: x[i : i + self.chunk])
            if rows is None
            else (lambda i: x[rows[i : i + self.chunk]])
        )
        return torch.cat([self.model.predict(params, take(i)) for i in range(0, n, self.chunk)])

    def __call__(self, params: torch.Tensor, block: int | None = None) -> dict[str, float]:
        """params [P] -> accuracy and loss on the test set; client accuracy mean/worst/p10/std
        over the evaluation sample, and its size. With block-cyclic data each client's
        accuracy is on its training share of block `block` (the block in force; None: block
        0), the rows it trains on then."""
        shares = self._shares[None] if block is None else self._shares_in(block)
        logits = self._logits(params, self.data.x_test)
        test_loss = F.cross_entropy(logits, self.data.y_test)
        test_correct = (logits.argmax(1) == self.data.y_test).double()
        if self._local_test:  # local test rows are test-set rows: reuse their logits
            correct = test_correct[shares.rows]
        elif self._all_rows:  # every row, in place, then each client's: no copy of the inputs
            correct = (
                self._logits(params, self.data.x_train).argmax(1) == self.data.y_train
            ).double()[shares.rows]
        else:  # the sampled clients' rows only
            correct = (
                self._logits(params, self.data.x_train, shares.rows).argmax(1)
                == self.data.y_train[shares.rows]
            ).double()
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
        total = torch.zeros((), dtype=torch.float64, device=x.device)
        for i in range(0, len(x), self.chunk):
            logits = self.model.predict(params, x[i : i + self.chunk])
            total += F.cross_entropy(logits, y[i : i + self.chunk], reduction="sum").double()
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
