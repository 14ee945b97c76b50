"""Federated partitions: which training rows each client holds, and its local test rows.

Every function returns a list of int64 index arrays, one per client, and draws only from the
generator it is given (the PARTITION stream), so a partition is a pure function of the seed.

- `iid`: a seeded shuffle cut into equal parts (the W1 convention).
- `dirichlet_per_class`: label skew of Hsu et al. 2019: class c is spread over the clients in
  proportions q_c ~ Dir_N(alpha); client sizes come out unequal.
- `shards`: the pathological split: each client holds exactly k classes, and each class is cut
  into equal shards, one per client holding it (McMahan et al. 2017's shards; OledFL's Path(k)).
- `by_sizes`: quantity skew: client sizes are given (`zipf_sizes`, `lognormal_sizes`); labels are
  iid, or each client's class mixture is p_i ~ Dir_C(alpha) (DRDM's "Zipf and Dirichlet"
  stratified sampling; the DisPFL-style per-client Dirichlet of OledFL when sizes are equal).
- `local_tests`: each client's held-out rows, drawn from the test set in its label proportions.
- `hold_out`: a stratified validation set taken out of the training set before partitioning.
"""

from __future__ import annotations

import numpy as np

from flnet.errors import DataError, ScenarioError


def round_to_total(weights: np.ndarray, total: int) -> np.ndarray:
    """Non-negative integers proportional to `weights` that sum to `total` (largest remainder).

    Each share is floored, then the units left over go to the largest fractional parts
    (the lower index first on ties).
    """
    w = np.asarray(weights, dtype=np.float64)
    exact = w / w.sum() * total
    out = np.floor(exact).astype(np.int64)
    order = np.argsort(-(exact - out), kind="stable")
    out[order[: total - out.sum()]] += 1
    return out


def iid(num_samples: int, num_clients: int, seed: int) -> list[np.ndarray]:
    """A seeded shuffle cut into `num_clients` near-equal parts (``np.array_split``), as W1."""
    perm = np.random.RandomState(seed).permutation(num_samples)
    return np.array_split(perm, num_clients)


def dirichlet_per_class(
    labels: np.ndarray,
    num_clients: int,
    alpha: float,
    min_size: int,
    rng: np.random.Generator,
    max_draws: int = 1000,
) -> list[np.ndarray]:
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
        field="data.partition.min_size",
    )


def shards(
    labels: np.ndarray, num_clients: int, classes_per_client: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Every client holds exactly `classes_per_client` classes, in equal shards.

    The N k class slots are dealt round a random relabelling of the C classes: the client in
    position i (clients in random order) takes positions ik .. ik + k - 1 (mod C), so each
    client's k classes differ and each class is held by floor or ceil of N k / C clients. Each
    class's samples are shuffled and cut into equal shards, one per client that holds it.
    """
    classes = np.unique(labels)
    k = classes_per_client
    if k > len(classes):
        raise ScenarioError(
            f"{k} classes per client but the data set has {len(classes)}",
            field="data.partition.classes_per_client",
        )
    relabel = classes[rng.permutation(len(classes))]
    holders: dict[int, list[int]] = {int(c): [] for c in classes}
    for i, client in enumerate(rng.permutation(num_clients)):
        for j in range(k):
            holders[int(relabel[(i * k + j) % len(classes)])].append(int(client))
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, owners in holders.items():
        idx = rng.permutation(np.flatnonzero(labels == c))
        for owner, piece in zip(owners, np.array_split(idx, len(owners) or 1)):
            parts[owner].append(piece)
    out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
    if min(len(p) for p in out) == 0:
        raise ScenarioError(
            "some classes have fewer samples than the clients that share "
            "them; use fewer clients or more classes per client",
            field="data.partition.classes_per_client",
        )
    return out


def zipf_sizes(total: int, num_clients: int, sigma: float) -> np.ndarray:
    """[N] sizes d_i = d i^-sigma / sum_j j^-sigma (DRDM Sec. 4.1), rounded to sum to d.

    Client 0 is rank 1 (the largest); sigma = 0 gives equal sizes.
    """
    return round_to_total(np.arange(1, num_clients + 1, dtype=np.float64) ** -sigma, total)


def lognormal_sizes(
    total: int, num_clients: int, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """[N] sizes proportional to exp(N(0, sigma^2)) draws, rounded to sum to `total`."""
    return round_to_total(np.exp(sigma * rng.standard_normal(num_clients)), total)


def check_min_size(sizes: np.ndarray, min_size: int) -> None:
    if sizes.min() < min_size:
        raise ScenarioError(
            f"the smallest client gets {sizes.min()} samples, fewer than min_size = {min_size}; "
            f"lower sigma or min_size, or use fewer clients",
            field="data.partition.min_size",
        )


def mixture_counts(
    mixtures: np.ndarray, sizes: np.ndarray, supply: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """[N, C] class counts: client i draws sizes[i] samples from mixtures[i] (rows sum to 1),
    without taking more of class c than supply[c].

    Each pass draws every client's unmet need from its mixture over the classes not yet used
    up; a class asked for more than is left is shared out by a multivariate hypergeometric draw
    (a random subset of the requests), and the unmet rest is drawn again in the next pass.
    """
    counts = np.zeros(mixtures.shape, dtype=np.int64)
    need, left = sizes.astype(np.int64).copy(), supply.astype(np.int64).copy()
    if need.sum() > left.sum():
        raise ValueError("asked for more samples than the data set holds")
    while need.sum() > 0:
        open_ = left > 0
        w = mixtures * open_
        mass = w.sum(1, keepdims=True)
        w = np.where(mass > 0, w / np.where(mass > 0, mass, 1.0), open_ / open_.sum())
        want = np.stack([rng.multinomial(n, row / row.sum()) for n, row in zip(need, w)])
        for c in np.flatnonzero(want.sum(0) > left):
            want[:, c] = rng.multivariate_hypergeometric(want[:, c], left[c])
        counts += want
        left -= want.sum(0)
        need -= want.sum(1)
    return counts


def by_sizes(
    labels: np.ndarray, sizes: np.ndarray, alpha: float | None, rng: np.random.Generator
) -> list[np.ndarray]:
    """Client i gets sizes[i] rows: iid labels (alpha None) or a Dir_C(alpha) class mixture."""
    if alpha is None:
        perm = rng.permutation(len(labels))
        return [np.sort(p) for p in np.split(perm, np.cumsum(sizes)[:-1])]
    classes = np.unique(labels)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in classes]
    mixtures = rng.dirichlet(np.full(len(classes), alpha), size=len(sizes))
    counts = mixture_counts(mixtures, sizes, np.array([len(p) for p in pools]), rng)
    parts: list[list[np.ndarray]] = [[] for _ in sizes]
    for c, pool in enumerate(pools):
        for client, piece in enumerate(np.split(pool, np.cumsum(counts[:, c]))[:-1]):
            parts[client].append(piece)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def local_tests(
    client_indices: list[np.ndarray],
    train_labels: np.ndarray,
    test_labels: np.ndarray,
    fraction: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Client i's local test rows: max(1, round(fraction n_i)) rows of the test set in the
    label proportions of its training share (largest-remainder counts per class).

    Rows are drawn without replacement within a client (with replacement only when a class has
    fewer test rows than asked); clients draw independently, so two clients may share rows.
    Classes absent from the test set are left out and the rest renormalised.
    """
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    pools = [np.flatnonzero(test_labels == c) for c in range(num_classes)]
    available = np.array([len(p) > 0 for p in pools])
    out = []
    for client, idx in enumerate(client_indices):
        hist = np.bincount(train_labels[idx], minlength=num_classes) * available
        if hist.sum() == 0:
            raise DataError(
                f"the test set holds none of client {client}'s classes, so it can "
                f"have no local test split"
            )
        counts = round_to_total(hist, max(1, round(fraction * len(idx))))
        picks = [
            rng.choice(pools[c], counts[c], replace=counts[c] > len(pools[c]))
            for c in np.flatnonzero(counts)
        ]
        out.append(np.sort(np.concatenate(picks)).astype(np.int64))
    return out


def hold_out(
    labels: np.ndarray, fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held) sorted training-row indices: `held` is round(fraction n) rows in the
    training set's label proportions (largest-remainder counts per class), drawn without
    replacement; `kept` is every other row. Tuning on `held` never sees a test row, and no
    client ever trains on a held row."""
    classes, counts = np.unique(labels, return_counts=True)
    take = np.minimum(round_to_total(counts, round(fraction * len(labels))), counts)
    held = np.concatenate(
        [rng.choice(np.flatnonzero(labels == c), k, replace=False) for c, k in zip(classes, take)]
    )
    mask = np.ones(len(labels), dtype=bool)
    mask[held] = False
    return np.flatnonzero(mask).astype(np.int64), np.sort(held).astype(np.int64)
