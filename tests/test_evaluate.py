"""Evaluation: accuracy and loss by hand on a tiny linear model, and per-client accuracy on
local test rows or the clients' own training rows."""

import numpy as np
import pytest
import torch
from torch import nn

from flnet.learn.data import FederatedData
from flnet.learn.evaluate import Evaluator, quantile
from flnet.learn.models import Model


def linear_model():
    return Model(nn.Sequential(nn.Linear(2, 2, bias=False)), (2,))


# params [W00, W01, W10, W11]: logits = x W^T; W = identity picks the larger coordinate
IDENTITY = torch.tensor([1.0, 0.0, 0.0, 1.0])


def data(local_test=None):
    x_train = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    y_train = torch.tensor([0, 1, 1, 1])  # row 2 is wrong under IDENTITY
    x_test = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0]])
    y_test = torch.tensor([0, 1, 1])  # row 2 is wrong under IDENTITY
    return FederatedData(
        "toy", x_train, y_train, x_test, y_test, [np.array([0, 1]), np.array([2, 3])], 2, local_test
    )


@pytest.mark.parametrize("n", [1, 2, 10, 11, 37, 100, 101])
@pytest.mark.parametrize("q", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_quantile_is_torchs_bit_for_bit(n, q):
    """The same operations as torch.quantile's (an exact sort, then one lerp by a tensor
    weight), so the same bits on any CPU."""
    g = torch.Generator().manual_seed(n)
    for values in (
        torch.rand(n, generator=g, dtype=torch.float64),
        (torch.rand(n, generator=g, dtype=torch.float64) * 4).round() / 4,  # ties
    ):
        assert quantile(values, q).item() == torch.quantile(values, q).item()
    with_nan = torch.rand(n, generator=g, dtype=torch.float64)
    with_nan[n // 2] = float("nan")  # a client with no rows to judge: 0 / 0
    assert quantile(with_nan, q).isnan() and torch.quantile(with_nan, q).isnan()


def test_accuracy_and_loss_by_hand():
    m = Evaluator(linear_model(), data())(IDENTITY)
    assert m["test_accuracy"] == pytest.approx(2 / 3)
    right, wrong = np.log1p(np.exp(-2.0)), np.log1p(np.exp(2.0))  # CE of logits (2, 0)
    assert m["test_loss"] == pytest.approx((2 * right + wrong) / 3, rel=1e-6)


def test_client_accuracy_uses_the_clients_own_training_rows_without_local_tests():
    m = Evaluator(linear_model(), data())(IDENTITY)
    # client 0: rows 0, 1 both right; client 1: row 2 wrong, row 3 right
    assert m["client_accuracy_mean"] == pytest.approx(0.75)
    assert m["client_accuracy_worst"] == pytest.approx(0.5)
    assert m["client_accuracy_p10"] == pytest.approx(np.quantile([1.0, 0.5], 0.1))
    assert m["client_accuracy_std"] == pytest.approx(0.25)  # np.std([1.0, 0.5]), ddof 0


def test_client_accuracy_uses_local_test_rows_when_there_are_some():
    m = Evaluator(linear_model(), data([np.array([0, 1]), np.array([2])]))(IDENTITY)
    assert m["client_accuracy_mean"] == pytest.approx(0.5)  # 1.0 and 0.0
    assert m["client_accuracy_worst"] == 0.0


def test_chunks_do_not_change_the_figures():
    whole = Evaluator(linear_model(), data())(IDENTITY)
    chunked = Evaluator(linear_model(), data(), chunk=1)(IDENTITY)
    assert chunked == pytest.approx(whole, rel=1e-6)  # other batch shapes: not bit for bit


def test_client_accuracy_std_of_a_run_is_numpys_std_over_the_clients(scenario):
    """A small non-iid run: at every evaluation, the std of the per-client accuracies of the
    model judged, each computed here from the client's own rows."""
    from flnet.runner import build, run

    models = {}

    class Models:
        def on_start(self, world):
            pass

        def on_progress(self, world, progress, stopping):
            models[progress.step] = progress.model.clone()

        def on_end(self, world, reason):
            pass

    sc = scenario(data={"partition": {"kind": "dirichlet", "alpha": 0.3}}, run={"rounds": 2})
    res = run(sc, observers=[Models()], write=False)
    _, learner = build(sc)
    data = learner.data
    for _, row in res.records.iterrows():
        params = models[row["round"]]
        per_client = [
            (learner.model.predict(params, data.x_train[rows]).argmax(1) == data.y_train[rows])
            .double()
            .mean()
            .item()
            for rows in (data.client_indices[k] for k in data.eval_clients)
        ]
        assert np.std(per_client) > 0
        assert row["client_accuracy_std"] == pytest.approx(np.std(per_client), rel=1e-9)


def test_node_accuracy_is_each_nodes_own_model_on_the_test_set():
    """Gossip runs: node 0 holds IDENTITY (2 of 3 test rows right), node 1 the swap (1 of 3)."""
    swap = torch.tensor([0.0, 1.0, 1.0, 0.0])
    m = Evaluator(linear_model(), data()).nodes(torch.stack([IDENTITY, swap]))
    assert m == {
        "node_accuracy_mean": pytest.approx(0.5),
        "node_accuracy_worst": pytest.approx(1 / 3),
    }


def small_cnn_evaluation():
    """A CNN (two 2x2 pools after ReLU) on 6x6 inputs and its data: 53 test rows, 4 clients
    of 10 training rows, and parameters drawn from a seed."""
    g = torch.Generator().manual_seed(3)
    module = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 5, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(5, 6),
        nn.ReLU(),
        nn.Linear(6, 3),
    )
    model = Model(module, (2, 6, 6))
    x_train, x_test = torch.randn(40, 2, 6, 6, generator=g), torch.randn(53, 2, 6, 6, generator=g)
    y_train, y_test = (
        torch.randint(0, 3, (40,), generator=g),
        torch.randint(0, 3, (53,), generator=g),
    )
    shares = [np.arange(10 * k, 10 * k + 10) for k in range(4)]
    fed = FederatedData("toy", x_train, y_train, x_test, y_test, shares, 3)
    return model, fed, torch.randn(model.num_params, generator=g)


@pytest.fixture
def one_kernel_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as runner.threads_for sets it for models under 5M parameters
    yield
    torch.set_num_threads(threads)


def test_cnn_trunk_passes_give_the_same_figures_in_any_number_of_threads(
    one_kernel_thread, monkeypatch
):
    """The trunk (convolutions and pools) by 7 rows a pass (53 test rows: 8 passes), spread
    over 1, 2 or 3 threads: the same figures bit for bit; and those of the module itself (the
    torch kernels' max pool, ReLU before it) on all rows at once, to rounding."""
    from tolerance import PARAM_RTOL, accuracy_close

    model, fed, params = small_cnn_evaluation()
    monkeypatch.setattr("flnet.learn.evaluate.TRUNK_CHUNK_BYTES", 7 * 4 * 6 * 6 * 4)  # 7 rows
    figures = []
    for threads in (1, 2, 3):
        evaluator = Evaluator(model, fed, threads=threads)
        figures.append(evaluator(params))
        assert evaluator._split == (7, 7)  # the first Linear is layer 7; 7 rows a pass
    assert figures[0] == figures[1] == figures[2]
    with torch.no_grad():
        logits = torch.func.functional_call(model.module, model.unflatten(params), (fed.x_test,))
    accuracy = (logits.argmax(1) == fed.y_test).double().mean().item()
    assert accuracy_close(figures[0]["test_accuracy"], accuracy, len(fed.y_test))
    expected_loss = torch.nn.functional.cross_entropy(logits, fed.y_test).item()
    assert figures[0]["test_loss"] == pytest.approx(expected_loss, rel=PARAM_RTOL)


def test_models_without_a_convolutional_trunk_take_whole_chunks(one_kernel_thread):
    mlp = Model(nn.Sequential(nn.Flatten(), nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2)), (2,))
    for model in (linear_model(), mlp):
        evaluator = Evaluator(model, data())
        evaluator(model.init_params())
        assert evaluator._split is None


def test_run_threads_reaches_the_evaluator(scenario):
    from flnet.runner import Run

    sim = Run(
        scenario(model={"kind": "cnn_dfl_mnist"}, run={"rounds": 1, "threads": 3}), write=False
    )
    assert sim.recorder.evaluator.threads == 3
    if sim.learner.data.x_test.device.type == "cpu":  # step 0 was judged by trunk passes
        assert sim.recorder.evaluator._split is not None
