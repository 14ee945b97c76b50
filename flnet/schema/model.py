"""The scenario's `model` section, and the names of the reference models a run may be charged
as (`model.costs_as`; flnet.learn.references builds them)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from flnet.config import Strict
from flnet.schema.checks import inconsistent

ReferenceName = Literal[
    "cnn_kmnist",
    "logistic_mnist",
    "cnn_mcmahan",
    "cnn_dfl_mnist",
    "cnn_dfl_cifar",
    "cnn_tutorial",
    "resnet18",
]  # the keys of flnet.learn.references.REFERENCES (tests/test_costs.py checks)


class _ModelCommon(Strict):
    costs_as: ReferenceName | None = Field(
        None,
        description="charge messages and FLOPs as this reference model's (the papers' models "
        "at their input sizes, flnet/learn/references.py); none: the model trained",
    )


class MlpConfig(_ModelCommon):
    kind: Literal["mlp"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [64],
        description="units of each hidden layer (ReLU), input side first",
    )


class LogisticConfig(_ModelCommon):
    """Multinomial logistic regression: one linear layer."""

    kind: Literal["logistic"]


class CnnConfig(_ModelCommon):
    """One of the papers' CNNs, exactly as published (see flnet/learn/models.py)."""

    kind: Literal["cnn_mcmahan", "cnn_dfl_mnist", "cnn_dfl_cifar", "cnn_tutorial", "cnn_kmnist"]


class Resnet18Config(_ModelCommon):
    """CIFAR ResNet-18 with GroupNorm in place of BatchNorm."""

    kind: Literal["resnet18"]
    norm_groups: int = Field(32, ge=1, description="GroupNorm groups; must divide 64")

    @model_validator(mode="after")
    def _divides(self) -> Resnet18Config:
        if 64 % self.norm_groups:
            raise inconsistent(
                "model.norm_groups",
                f"{self.norm_groups} does not divide the 64 channels of the first stage",
            )
        return self


ModelConfig = Annotated[
    MlpConfig | LogisticConfig | CnnConfig | Resnet18Config, Field(discriminator="kind")
]
