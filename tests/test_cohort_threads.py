"""A cohort split over threads (`cohort.Trainer.threads`): the same results bit for bit as one
thread, whatever the number of threads, since each call of clients runs the maths it runs alone
(with its own engine buffers) and only the order of the calls changes."""

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from flnet.learn import cohort, optim
from flnet.learn.models import Model

N, C, T, B = 80, 7, 4, 6


def small_cnn() -> Model:
    """A stack `ConvStack` takes (conv, pool, ReLU, Flatten, Linear)."""
    torch.manual_seed(0)
    return Model(
        nn.Sequential(
            nn.Conv2d(1, 3, 3),
            nn.MaxPool2d(2),
            nn.ReLU(),
            nn.Flatten(),
            nn.Linear(3 * 3 * 3, 4),
        ),
        (1, 8, 8),
    )


def trainer(threads: int) -> cohort.Trainer:
    model = small_cnn()
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(N, 1, 8, 8, generator=g), torch.randint(0, 4, (N,), generator=g)
    return cohort.Trainer(model, x, y, threads=threads)


def train(t: cohort.Trainer, path: str = "sequential", **kwargs) -> cohort.CohortResult:
    g = torch.Generator().manual_seed(2)
    params = t.model.init_params() + 0.1 * torch.randn(C, t.model.num_params, generator=g)
    batches = torch.randint(0, N, (C, T, B), generator=g)
    steps = torch.tensor([4, 1, 3, 4, 2, 4, 0])  # uneven: masked steps in every call
    return t.train(params, batches, steps, optim.sgd(0.1, momentum=0.9), path=path, **kwargs)


def assert_identical(a: cohort.CohortResult, b: cohort.CohortResult) -> None:
    for x, y in zip(tree_leaves(tuple(a)), tree_leaves(tuple(b))):
        assert (x is None and y is None) or torch.equal(x, y)


@pytest.mark.parametrize("threads", [2, 3, 16])
def test_split_over_threads_is_bit_identical_to_one_thread(threads):
    """7 clients one a call over 2, 3 or 16 threads (at most 7 used): parameters, momentum,
    losses, counts and snapshots equal one thread's exactly; the hand engine (ConvStack) and,
    for the proximal loss, its `over` form, each with a thread's own buffers."""
    for kwargs in ({"snapshot_at": 2}, {"loss_fn": cohort.ProximalLoss(0.5, torch.zeros(1))}):
        one = train(trainer(1), **kwargs)
        split = trainer(threads)
        assert_identical(train(split, **kwargs), one)
        assert_identical(train(split, **kwargs), one)  # again, with the threads' buffers reused
        assert len(split._copies) == min(threads, C) - 1


def test_calls_of_two_split_with_a_tail_of_single_clients_change_no_bit():
    """Path auto: ConvStack's calls of two clients; over two threads the last two calls go
    one client a call (so the threads finish together): the same bits as one thread."""
    one = train(trainer(1), path="auto")
    split = trainer(2)
    assert split.clients_per_call(C, B, "auto", optim.sgd(0.1)) == 2
    assert cohort._single_tail([(0, 2), (2, 2), (4, 2), (6, 1)], 2) == [
        (0, 2),
        (2, 2),
        (4, 1),
        (5, 1),
        (6, 1),
    ]
    assert_identical(train(split, path="auto"), one)


def test_a_result_still_held_is_never_overwritten_by_the_next_cohort():
    """The trained parameters' tensor is reused for the next split cohort only once nothing
    holds it or a view of it."""
    t = trainer(2)
    first = train(t)
    kept = first.params.clone()
    row = first.params[3]  # a view alone keeps it too
    del first
    second = train(t, snapshot_at=1)
    assert torch.equal(row, kept[3]) and row.data_ptr() != second.params[3].data_ptr()
    del row
    ptr = second.params.data_ptr()
    del second
    assert train(t).params.data_ptr() == ptr  # nothing held it: reused


def test_threads_train_on_the_data_the_trainer_holds_now():
    """`Learner` swaps the trainer's data for each cohort (the clients' own rows): a split
    after the swap trains on the new rows in every thread, as one thread does."""
    one, split = trainer(1), trainer(2)
    train(split)  # the copy is made, holding the first data
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(N, 1, 8, 8, generator=g), torch.randint(0, 4, (N,), generator=g)
    for t in (one, split):
        t.x_data, t.y_data = x, y
    assert_identical(train(split), train(one))


def test_split_moves_the_parameters_as_one_thread_does():
    """Not a vacuous equality: training moved every client with steps, and left the client
    with none where it started."""
    t = trainer(2)
    g = torch.Generator().manual_seed(2)
    start = t.model.init_params() + 0.1 * torch.randn(C, t.model.num_params, generator=g)
    result = train(t)
    moved = (result.params - start).abs().amax(1)
    assert (moved[:6] > 0).all() and moved[6] == 0


def test_one_call_is_not_split_and_the_callers_threads_come_back():
    """A cohort trained in one call (path batched) runs on the caller's thread; after a split,
    torch's intra-op threads are the caller's again."""
    t = trainer(2)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert_identical(train(t, path="batched"), train(trainer(1), path="batched"))
        assert t._copies == []
        train(t)
        assert torch.get_num_threads() == 2 and len(t._copies) == 1
    finally:
        torch.set_num_threads(before)


def test_run_threads_reaches_the_trainer_and_changes_no_record(scenario, monkeypatch):
    """`run.threads` sets the threads a CNN run's cohorts (one or two clients a call on the
    CPU) are split over (one by default). The records are the same bit for bit either way."""
    from flnet import runner

    seen: list[int] = []
    train = cohort.Trainer.train

    def spy(self, *args, **kwargs):
        seen.append(self.threads)
        return train(self, *args, **kwargs)

    monkeypatch.setattr(cohort.Trainer, "train", spy)
    cnn = {"model": {"kind": "cnn_dfl_mnist"}, "clients": {"count": 10}}
    records = {}
    for threads in (None, 3):
        seen.clear()
        run = {"rounds": 2} if threads is None else {"rounds": 2, "threads": threads}
        records[threads] = runner.run(scenario(**cnn, run=run), write=False).records
        assert seen and set(seen) == {threads or 1}
    assert records[3].equals(records[None])
