"""`kernels.dense.DenseStack` equals its readable path, `cohort.autograd_value_and_grad`
(autograd through the plain module): losses and gradients within tests/tolerance.py's
`assert_tensors_close` (relative 1e-5, absolute 1e-6, float32). Its fused SGD step
(`DenseStack.descend`) is checked through the trainer in tests/test_cohort.py."""

import pytest
import torch
from test_cohort import batches, cnn, dataset, mlp, start
from tolerance import assert_tensors_close
from torch import nn

from flnet.learn import cohort
from flnet.learn.kernels.dense import DenseStack, dense_layers
from flnet.learn.models import Model


@pytest.mark.parametrize("bias", [True, False])
def test_dense_stack_equals_autograd(bias):
    model = mlp(bias)
    layers = dense_layers(model)
    assert layers is not None and [layer.relu for layer in layers] == [True, True, False]
    x, y = dataset(model)
    rows = batches()[:, 0]
    params = start(model)
    fast_loss, fast_grad = DenseStack(layers)(params, x[rows], y[rows])
    loss, grad = cohort.autograd_value_and_grad(model)(params, x[rows], y[rows])
    assert_tensors_close(fast_loss, loss)
    assert_tensors_close(fast_grad, grad)


@pytest.mark.parametrize("bias", [True, False])
def test_dense_stack_of_one_linear_layer_equals_autograd(bias):
    """No hidden layer: the minibatch itself is the logits' input and the weights' factor."""
    torch.manual_seed(0)
    model = Model(nn.Sequential(nn.Flatten(), nn.Linear(12, 3, bias=bias)), (3, 4))
    x, y = dataset(model)
    rows = batches()[:, 0]
    params = start(model)
    fast_loss, fast_grad = DenseStack(dense_layers(model))(params, x[rows], y[rows])
    loss, grad = cohort.autograd_value_and_grad(model)(params, x[rows], y[rows])
    assert_tensors_close(fast_loss, loss)
    assert_tensors_close(fast_grad, grad)


def test_dense_stack_equals_autograd_across_in_place_steps_and_tensors():
    """The stack keeps its views of the last parameter tensor: they must see that tensor's
    in-place steps, and another tensor of the same shape must get its own gradients."""
    model = mlp()
    x, y = dataset(model)
    rows = batches()[:, 0]
    dense = DenseStack(dense_layers(model))
    reference = cohort.autograd_value_and_grad(model)
    params = start(model)
    other = params + 0.05

    def check(p):
        fast_loss, fast_grad = dense(p, x[rows], y[rows])
        loss, grad = reference(p, x[rows], y[rows])
        assert_tensors_close(fast_loss, loss)
        assert_tensors_close(fast_grad, grad)

    check(params)
    params.add_(0.1)  # an in-place step, as the trainer takes
    check(params)
    check(other)
    check(params)


def test_only_dense_stacks_take_the_dense_stack():
    assert dense_layers(cnn()) is None
    relu_last = Model(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), (4,))
    assert dense_layers(relu_last) is None
    unflattened_image = Model(nn.Sequential(nn.Linear(4, 3)), (2, 4))
    assert dense_layers(unflattened_image) is None
