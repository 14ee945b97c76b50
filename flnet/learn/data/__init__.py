"""Data sets and federated partitions.

A `FederatedData` holds the whole training and test set as tensors on the run's device and each
client's share as a view (`views.ClientViews`: offsets plus one index array into the training
set, and likewise its local test rows into the test set when the scenario asks for them);
minibatches are gathered with one index operation for the whole cohort. Synthetic(alpha, beta)
with its natural partition is instead generated per client when needed (`lazy.LazyClients`):
its training rows exist only for the clients of a round.

More clients than training rows need ``data.share_rows``: the partition is made for as many
slots as there are rows and client k holds slot ``k mod slots``.

``data.validation_fraction`` holds a stratified share of the training set out before
partitioning (stream VALIDATION): the server's validation set, for choosing hyper-parameters
without the test set. ``data.input_scale`` multiplies every input the model sees.

Per-client evaluation uses a sample of the clients (`evaluation_clients`): all of them up to
``data.eval_clients``, else that many drawn once from the EVALUATION stream (seed and N only).

Data sets (``data.dataset``): embedded ones need no download (`embedded`: digits, FedProx's
Synthetic(alpha, beta), MNIST-1D); MNIST, Fashion-MNIST, KMNIST and CIFAR-10/100 are read from
``data.root`` (`files`). Partitions are in `partition`; frozen features in `features`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from flnet import draws
from flnet.errors import ScenarioError
from flnet.learn.data import blocks as blocks_mod
from flnet.learn.data import embedded, features, files, partition
from flnet.learn.data.embedded import Source
from flnet.learn.data.lazy import LazyClients
from flnet.learn.data.views import ClientViews
from flnet.rng import Stream, generator, key_rows, minibatch_key, stream_key, stream_keys
from flnet.schema import DataConfig, Partition

# Sub-streams of Stream.PARTITION; the Hsu Dirichlet split keeps the bare stream. Synthetic
# client k draws from (seed, PARTITION, SYNTHETIC_CLIENT, k), its size from SYNTHETIC.
SIZES, LABELS, LOCAL_TEST, SYNTHETIC, SYNTHETIC_CLIENT = range(5)


def evaluation_clients(seed: int, num_clients: int, size: int) -> np.ndarray:
    """[E] sorted clients whose per-client figures are evaluated: every client when there are
    at most `size`, else `size` of them uniformly without replacement, drawn once from the
    EVALUATION stream, so the sample depends only on the seed and N (numpy's choice takes
    O(size) time and memory here: Floyd's method while size <= N / 50)."""
    if num_clients <= size:
        return np.arange(num_clients, dtype=np.int64)
    return np.sort(generator(seed, Stream.EVALUATION).choice(num_clients, size, replace=False))


@dataclass(frozen=True)
class FederatedData:
    name: str
    x_train: torch.Tensor  # [R, *input_shape] float32 (lazy data: empty; see `cohort_arrays`)
    y_train: torch.Tensor  # [R] int64
    x_test: torch.Tensor  # [M, *input_shape]
    y_test: torch.Tensor  # [M]
    client_indices: ClientViews | None  # client k's rows of the training set (None: lazy)
    num_classes: int
    client_test_indices: ClientViews | None = None  # client k's rows of the test set
    eval_clients: np.ndarray | None = None  # [E] the evaluation sample (None: every client)
    lazy: LazyClients | None = None  # clients generated on demand
    eval_label_counts: np.ndarray | None = None  # lazy: [E, C] training labels of the sample
    x_val: torch.Tensor | None = None  # [V, *input_shape] held out of the training set
    y_val: torch.Tensor | None = None  # [V]
    blocks: blocks_mod.BlockData | None = None  # block-cyclic: each block's views (blocks.py)

    def in_block(self, block: int | None) -> FederatedData:
        """The data as block `block` has it: client k's rows are its block-`block` rows (None,
        or data without blocks: these data)."""
        if block is None or self.blocks is None:
            return self
        return dataclasses.replace(self, client_indices=self.blocks.train[block])

    def __post_init__(self) -> None:
        for name in ("client_indices", "client_test_indices"):
            value = getattr(self, name)
            if isinstance(value, (list, tuple)):  # one array per client (small N, tests)
                object.__setattr__(self, name, ClientViews.from_lists(value))
        if self.eval_clients is None:
            object.__setattr__(self, "eval_clients", np.arange(self.num_clients))

    @property
    def num_clients(self) -> int:
        if self.lazy is not None:
            return self.lazy.num_clients
        assert self.client_indices is not None  # data in memory has its views
        return self.client_indices.num_clients

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @functools.cached_property
    def num_samples(self) -> np.ndarray:
        """[N] training samples per client."""
        if self.lazy is not None:
            return self.lazy.train_sizes
        assert self.client_indices is not None  # data in memory has its views
        return self.client_indices.sizes()

    def cohort_arrays(self, clients: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """x [R, *input], y [R] holding the training rows of `clients`: the whole training set
        for data in memory; for lazy data, the clients' rows generated now, concatenated in the
        order of `clients` (as `minibatches` expects)."""
        if self.lazy is None:
            return self.x_train, self.y_train
        x, y = self.lazy.train_rows(clients)
        device = self.x_train.device
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    def label_histogram(self) -> pd.DataFrame:
        """The partition table, columnar. In memory: one row per client (its size, how many
        samples of each label it holds and, with local test splits, how many test rows it
        has); with shared rows one row per slot (column `slot`: client k holds slot k mod S).
        Lazy data: one row per client of the evaluation sample, whose rows were generated.
        Block-cyclic data: a client's rows change with the block, so one table per block,
        stacked, in column `block` (each client once per block)."""
        if self.blocks is None:
            return self._label_histogram()
        tables = [
            self.in_block(m)._label_histogram().assign(block=m)
            for m in range(len(self.blocks.train))
        ]
        table = pd.concat(tables, ignore_index=True)
        return table[["block", *table.columns[:-1]]]

    def _label_histogram(self) -> pd.DataFrame:
        """`label_histogram` of the rows these data's views hold (one block's)."""
        k = self.num_classes
        if self.lazy is not None:
            clients, label_counts = self.eval_clients, self.eval_label_counts
            assert clients is not None and label_counts is not None  # set for lazy data
            columns = {
                "client": clients,
                "num_samples": self.lazy.train_sizes[clients],
                "num_test_samples": (self.lazy.sizes - self.lazy.train_sizes)[clients],
            }
            columns.update({f"label_{c}": label_counts[:, c] for c in range(k)})
            return pd.DataFrame(columns)
        views = self.client_indices
        assert views is not None  # data in memory has its views
        sizes = np.diff(views.offsets)
        n = views.slots
        labels = self.y_train.cpu().numpy()[views.indices]
        counts = np.bincount(np.repeat(np.arange(n), sizes) * k + labels, minlength=n * k).reshape(
            n, k
        )
        columns = {"slot" if views.shared else "client": np.arange(n), "num_samples": sizes}
        if self.client_test_indices is not None:
            columns["num_test_samples"] = np.diff(self.client_test_indices.offsets)
        columns.update({f"label_{c}": counts[:, c] for c in range(k)})
        return pd.DataFrame(columns)


def source(config: DataConfig, num_clients: int, seed: int) -> tuple[Source, tuple]:
    """The scenario's data set before partitioning, and a key that identifies its rows."""
    name = config.dataset
    if name == "digits":
        return embedded.digits(), (name,)
    if name == "mnist1d":
        cfg = config.mnist1d
        return embedded.mnist1d(cfg.num_samples, cfg.seed), (name, cfg)
    if name == "synthetic":  # pooled, for a partition other than natural
        return (
            embedded.synthetic(
                num_clients,
                config.synthetic,
                generator(seed, Stream.PARTITION, SYNTHETIC),
                synthetic_client_rng(seed),
            ),
            (name, config.synthetic, num_clients, seed),
        )
    root = Path(config.root).expanduser()
    if name in files.IDX_SETS:
        return files.load_idx_set(name, root, config.download), (name, str(root.resolve()))
    return files.load_cifar_set(name, root, config.download), (name, str(root.resolve()))


def synthetic_client_rng(seed: int) -> Callable[[int], np.random.Generator]:
    """k -> synthetic client k's own generator."""
    return functools.partial(generator, seed, Stream.PARTITION, SYNTHETIC_CLIENT)


def split(part: Partition, src: Source, num_slots: int, seed: int) -> list[np.ndarray]:
    """Each slot's training rows under the partition config `part` (a slot is a client unless
    rows are shared)."""
    labels, n = src.y_train, len(src.y_train)
    if part.kind == "iid":
        return partition.iid(n, num_slots, seed)
    if part.kind == "dirichlet":
        return partition.dirichlet_per_class(
            labels, num_slots, part.alpha, part.min_size, generator(seed, Stream.PARTITION)
        )
    if part.kind == "shards":
        return partition.shards(
            labels, num_slots, part.classes_per_client, generator(seed, Stream.PARTITION, LABELS)
        )
    # validated: a natural partition is synthetic's, which is generated per client (load_lazy)
    assert part.kind != "natural"
    if part.kind == "zipf":
        sizes = partition.zipf_sizes(n, num_slots, part.sigma)
    else:
        sizes = partition.lognormal_sizes(
            n, num_slots, part.sigma, generator(seed, Stream.PARTITION, SIZES)
        )
    partition.check_min_size(sizes, part.min_size)
    return partition.by_sizes(labels, sizes, part.alpha, generator(seed, Stream.PARTITION, LABELS))


def load(config: DataConfig, num_clients: int, seed: int, device: torch.device) -> FederatedData:
    """Build the scenario's data set and partition it over `num_clients` clients."""
    eval_clients = evaluation_clients(seed, num_clients, config.eval_clients)
    if config.dataset == "synthetic" and config.partition.kind == "natural":
        return load_lazy(config, num_clients, seed, device, eval_clients)
    src, key = source(config, num_clients, seed)
    if config.features is not None:
        src = features.apply(config.features, src, key)
    src, validation = held_out(config, src, seed)
    block_data = None
    if config.blocks is not None:
        block_data = blocks_mod.split(
            src.y_train, src.y_test, config.blocks.num_blocks, num_clients, seed
        )
        parts = list(block_data.train[0])  # block 0's rows: the data a run starts in
    else:
        parts = [
            np.asarray(ix, dtype=np.int64)
            for ix in split(config.partition, src, num_slots(config, num_clients, src), seed)
        ]
    test_indices = None
    if config.local_test_fraction is not None:
        test_indices = ClientViews.from_lists(
            partition.local_tests(
                parts,
                src.y_train,
                src.y_test,
                config.local_test_fraction,
                generator(seed, Stream.PARTITION, LOCAL_TEST),
            ),
            num_clients,
        )
    # a data file's arrays are this run's own (not cached ones: an embedded set's, features'),
    # so the tensors may take them over without a copy
    own = config.features is None and (
        config.dataset in files.IDX_SETS or config.dataset in files.CIFAR_SETS
    )
    as_t = lambda a, dt: _tensor(a, dt, device, copy=not own)  # noqa: E731
    return FederatedData(
        name=config.dataset,
        x_train=as_t(src.x_train, torch.float32),
        y_train=as_t(src.y_train, torch.int64),
        x_test=as_t(src.x_test, torch.float32),
        y_test=as_t(src.y_test, torch.int64),
        client_indices=ClientViews.from_lists(parts, num_clients),
        num_classes=src.num_classes,
        client_test_indices=test_indices,
        eval_clients=eval_clients,
        x_val=None if validation is None else as_t(validation.x_train, torch.float32),
        y_val=None if validation is None else as_t(validation.y_train, torch.int64),
        blocks=block_data,
    )


def _tensor(
    a: np.ndarray, dtype: torch.dtype, device: torch.device, copy: bool = True
) -> torch.Tensor:
    """A copy of `a` on `device` (without `copy`, `a` itself where it is already of that type
    on the CPU), made by numpy: torch's own copy of an array (`torch.tensor`) runs on its
    thread pool, whose start costs a fresh run milliseconds on a busy machine, more than
    copying the digits takes."""
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    return torch.from_numpy(np.array(a, dtype=np_dtype, copy=copy or None)).to(device)


def held_out(config: DataConfig, src: Source, seed: int) -> tuple[Source, Source | None]:
    """The source the clients share (inputs times ``input_scale``, validation rows taken out)
    and the validation rows as a source's training rows (None without
    ``validation_fraction``)."""
    if config.input_scale != 1.0:
        s = np.float32(config.input_scale)
        src = src._replace(x_train=src.x_train * s, x_test=src.x_test * s)
    if config.validation_fraction is None:
        return src, None
    kept, held = partition.hold_out(
        src.y_train, config.validation_fraction, generator(seed, Stream.VALIDATION)
    )

    def rows(ix: np.ndarray) -> Source:
        owner = None if src.train_owner is None else src.train_owner[ix]
        return src._replace(x_train=src.x_train[ix], y_train=src.y_train[ix], train_owner=owner)

    return rows(kept), rows(held)


def num_slots(config: DataConfig, num_clients: int, src: Source) -> int:
    """How many row groups the partition makes: one per client, unless rows are shared
    (``data.share_rows``: true for as many as rows, a number for that many, never more than
    the clients or the rows)."""
    rows, share = len(src.y_train), config.share_rows
    if share is False and num_clients > rows:
        raise ScenarioError(
            f"{num_clients} clients but {config.dataset} has only {rows} training samples: "
            f"lower clients.count to at most {rows}, or set data.share_rows: true to let "
            f"client k hold the rows of partition slot k mod {rows} (or a number of slots)",
            field="clients.count",
        )
    if share is False or share is True:
        return min(num_clients, rows)
    if share > rows:
        raise ScenarioError(
            f"{share} slots but only {rows} training samples", field="data.share_rows"
        )
    return min(num_clients, share)


def load_lazy(
    config: DataConfig,
    num_clients: int,
    seed: int,
    device: torch.device,
    eval_clients: np.ndarray,
) -> FederatedData:
    """Synthetic(alpha, beta), natural partition: each client generated from its own stream when
    it takes part. The test set is the evaluation sample's own test rows (every client's up to
    ``data.eval_clients``), generated now with their label counts."""
    if config.features is not None:
        raise ScenarioError(
            "frozen features need the whole data set in memory; a natural "
            "synthetic population is generated per client (use another "
            "partition, or no features)",
            field="data.features",
        )
    cfg = config.synthetic
    lazy = LazyClients(
        cfg, num_clients, generator(seed, Stream.PARTITION, SYNTHETIC), synthetic_client_rng(seed)
    )
    xs, ys = [], []
    counts = np.zeros((len(eval_clients), cfg.num_classes), dtype=np.int64)
    with embedded.one_blas_thread():
        for i, k in enumerate(eval_clients.tolist()):
            x, y = lazy.client(k)
            n = lazy.train_sizes[k]
            xs.append(x[n:].copy())  # not a view: the client's training rows are let go
            ys.append(y[n:].copy())
            counts[i] = np.bincount(y[:n], minlength=cfg.num_classes)
    test_sizes = (lazy.sizes - lazy.train_sizes)[eval_clients]
    test_views = ClientViews(
        np.concatenate([[0], np.cumsum(test_sizes)]),
        np.arange(int(test_sizes.sum())),
        num_clients,
        owners=eval_clients,
    )
    as_t = lambda a, dt: torch.as_tensor(a, dtype=dt, device=device)  # noqa: E731
    return FederatedData(
        name=config.dataset,
        x_train=torch.empty((0, cfg.num_features), device=device),
        y_train=torch.empty(0, dtype=torch.int64, device=device),
        x_test=as_t(np.concatenate(xs), torch.float32),
        y_test=as_t(np.concatenate(ys), torch.int64),
        client_indices=None,
        num_classes=cfg.num_classes,
        client_test_indices=test_views,
        eval_clients=eval_clients,
        lazy=lazy,
        eval_label_counts=counts,
    )


def work_key(
    seed: int,
    round: int,
    client: int,
    row: int,
    work_counts: np.ndarray | None,
    stream: Stream | None = None,
) -> list[int]:
    """The `default_rng` key of client `client`'s generator for this work (`work_rng`)."""
    if stream is not None:
        return stream_key(seed, stream, round, client)
    if work_counts is None:
        return minibatch_key(seed, round, client)
    return stream_key(seed, Stream.WORK, client, int(work_counts[row]))


def work_keys(
    seed: int,
    round: int,
    clients: np.ndarray,
    work_counts: np.ndarray | None,
    stream: Stream | None = None,
) -> np.ndarray:
    """[C, L] int64: row i is `work_key` of clients[i] (row i of `work_counts`), as columns."""
    if stream is not None:
        return stream_keys(seed, stream, round, clients)
    if work_counts is None:
        return key_rows(minibatch_key(seed, round, 0)[:-1], clients)  # [seed, round] + client
    return key_rows(stream_key(seed, Stream.WORK), clients, work_counts)


def work_rng(
    seed: int,
    round: int,
    client: int,
    row: int,
    work_counts: np.ndarray | None,
    stream: Stream | None = None,
) -> np.random.Generator:
    """Client `client`'s generator for this work: keyed by (round, client) in round and
    gossip patterns, by (client, its work count) in a stream (`work_counts[row]`); with
    `stream`, by (seed, stream, round, client) (a second draw in a round: DRFA's loss query)."""
    return np.random.default_rng(work_key(seed, round, client, row, work_counts, stream))


def minibatches(
    data: FederatedData,
    clients: np.ndarray,
    round: int,
    steps: np.ndarray,
    batch_size: int,
    seed: int,
    work_counts: np.ndarray | None = None,
    stream: Stream | None = None,
) -> torch.Tensor:
    """[C, max(steps), B] training-set rows, drawn with replacement from each client's share.

    Client k's draw in round t is ``default_rng([seed, t, k]).integers(0, n_k, (steps_k, B))``
    (positions in its own rows; with `work_counts`, from `work_rng`); rows past a client's own
    step count repeat its last step and are masked by the trainer. For lazy data the rows index
    `cohort_arrays(clients)`.
    """
    clients = np.asarray(clients, dtype=np.int64)
    t_max = int(np.max(steps))
    sizes = data.num_samples[clients]
    keys = work_keys(seed, round, clients, work_counts, stream)
    # every client draws t_max * B (its own s_k * B first, as integers(0, n_k, (s_k, B)) would)
    local = draws.integers(keys, sizes, t_max * batch_size)
    local = local.reshape(len(clients), t_max, batch_size)
    for row in np.flatnonzero(np.asarray(steps) < t_max).tolist():
        local[row, steps[row] :] = local[row, steps[row] - 1]
    if data.lazy is None:
        views = data.client_indices
        assert views is not None  # data in memory has its views
        local += views.offsets[views.slot(clients)][:, None, None]  # in place: no temporary
        out = views.indices[local]
    else:
        out = local + np.concatenate([[0], np.cumsum(sizes)[:-1]])[:, None, None]
    return torch.from_numpy(out).to(data.x_train.device)


def own_rows(data: FederatedData, clients: np.ndarray) -> Iterator[np.ndarray]:
    """Each client's rows, one array at a time: of the training set, or for lazy data of
    `cohort_arrays(clients)` (the clients' rows concatenated in their order)."""
    if data.lazy is None:
        views = data.client_indices
        assert views is not None  # data in memory has its views
        return (views[k] for k in clients)
    sizes = data.num_samples[np.asarray(clients, dtype=np.int64)]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return (np.arange(s, s + n) for s, n in zip(starts.tolist(), sizes.tolist()))


def epoch_steps(
    num_samples: np.ndarray, epochs: int, batch_size: int, drop_last: bool
) -> np.ndarray:
    """[C] local steps of E epochs: ceil(n_k / B) * E, or floor(n_k / B) * E with drop_last."""
    per_epoch = num_samples // batch_size if drop_last else -(-num_samples // batch_size)
    return per_epoch * epochs


def epoch_batches(
    data: FederatedData,
    clients: np.ndarray,
    round: int,
    epochs: int,
    batch_size: int,
    drop_last: bool,
    seed: int,
    work_counts: np.ndarray | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """E epochs over each client's share in minibatches drawn without replacement.

    Returns rows [C, max steps, B] and sizes [C, max steps], the samples each step really has:
    every epoch is a fresh permutation ``default_rng([seed, t, k]).permutation(n_k)`` (epoch
    e is the (e+1)-th draw) cut into batches of B; the short last batch of an epoch keeps its
    n_k mod B samples (its unused slots repeat its first row and carry no weight), or is
    dropped with `drop_last`. Steps past a client's own count repeat its last step and are
    masked by the trainer.
    """
    steps = epoch_steps(data.num_samples[clients], epochs, batch_size, drop_last)
    t_max = max(1, int(steps.max()))
    out = np.empty((len(clients), t_max, batch_size), dtype=np.int64)
    sizes = np.empty((len(clients), t_max), dtype=np.int64)
    for row, (k, s, own) in enumerate(zip(clients, steps, own_rows(data, clients))):
        n = len(own)
        full, rest = divmod(n, batch_size)
        per_epoch = full if drop_last or not rest else full + 1
        rng = work_rng(seed, round, int(k), row, work_counts)
        for e in range(epochs):
            perm = own[rng.permutation(n)]
            first = e * per_epoch
            out[row, first : first + full] = perm[: full * batch_size].reshape(full, batch_size)
            sizes[row, first : first + full] = batch_size
            if per_epoch > full:  # the short last batch
                out[row, first + full] = perm[full * batch_size]
                out[row, first + full, :rest] = perm[full * batch_size :]
                sizes[row, first + full] = rest
        if s == 0:  # drop_last on fewer rows than a batch: no step at all
            out[row], sizes[row] = own[0], batch_size
        else:
            out[row, s:], sizes[row, s:] = out[row, s - 1], sizes[row, s - 1]
    return torch.from_numpy(out).to(data.x_train.device), sizes
