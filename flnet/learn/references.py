"""Reference models: the papers' models at their papers' input sizes, for ``model.costs_as``.

A scenario may train a small stand-in (an MLP on digits) and charge every message and every
FLOP as if a paper's model were trained instead (``model: {kind: mlp, costs_as: cnn_kmnist}``),
so the energy-optimal number of local steps moves as it does with the paper's model. A
reference's parameter count and training FLOPs per sample are not typed in: they are counted
by the same code as the model a run trains (`flnet.learn.models.Model`), on a module built at
the reference's input shape.

The names are the schema's (`flnet.schema.ReferenceName`, light); this module builds the
models, so it loads torch.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from pydantic import TypeAdapter

from flnet.learn import models
from flnet.schema import ModelConfig, ReferenceName


class Reference(NamedTuple):
    """A model kind (with its defaults) at a paper's input shape and class count."""

    kind: str
    input_shape: tuple[int, ...]
    num_classes: int
    source: str


REFERENCES: dict[ReferenceName, Reference] = {  # every ReferenceName, no more
    # DRDM Sec. 4.1: conv 3x3x16, pool, conv 3x3x32, pool, FC 32x7x7 -> 500, ReLU, FC 10 on
    # 28x28 KMNIST; padding 1 and 2x2 pools (the paper's 32x7x7 needs them), see models.py
    "cnn_kmnist": Reference("cnn_kmnist", (1, 28, 28), 10, "DRDM's KMNIST CNN (Sec. 4.1)"),
    "logistic_mnist": Reference("logistic", (1, 28, 28), 10, "DRDM's MNIST linear model"),
    "cnn_mcmahan": Reference("cnn_mcmahan", (1, 28, 28), 10, "McMahan et al. 2017, MNIST CNN"),
    "cnn_dfl_mnist": Reference("cnn_dfl_mnist", (1, 28, 28), 10, "DFL paper, Table II left"),
    "cnn_dfl_cifar": Reference("cnn_dfl_cifar", (3, 32, 32), 10, "DFL paper, Table II right"),
    "cnn_tutorial": Reference("cnn_tutorial", (3, 32, 32), 10, "PyTorch-tutorial CIFAR CNN"),
    "resnet18": Reference("resnet18", (3, 32, 32), 10, "CIFAR ResNet-18, GroupNorm"),
}


class Charged(NamedTuple):
    """What a run charges per parameter sent and per sample processed."""

    name: str | None  # the reference (None: the model trained)
    num_params: int  # parameters a model-shaped message is charged as
    flops_per_sample: float  # training FLOPs (forward + backward) charged per sample
    forward_flops_per_sample: float  # forward-only FLOPs charged per sample (loss queries)


def own(model: Any) -> Charged:
    """What a run without ``model.costs_as`` charges: the trained model's own figures."""
    return Charged(
        None, model.num_params, model.training_flops_per_sample(), model.forward_flops_per_sample()
    )


@functools.cache
def charged(name: ReferenceName) -> Charged:
    """The reference `name`'s parameters, training and forward FLOPs per sample, counted by
    building it (on the CPU, seed 0: the count does not depend on the weights)."""
    ref = REFERENCES[name]
    config = TypeAdapter(ModelConfig).validate_python({"kind": ref.kind})
    with models.seeded(0):
        module = models.build_module(config, ref.input_shape, ref.num_classes)
    return own(models.Model(module, ref.input_shape))._replace(name=name)
