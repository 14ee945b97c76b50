"""Data sets: tiny files in the real formats, the embedded generators, frozen features."""

import gzip
import os
import pickle
import random
import struct

import numpy as np
import pytest
import torch

from flnet import rng
from flnet.errors import DataError, ScenarioError
from flnet.learn import data
from flnet.learn.data import embedded, features, files
from flnet.scenario import DataConfig

CPU = torch.device("cpu")


def load(n=4, seed=0, **cfg):
    return data.load(DataConfig.model_validate(cfg), n, seed, CPU)


def write_idx(path, array: np.ndarray, type_code=0x08, gz=False):
    """IDX written by hand: 0, 0, type code, ndim, big-endian int32 sizes, big-endian data."""
    dtype = {0x08: ">u1", 0x0B: ">i2"}[type_code]
    raw = (
        bytes([0, 0, type_code, array.ndim])
        + struct.pack(f">{array.ndim}i", *array.shape)
        + array.astype(dtype).tobytes()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    (gzip.open(f"{path}.gz", "wb") if gz else open(path, "wb")).write(raw)


def tiny_idx_set(folder, rng, gz):
    x_tr = rng.integers(0, 256, (12, 28, 28), dtype=np.uint8)
    x_te = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    y_tr, y_te = np.arange(12) % 10, np.arange(5) % 10
    for name, a in (
        ("train-images-idx3-ubyte", x_tr),
        ("train-labels-idx1-ubyte", y_tr),
        ("t10k-images-idx3-ubyte", x_te),
        ("t10k-labels-idx1-ubyte", y_te),
    ):
        write_idx(folder / name, a, gz=gz)
    return x_tr, y_tr, x_te, y_te


@pytest.mark.parametrize(
    "name,folder,gz",
    [
        ("mnist", "MNIST/raw", False),
        ("fashion_mnist", "FashionMNIST/raw", True),
        ("kmnist", "KMNIST/raw", True),
    ],
)
def test_idx_files_round_trip(tmp_path, name, folder, gz):
    x_tr, y_tr, x_te, y_te = tiny_idx_set(tmp_path / folder, np.random.default_rng(0), gz)
    fed = load(dataset=name, root=str(tmp_path))
    assert fed.input_shape == (1, 28, 28)
    assert torch.equal(fed.x_train[:, 0], torch.tensor(x_tr / 255.0, dtype=torch.float32))
    assert torch.equal(fed.x_test[:, 0], torch.tensor(x_te / 255.0, dtype=torch.float32))
    assert fed.y_train.tolist() == y_tr.tolist() and fed.y_test.tolist() == y_te.tolist()


def test_idx_reader_handles_other_types_and_rejects_garbage(tmp_path):
    a = np.array([[-3, 500], [7, -32000]])
    write_idx(tmp_path / "short", a, type_code=0x0B)
    assert files.read_idx(tmp_path / "short").tolist() == a.tolist()
    (tmp_path / "junk").write_bytes(b"\x12\x34\x56\x78")
    with pytest.raises(DataError, match="not an IDX file"):
        files.read_idx(tmp_path / "junk")
    (tmp_path / "short_cut").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(DataError, match=r"is truncated: the header.s shape \[2, 2\] needs 8 bytes"):
        files.read_idx(tmp_path / "short_cut")


def cifar_batch(rng, n, label_key):
    return {
        b"batch_label": b"tiny",
        label_key: [int(v) for v in rng.integers(0, 10, n)],
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [b"f%d.png" % i for i in range(n)],
    }


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar10_batches_round_trip(tmp_path, protocol):
    """Batches like the originals (bytes keys, Python-2-era protocol 2) and like a new pickle."""
    rng, folder = np.random.default_rng(0), tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {n: cifar_batch(rng, 3, b"labels") for n in names}
    for n, b in batches.items():
        (folder / n).write_bytes(pickle.dumps(b, protocol=protocol))
    fed = load(dataset="cifar10", root=str(tmp_path))
    x = np.concatenate([batches[n][b"data"] for n in names[:5]]).reshape(-1, 3, 32, 32)
    assert fed.input_shape == (3, 32, 32) and fed.num_classes == 10
    assert torch.equal(fed.x_train, torch.tensor(x / 255.0, dtype=torch.float32))
    assert fed.y_train.tolist() == sum((batches[n][b"labels"] for n in names[:5]), [])
    assert fed.y_test.tolist() == batches["test_batch"][b"labels"]


def test_cifar100_uses_fine_labels(tmp_path):
    rng, folder = np.random.default_rng(1), tmp_path / "cifar-100-python"
    folder.mkdir()
    train, test = cifar_batch(rng, 6, b"fine_labels"), cifar_batch(rng, 2, b"fine_labels")
    train[b"coarse_labels"] = [0] * 6
    (folder / "train").write_bytes(pickle.dumps(train, protocol=4))
    (folder / "test").write_bytes(pickle.dumps(test, protocol=4))
    fed = load(n=2, dataset="cifar100", root=str(tmp_path))
    assert fed.num_classes == 100 and fed.y_train.tolist() == train[b"fine_labels"]


class Exploit:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_cifar_reader_refuses_anything_but_arrays(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({b"data": Exploit()}))
    with pytest.raises(DataError, match="refusing to load"):
        files.read_cifar_batch(path)
    assert not (tmp_path / "pwned").exists() and not os.path.exists("pwned")


@pytest.mark.parametrize(
    "name,folder,expected",
    [
        ("kmnist", "KMNIST/raw", ["train-images-idx3-ubyte(.gz)", "t10k-labels-idx1-ubyte(.gz)"]),
        ("cifar10", "cifar-10-batches-py", ["data_batch_1", "data_batch_5", "test_batch"]),
        ("cifar100", "cifar-100-python", ["train", "test"]),
    ],
)
def test_missing_real_data_set_names_the_folder_and_files(tmp_path, name, folder, expected):
    with pytest.raises(DataError) as err:
        load(dataset=name, root=str(tmp_path))
    message = str(err.value)
    assert message.startswith("data.root:") and str(tmp_path / folder) in message
    assert all(f in message for f in expected) and "data.download: true" in message


def test_mnist1d_comes_from_the_generator_and_leaves_global_rngs_alone():
    from mnist1d.data import get_dataset_args, make_dataset

    np.random.seed(123)
    random.seed(123)
    before_np, before_py = np.random.get_state()[1].copy(), random.getstate()
    fed = load(dataset="mnist1d", mnist1d={"num_samples": 200, "seed": 7})
    assert np.array_equal(np.random.get_state()[1], before_np)
    assert random.getstate() == before_py
    args = get_dataset_args()
    args.num_samples, args.seed = 200, 7
    ref = make_dataset(args)
    assert fed.input_shape == (40,) and len(fed.y_train) == 160 and len(fed.y_test) == 40
    assert np.allclose(fed.x_train.numpy(), ref["x"]) and fed.y_test.tolist() == list(ref["y_test"])


def train_x(fed, k):
    """Client k's training inputs of a lazily generated population."""
    x, _ = fed.lazy.client(k)
    return x[: fed.lazy.train_sizes[k]]


def test_synthetic_natural_clients_follow_the_fedprox_generator():
    """Each client's inputs are N(v_k, diag(j^-1.2)); its test rows are its own."""
    cfg = {
        "num_features": 5,
        "size_log_std": 0.0,
        "size_log_mean": 0.0,
        "min_samples": 3999,
        "alpha": 1.0,
        "beta": 1.0,
    }
    fed = load(n=3, dataset="synthetic", synthetic=cfg, partition={"kind": "natural"})
    assert list(fed.num_samples) == [3600] * 3  # lognormal(0, 0) = 1, + 3999, 90% train
    assert [len(ix) for ix in fed.client_test_indices] == [400] * 3
    for k in range(3):
        assert np.allclose(train_x(fed, k).var(0), np.arange(1, 6) ** -1.2, rtol=0.1)
        x, _ = fed.lazy.client(k)  # the test set is the clients' last 10% rows, in order
        assert np.array_equal(fed.x_test.numpy()[fed.client_test_indices[k]], x[3600:])
    means = np.stack([train_x(fed, k).mean(0) for k in range(3)])
    assert means.std(0).mean() > 0.3  # v_k ~ N(B_k, 1) differ between clients


def test_synthetic_client_input_means_spread_with_beta():
    """v_k ~ N(B_k, 1) with B_k ~ N(0, beta): client means spread with std sqrt(1 + beta^2)."""

    def spread(beta):
        fed = load(
            n=60,
            dataset="synthetic",
            synthetic={"beta": beta, "min_samples": 400},
            partition={"kind": "natural"},
        )
        return np.stack([train_x(fed, k).mean(0) for k in range(60)]).std(0).mean()

    assert 0.8 < spread(0.0) < 1.2 and 2.6 < spread(3.0) < 3.8


def test_lazy_synthetic_clients_are_the_same_on_every_call_and_in_any_order():
    """A client is a function of (seed, k) alone: the same rows whenever, in whatever cohort,
    and in a fresh load (what a resumed run does)."""
    kw = dict(n=200, dataset="synthetic", partition={"kind": "natural"})
    fed = load(**kw)
    x5, y5 = fed.lazy.client(5)
    x_again, _ = fed.lazy.client(5)
    assert np.array_equal(x5, x_again)
    xa, ya = fed.cohort_arrays(np.array([5, 17]))
    xb, yb = fed.cohort_arrays(np.array([17, 5]))
    n5, n17 = fed.num_samples[[5, 17]]
    assert np.array_equal(xa[:n5].numpy(), x5[:n5]) and np.array_equal(ya[:n5].numpy(), y5[:n5])
    assert np.array_equal(xa[n5:].numpy(), xb[:n17]) and np.array_equal(yb[n17:], ya[:n5])
    fresh = load(**kw)
    assert np.array_equal(fresh.lazy.client(5)[0], x5)
    assert np.array_equal(fresh.num_samples, fed.num_samples)
    assert not np.array_equal(load(seed=1, **kw).lazy.client(5)[0][:5], x5[:5])


def test_users_made_on_one_blas_thread_are_the_same_and_the_threads_come_back():
    """Generating users holds numpy's BLAS to one thread (its threads spun between the
    users' products, costing CPU time for nothing) and gives it back after; a user of 4096
    rows, whose labels' product OpenBLAS would split over threads, is the same either way: its
    inputs to the bit (the same draws), its labels (argmax of one BLAS product or the other) on
    all but a thousandth of its rows, a tie between two classes rounding another way on
    another BLAS."""
    from threadpoolctl import threadpool_info

    from flnet.scenario import SyntheticConfig

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before, cfg = blas_threads(), SyntheticConfig()
    free = embedded.synthetic_client(cfg, 4096, np.random.default_rng(7))
    with embedded.one_blas_thread():
        assert set(blas_threads()) <= {1}
        held = embedded.synthetic_client(cfg, 4096, np.random.default_rng(7))
    assert blas_threads() == before
    assert np.array_equal(free[0], held[0]) and (free[1] != held[1]).mean() <= 1e-3


def test_lazy_minibatches_select_the_clients_own_training_rows():
    fed = load(n=50, dataset="synthetic", partition={"kind": "natural"})
    cohort = np.array([3, 40, 7])
    x, y = fed.cohort_arrays(cohort)
    rows = data.minibatches(fed, cohort, 2, np.array([4, 4, 4]), 8, seed=0).numpy()
    for pos, k in enumerate(cohort):
        own_x, _ = fed.lazy.client(k)
        local = np.random.default_rng([0, 2, k]).integers(0, fed.num_samples[k], (4, 8))
        assert np.array_equal(x.numpy()[rows[pos]], own_x[local])


def test_a_large_lazy_population_holds_sizes_not_rows():
    """A million synthetic clients: sizes for all, rows only for the evaluation sample's tests."""
    fed = load(n=1_000_000, dataset="synthetic", partition={"kind": "natural"}, eval_clients=100)
    assert fed.num_clients == 1_000_000 and len(fed.x_train) == 0
    assert len(fed.eval_clients) == 100 and len(fed.label_histogram()) == 100
    assert len(fed.x_test) == int((fed.lazy.sizes - fed.lazy.train_sizes)[fed.eval_clients].sum())


def test_random_relu_features_feed_a_5130_parameter_head():
    """DRDM's last-layer setting: 512 features, a 512 -> 10 head of 5,130 parameters."""
    from flnet.learn import models

    fed = load(features={"kind": "random_relu", "dim": 512})
    assert fed.input_shape == (512,)
    x = fed.x_train.numpy()
    assert np.allclose(x.mean(0), 0, atol=1e-4)
    assert np.allclose(x.std(0)[x.std(0) > 0], 1, atol=1e-4)
    model = models.build(type("C", (), {"kind": "logistic"}), fed.input_shape, 10, 0, CPU)
    assert model.num_params == 5130
    again = load(
        features={"kind": "random_relu", "dim": 512}, partition={"kind": "dirichlet", "alpha": 1.0}
    )
    assert torch.equal(again.x_train, fed.x_train)  # same backbone: from the cache


def test_resnet18_features_are_a_frozen_seeded_trunk():
    src = embedded.Source(
        np.random.default_rng(0).random((6, 1, 8, 8), dtype=np.float32),
        np.zeros(6, np.int64),
        np.ones((2, 1, 8, 8), np.float32),
        np.zeros(2, np.int64),
        10,
    )
    cfg = DataConfig.model_validate({"features": {"kind": "resnet18"}}).features
    a = features.apply(cfg, src, ("tiny", 0))
    b = features.apply(cfg.model_copy(update={"seed": 1}), src, ("tiny", 0))
    assert a.x_train.shape == (6, 512) and a.x_test.shape == (2, 512)
    assert not np.allclose(a.x_train, b.x_train)


def test_npz_features_are_read_and_checked(tmp_path):
    path = tmp_path / "f.npz"
    np.savez(path, x_train=np.ones((1437, 3)), x_test=np.zeros((360, 3)))
    fed = load(features={"kind": "npz", "path": str(path)})
    assert fed.input_shape == (3,)
    np.savez(path, x_train=np.ones((5, 3)), x_test=np.zeros((360, 3)))
    with pytest.raises(DataError, match="data.features.path"):
        load(n=3, features={"kind": "npz", "path": str(path)})


def test_more_clients_than_samples_is_a_scenario_error_naming_count_and_share_rows():
    """The field the user set (clients.count) is the one named; share_rows is the way out."""
    with pytest.raises(ScenarioError, match="data.share_rows: true") as e:
        load(n=2000)
    assert e.value.field == "clients.count"
    assert str(e.value).startswith("clients.count: 2000 clients but digits has only ")


def test_shared_rows_give_client_k_the_rows_of_slot_k_mod_rows():
    fed = load(n=5000, share_rows=True)
    alone = load(n=1437)
    views = fed.client_indices
    assert views.slots == 1437 and fed.num_clients == 5000
    for k in (0, 1436, 1437, 2900, 4999):
        assert np.array_equal(views[k], alone.client_indices[k % 1437])
    assert np.array_equal(fed.num_samples, np.resize(alone.num_samples, 5000))
    part = fed.label_histogram()  # one row per slot
    assert list(part.columns[:2]) == ["slot", "num_samples"] and len(part) == 1437
    skewed = {"kind": "dirichlet", "alpha": 0.5}
    fed, alone = load(n=5000, share_rows=100, partition=skewed), load(n=100, partition=skewed)
    assert fed.client_indices.slots == 100
    assert np.array_equal(fed.client_indices[4321], alone.client_indices[21])


def test_a_view_selects_exactly_its_clients_rows():
    """CSR views against the per-client arrays they were built from, one client and many."""
    from flnet.learn.data.views import ClientViews

    rng = np.random.default_rng(0)
    parts = [rng.permutation(100)[:n] for n in (3, 0, 7, 1, 5)]
    views = ClientViews.from_lists(parts)
    for k, p in enumerate(parts):
        assert np.array_equal(views[k], p)
    rows, sizes = views.gather(np.array([4, 0, 1, 4, 2]))
    assert np.array_equal(
        rows, np.concatenate([parts[4], parts[0], parts[2 - 1], parts[4], parts[2]])
    )
    assert list(sizes) == [5, 3, 0, 5, 7]
    shared = ClientViews.from_lists(parts, num_clients=12)
    assert np.array_equal(shared[11], parts[1]) and np.array_equal(shared[8], parts[3])
    subset = ClientViews(views.offsets[:3], views.indices, 1000, owners=np.array([10, 500]))
    assert np.array_equal(subset[500], parts[1]) and np.array_equal(subset[10], parts[0])
    with pytest.raises(KeyError):
        subset.gather(np.array([11]))


def test_download_fetches_checks_md5_and_refuses_a_bad_file(tmp_path, monkeypatch):
    """The download path against a local file:// mirror (no network): good files land in the
    data set's folder, a file whose md5 differs is refused and not kept."""
    import hashlib

    mirror = tmp_path / "mirror"
    x_tr, *_ = tiny_idx_set(mirror, np.random.default_rng(0), gz=True)
    md5 = {n: hashlib.md5((mirror / f"{n}.gz").read_bytes()).hexdigest() for n in files.IDX_NAMES}
    spec = files.IdxSet("MNIST/raw", ("file:///nowhere/", mirror.as_uri() + "/"), md5)
    monkeypatch.setitem(files.IDX_SETS, "mnist", spec)
    fed = load(dataset="mnist", root=str(tmp_path / "data"), download=True)
    assert torch.equal(fed.x_train[:, 0], torch.tensor(x_tr / 255.0, dtype=torch.float32))
    assert sorted(p.name for p in (tmp_path / "data/MNIST/raw").iterdir()) == sorted(
        f"{n}.gz" for n in files.IDX_NAMES
    )
    bad = spec._replace(md5={**md5, "t10k-labels-idx1-ubyte": "0" * 32})
    monkeypatch.setitem(files.IDX_SETS, "mnist", bad)
    with pytest.raises(DataError, match="data.download: .*md5"):
        load(dataset="mnist", root=str(tmp_path / "other"), download=True)
    assert not (tmp_path / "other/MNIST/raw/t10k-labels-idx1-ubyte.gz").exists()


def test_cifar_download_unpacks_only_the_data_set_folder(tmp_path, monkeypatch):
    import hashlib
    import io
    import tarfile

    rng, archive = np.random.default_rng(2), tmp_path / "cifar-10-python.tar.gz"
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    with tarfile.open(archive, "w:gz") as tar:
        for name in [f"cifar-10-batches-py/{n}" for n in names] + ["../escape"]:
            blob = pickle.dumps(cifar_batch(rng, 2, b"labels"), protocol=2)
            info = tarfile.TarInfo(name)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    spec = files.CIFAR_SETS["cifar10"]._replace(
        url=archive.as_uri(), md5=hashlib.md5(archive.read_bytes()).hexdigest()
    )
    monkeypatch.setitem(files.CIFAR_SETS, "cifar10", spec)
    fed = load(n=2, dataset="cifar10", root=str(tmp_path / "data"), download=True)
    assert len(fed.y_train) == 10 and len(fed.y_test) == 2
    assert not (tmp_path / "escape").exists()


def test_mnist1d_is_cached_by_its_arguments_and_a_damaged_entry_is_regenerated(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("FLNET_CACHE_DIR", str(tmp_path))
    embedded.mnist1d.cache_clear()
    first = embedded.mnist1d(100, 3)
    (entry,) = (tmp_path / "mnist1d").glob("*.npz")
    embedded.mnist1d.cache_clear()
    again = embedded.mnist1d(100, 3)  # read from the cache file
    assert all(np.array_equal(a, b) for a, b in zip(first[:4], again[:4]))
    embedded.mnist1d.cache_clear()
    embedded.mnist1d(100, 4)  # another seed, another entry
    assert len(list((tmp_path / "mnist1d").glob("*.npz"))) == 2
    entry.write_bytes(b"damaged")
    embedded.mnist1d.cache_clear()
    healed = embedded.mnist1d(100, 3)
    assert all(np.array_equal(a, b) for a, b in zip(first[:4], healed[:4]))
    assert not list((tmp_path / "mnist1d").glob("*.tmp"))
    embedded.mnist1d.cache_clear()


def test_digits_split_is_cached_and_reads_back_as_scikit_learns(tmp_path, monkeypatch):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    monkeypatch.setenv("FLNET_CACHE_DIR", str(tmp_path))
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    embedded.digits.cache_clear()
    try:
        for how in ("made", "read back", "made again"):
            with monkeypatch.context() as m:
                if how == "read back":  # from the file alone
                    m.setattr("sklearn.datasets.load_digits", None)
                src = embedded.digits()
            assert src.x_train.shape == (1437, 1, 8, 8) and src.x_train.dtype == np.float32, how
            assert src.y_train.dtype == np.int64 and src.num_classes == 10, how
            np.testing.assert_array_equal(src.x_train.reshape(-1, 64), x_tr / 16.0, err_msg=how)
            np.testing.assert_array_equal(src.x_test.reshape(-1, 64), x_te / 16.0, err_msg=how)
            np.testing.assert_array_equal(src.y_train, y_tr, err_msg=how)
            np.testing.assert_array_equal(src.y_test, y_te, err_msg=how)
            (entry,) = (tmp_path / "digits").glob("*.npz")
            if how == "read back":  # a split whose rows and labels disagree is made again
                np.savez(entry, x=src.x_train, y=src.y_train[:5], x_test=src.x_test, y_test=y_te)
            embedded.digits.cache_clear()
        assert not list((tmp_path / "digits").glob("*.tmp"))
    finally:
        embedded.digits.cache_clear()


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    from flnet.cache import cache_dir

    monkeypatch.delenv("FLNET_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "flnet"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "flnet"


# ---------------------------------------------------------------- minibatch draws


@pytest.mark.parametrize("count", [0, 1, 7, 320])
def test_batched_draws_are_numpys_integers_bit_for_bit(count):
    """draws.integers hashes the keys together and replays Lemire's multiply-shift on the raw
    words; it must equal numpy's own default_rng(key).integers for every bound, including
    n = 1 (no draw), n = 2**32 (the word itself) and n = 3 * 2**30, where a quarter of the
    words are rejected and numpy redraws; for keys of 3 to 6 words and one over 32 bits."""
    from flnet import draws

    bounds = np.array([1, 2, 14, 1437, 2**31 + 1, 3 * 2**30, 2**32 - 1, 2**32])
    bounds = np.concatenate([bounds, np.random.default_rng(3).integers(1, 2**32, 20)])
    for width in (3, 4, 6):
        keys = np.random.default_rng(width).integers(0, 2**32, (len(bounds), width))
        keys[:, 0] = 7  # a seed shared by the cohort, as the run's
        want = np.stack(
            [np.random.default_rng(k.tolist()).integers(0, n, count) for k, n in zip(keys, bounds)]
        )
        assert np.array_equal(draws.integers(keys, bounds, count), want)
        few = draws.BLOCK_MIN_ROWS - 1
        assert np.array_equal(draws.integers(keys[:few], bounds[:few], count), want[:few])
        # a bound above 2**32 (numpy's 64-bit path) among the block's rows
        wide = bounds.copy()
        wide[3] = 2**40
        want[3] = np.random.default_rng(keys[3].tolist()).integers(0, 2**40, count)
        assert np.array_equal(draws.integers(keys, wide, count), want)
    big = np.array([[2**40, 3, k] for k in range(4)])  # a seed of two words: numpy's path
    want = np.stack([np.random.default_rng(k.tolist()).integers(0, 50, count) for k in big])
    assert np.array_equal(draws.integers(big, np.full(4, 50), count), want)
    with pytest.raises(ValueError, match="high"):  # a client without rows: numpy's error
        draws.integers(np.array([[0, 1, 2], [0, 1, 3]]), np.array([5, 0]), 3)


def test_numpys_calls_one_after_another_draw_as_one_call_of_their_sum():
    """What a stream's pick draws in blocks relies on (`patterns._FirstDraws`): numpy's
    ``integers`` calls on one generator in turn give one call's draws, also where Lemire
    rejects words (n = 3 * 2**30: a quarter of them) and after odd-sized calls (PCG64 keeps
    a word's unused half for the next call)."""
    keys = np.random.default_rng(9).integers(0, 2**32, (8, 3))
    for n in (300, 3 * 2**30, 2**32):
        for sizes in ((16, 32), (3, 5, 40)):
            for key in keys.tolist():
                rng = np.random.default_rng(key)
                runs = np.concatenate([rng.integers(0, n, size) for size in sizes])
                one = np.random.default_rng(key).integers(0, n, sum(sizes))
                assert np.array_equal(runs, one), (n, sizes)


@pytest.mark.parametrize("count", [0, 1, 3, 50])
def test_batched_uniforms_are_numpys_random_bit_for_bit(count):
    """draws.uniforms: numpy's default_rng(key).random(count) row by row, for keys of 3 and 4
    words (a stream tag among them) and one over 32 bits (numpy's own path)."""
    from flnet import draws

    for width in (3, 4):
        keys = np.random.default_rng(width).integers(0, 2**32, (30, width))
        keys[:, 1] = 1_000_015
        want = np.stack([np.random.default_rng(k.tolist()).random(count) for k in keys])
        assert np.array_equal(draws.uniforms(keys, count), want)
        few = draws.BLOCK_MIN_ROWS - 1  # numpy's own generators, below the block's size
        assert np.array_equal(draws.uniforms(keys[:few], count), want[:few])
    big = np.array([[2**40, 3, k] for k in range(4)])
    want = np.stack([np.random.default_rng(k.tolist()).random(count) for k in big])
    assert np.array_equal(draws.uniforms(big, count), want)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 9])
def test_seed_states_are_seedsequences_bit_for_bit(width):
    """The cohort's SeedSequence hashes, run as blocks of rows: every key length (shorter
    than the pool, as long, and longer, whose extra words mix into all four)."""
    from flnet import draws

    keys = np.random.default_rng(width).integers(0, 2**32, (9, width))
    want = [np.random.SeedSequence(k.tolist()).generate_state(4, np.uint64) for k in keys]
    assert np.array_equal(draws.seed_states(keys), np.stack(want))


def test_work_keys_are_each_clients_work_key():
    """The cohort's keys built as columns are, row by row, the generator keys `work_rng` uses:
    a round's [seed, t, k], a stream's [seed, WORK, k, count], a second draw's stream key."""
    clients, counts = np.array([4, 0, 5]), np.array([2, 0, 7])
    for work_counts, stream in ((None, None), (counts, None), (None, rng.Stream.DUAL_BATCH)):
        keys = data.work_keys(3, 9, clients, work_counts, stream)
        assert keys.dtype == np.int64
        want = [data.work_key(3, 9, k, row, work_counts, stream) for row, k in enumerate(clients)]
        assert keys.tolist() == want


def test_minibatches_are_each_clients_own_generator_draws():
    """Client k's rows in round t are default_rng([seed, t, k]).integers(0, n_k, (s_k, B)) of
    its own rows; steps past s_k repeat its last step."""
    fed = load(n=6, dataset="digits", partition={"kind": "dirichlet", "alpha": 0.5})
    clients, steps = np.array([4, 0, 5]), np.array([3, 5, 1])
    rows = data.minibatches(fed, clients, 2, steps, 8, seed=1).numpy()
    for pos, (k, s) in enumerate(zip(clients, steps)):
        local = np.random.default_rng([1, 2, k]).integers(0, fed.num_samples[k], (s, 8))
        own = fed.client_indices[k]
        assert np.array_equal(rows[pos, :s], own[local])
        assert (rows[pos, s:] == rows[pos, s - 1]).all()
    counts = np.array([2, 0, 7])  # the stream pattern: keyed by each client's work count
    rows = data.minibatches(fed, clients, 2, steps, 8, seed=1, work_counts=counts).numpy()
    for pos, (k, s) in enumerate(zip(clients, steps)):
        draw = rng.work_generator(1, k, counts[pos]).integers(0, fed.num_samples[k], (s, 8))
        assert np.array_equal(rows[pos, :s], fed.client_indices[k][draw])
