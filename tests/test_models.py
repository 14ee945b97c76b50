"""Models: the papers' parameter counts, FLOPs by hand, and batched training per family."""

from types import SimpleNamespace

import pytest
import torch
from tolerance import assert_tensors_close
from torch.func import functional_call
from torch.nn import functional as F

from flnet.errors import ScenarioError
from flnet.learn import cohort, models, optim
from flnet.runner import run

CPU = torch.device("cpu")


def build(kind, shape, classes=10, seed=0):
    cfg = SimpleNamespace(kind=kind, hidden=[16], norm_groups=32)
    return models.build(cfg, shape, classes, seed, CPU)


PAPERS = [  # kind, input, parameters the paper (or its digest, from the paper's table) gives
    ("logistic", (1, 28, 28), 7_850),  # DRDM: linear 784 -> 10 on MNIST
    ("cnn_mcmahan", (1, 28, 28), 1_663_370),  # McMahan et al. 2017, Sec. 3
    ("cnn_dfl_mnist", (1, 28, 28), 20_490),  # DFL Table II, digest dfl_cdfl.md
    ("cnn_dfl_cifar", (3, 32, 32), 576_778),  # DFL Table II, digest dfl_cdfl.md
    ("cnn_tutorial", (3, 32, 32), 62_006),  # block_cyclic.md: the tutorial CNN
    ("cnn_kmnist", (1, 28, 28), 794_310),  # DRDM: 25,417,920 bits / 32 (drdm.md Sec. 4.4)
]


@pytest.mark.parametrize("kind,shape,params", PAPERS, ids=[p[0] for p in PAPERS])
def test_parameter_counts_match_the_papers(kind, shape, params):
    assert build(kind, shape).num_params == params


@pytest.fixture(scope="module")
def resnet():
    return build("resnet18", (3, 32, 32))


def test_resnet18_groupnorm_has_the_cifar_resnet18_size(resnet):
    """OledFL's digest: about 11.2M; the CIFAR ResNet-18 (kuangliu) has 11,173,962 with
    BatchNorm, and GroupNorm has the same affine parameters."""
    assert resnet.num_params == 11_173_962
    assert not list(resnet.module.buffers())


def test_training_flops_of_the_dfl_mnist_cnn_by_hand():
    """MACs: conv1 28*28*16*9, conv2 14*14*32*16*9, dense 1568*10. Forward 2 MACs; backward:
    weight gradients 2 MACs for every layer, input gradients for all but the first layer."""
    conv1, conv2, dense = 28 * 28 * 16 * 9, 14 * 14 * 32 * 16 * 9, 32 * 7 * 7 * 10
    hand = 2 * (conv1 + conv2 + dense) * 2 + 2 * (conv2 + dense)
    assert build("cnn_dfl_mnist", (1, 28, 28)).training_flops_per_sample() == hand == 5_964_672


FAMILIES = [
    ("logistic", (1, 8, 8)),
    ("mlp", (1, 8, 8)),
    ("cnn_mcmahan", (1, 8, 8)),
    ("cnn_dfl_mnist", (1, 8, 8)),
    ("cnn_kmnist", (1, 8, 8)),
    ("cnn_dfl_cifar", (3, 32, 32)),
    ("cnn_tutorial", (3, 32, 32)),
    ("resnet18", (3, 8, 8)),
]


@pytest.mark.parametrize("kind,shape", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_cohort_training_equals_one_client_at_a_time(kind, shape):
    """Two clients, two SGD steps in the batched trainer, against plain autograd per client."""
    torch.manual_seed(0)
    model = build(kind, shape)
    x, y = torch.randn(12, *shape), torch.randint(0, 10, (12,))
    start = model.init_params() + 0.01 * torch.randn(2, model.num_params)
    batches = torch.randint(0, 12, (2, 2, 3))
    lr = 0.1
    res = cohort.Trainer(model, x, y).train(
        start, batches, torch.tensor([2, 2]), optim.sgd(lr), path="batched"
    )
    for c in range(2):
        params = {
            n: p.detach().clone().requires_grad_(True)
            for n, p in model.unflatten(start[c].clone()).items()
        }
        for s in range(2):
            rows = batches[c, s]
            loss = F.cross_entropy(functional_call(model.module, params, (x[rows],)), y[rows])
            grads = torch.autograd.grad(loss, list(params.values()))
            params = {
                n: (p - lr * g).detach().requires_grad_(True)
                for (n, p), g in zip(params.items(), grads)
            }
        ref = torch.cat([p.detach().reshape(-1) for p in params.values()])
        assert_tensors_close(res.params[c], ref)


@pytest.mark.parametrize(
    "kind,shape", [("cnn_kmnist", (40,)), ("cnn_tutorial", (1, 8, 8)), ("resnet18", (3, 7, 7, 1))]
)
def test_a_model_that_cannot_take_the_input_is_a_scenario_error(kind, shape):
    with pytest.raises(ScenarioError, match="model.kind"):
        build(kind, shape)


def test_cnn_from_a_scenario_trains_and_charges_its_flops(scenario):
    """cnn_dfl_mnist on digits' 8x8: MACs conv1 8*8*16*9, conv2 4*4*32*16*9, dense 128*10."""
    res = run(scenario(model={"kind": "cnn_dfl_mnist"}, run={"rounds": 2}), write=False)
    conv1, conv2, dense = 8 * 8 * 16 * 9, 4 * 4 * 32 * 16 * 9, 32 * 2 * 2 * 10
    assert res.summary["training_flops_per_sample"] == 4 * (conv1 + conv2 + dense) + 2 * (
        conv2 + dense
    )
    assert res.summary["model_params"] == 160 + 4640 + 1290
    assert res.records.test_loss.iloc[-1] < res.records.test_loss.iloc[0]


def test_max_pool_2x2_takes_the_largest_of_each_square_by_hand():
    x = torch.tensor(
        [
            [1.0, 5.0, -2.0, 0.5, 9.0],
            [3.0, -1.0, -3.0, -4.0, 8.0],
            [7.0, 2.0, 6.0, float("nan"), 1.0],
        ]
    )
    # floor mode: the odd last row and column are dropped
    out = models.MaxPool2x2()(x.view(1, 1, 3, 5))
    assert out.tolist() == [[[[5.0, 0.5]]]]
    y = x.clone()
    y[1, 2] = float("nan")  # a NaN wins its square, as in max_pool2d
    assert models.MaxPool2x2()(y.view(1, 1, 3, 5))[0, 0, 0, 1].isnan()
    assert F.max_pool2d(y.view(1, 1, 3, 5), 2)[0, 0, 0, 1].isnan()


def test_the_inference_copy_pools_before_relu_and_gives_the_modules_logits():
    """cnn_mcmahan's copy for `predict`: each ReLU, 2x2 max pool pair as MaxPool2x2 then
    ReLU, parameters in the same order; the module's own logits on random images."""
    model = build("cnn_mcmahan", (3, 12, 12))
    names = [type(layer).__name__ for layer in model._predictor]
    assert names[:6] == ["Conv2d", "MaxPool2x2", "ReLU", "Conv2d", "MaxPool2x2", "ReLU"]
    assert names[6:] == [type(layer).__name__ for layer in model.module][6:]
    params = model.init_params() * 1.5  # not the module's own: predict must use these
    x = torch.randn(9, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    expected = functional_call(model.module, model.unflatten(params), (x,))
    assert_tensors_close(model.predict(params, x), expected)
