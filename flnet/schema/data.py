"""The scenario's `data` section: which data set, how it is split over the clients, and the
generators' and block-cyclic settings."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, model_validator

from flnet.config import Strict
from flnet.schema.checks import inconsistent


class IidPartition(Strict):
    """Shuffle the training set and cut it into equal parts."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Strict):
    """Label skew (Hsu et al. 2019): each class is spread over clients with proportions
    ~ Dir(alpha); client sizes come out unequal."""

    kind: Literal["dirichlet"]
    alpha: float = Field(gt=0, description="smaller alpha, stronger label skew")
    min_size: int = Field(2, ge=1, description="resample until every client has this many")


class ShardsPartition(Strict):
    """Pathological split: every client holds exactly `classes_per_client` classes, each class
    cut into equal shards (McMahan et al. 2017; OledFL's Path(k))."""

    kind: Literal["shards"]
    classes_per_client: int = Field(ge=1, description="distinct labels each client holds")


class SizeSkewPartition(Strict):
    """Quantity skew. zipf (DRDM): client i (from 1) holds d i^-sigma / sum_j j^-sigma samples;
    lognormal: sizes proportional to exp(N(0, sigma^2)) draws."""

    kind: Literal["zipf", "lognormal"]
    sigma: float = Field(ge=0, description="0: equal sizes; larger: more skew")
    alpha: float | None = Field(
        None, gt=0, description="each client's class mixture ~ Dir(alpha); none: iid labels"
    )
    min_size: int = Field(2, ge=1, description="smallest client size allowed")


class NaturalPartition(Strict):
    """The data set's own clients (synthetic: one generated user per client)."""

    kind: Literal["natural"]


Partition = Annotated[
    IidPartition | DirichletPartition | ShardsPartition | SizeSkewPartition | NaturalPartition,
    Field(discriminator="kind"),
]


class SyntheticConfig(Strict):
    """FedProx's Synthetic(alpha, beta): per-client logistic models and inputs."""

    alpha: float = Field(1.0, ge=0, description="how much the clients' models differ")
    beta: float = Field(1.0, ge=0, description="how much the clients' inputs differ")
    num_features: int = Field(60, ge=1, description="input dimension")
    num_classes: int = Field(10, ge=2, description="labels of the softmax models")
    size_log_mean: float = Field(4.0, description="client sizes: lognormal(mean, std) + min")
    size_log_std: float = Field(2.0, ge=0, description="std of the log of client sizes")
    min_samples: int = Field(50, ge=2, description="added to every client's drawn size")
    test_fraction: float = Field(0.1, gt=0, lt=1, description="of each client's samples")


class Mnist1dConfig(Strict):
    """MNIST-1D's procedural generator (80/20 train/test split)."""

    num_samples: int = Field(5000, ge=20, description="samples generated, train and test")
    seed: int = Field(
        42, ge=0, le=2**32 - 1, description="the generator's seed; 42 is the published set"
    )


class BlockCyclicConfig(Strict):
    """Block-cyclic data (Ding et al.): a cycle of M blocks; in block m client i trains on its
    own block-m rows (label windows, flnet/learn/data/blocks.py)."""

    num_blocks: int = Field(2, ge=1, le=100, description="blocks per cycle (M)")
    rounds_per_block: int | None = Field(
        None, ge=1, description="the block follows rounds: E rounds per block (the paper)"
    )
    block_s: float | None = Field(
        None,
        gt=0,
        description="the block follows simulated time: seconds per block (a day "
        "of M blocks is M * block_s)",
    )

    @model_validator(mode="after")
    def _one_clock(self) -> BlockCyclicConfig:
        if (self.rounds_per_block is None) == (self.block_s is None):
            raise inconsistent(
                "data.blocks.rounds_per_block",
                "give exactly one of data.blocks.rounds_per_block (rounds) and "
                "data.blocks.block_s (seconds)",
            )
        return self


class RandomReluFeatures(Strict):
    kind: Literal["random_relu"]
    dim: int = Field(512, ge=1, description="features per sample (random ReLU units)")
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="fixes the backbone, independent of the run seed"
    )


class Resnet18Features(Strict):
    kind: Literal["resnet18"]
    seed: int = Field(
        0, ge=0, le=2**32 - 1, description="fixes the backbone, independent of the run seed"
    )


class NpzFeatures(Strict):
    kind: Literal["npz"]
    path: str = Field(description="arrays x_train [N, F] and x_test [M, F]")


Features = Annotated[
    RandomReluFeatures | Resnet18Features | NpzFeatures, Field(discriminator="kind")
]

Dataset = Literal[
    "digits",
    "synthetic",
    "mnist1d",
    "mnist",
    "fashion_mnist",
    "kmnist",
    "cifar10",
    "cifar100",
]
DATASETS: tuple[str, ...] = get_args(Dataset)


class DataConfig(Strict):
    dataset: Dataset = Field("digits", description="see the README")
    root: str = Field("data", description="folder holding the real data sets' files")
    download: bool = Field(False, description="fetch missing real data sets (needs network)")
    partition: Partition = Field(
        IidPartition(), description="how the training rows are split among the clients, by `kind`"
    )
    local_test_fraction: float | None = Field(
        None, gt=0, le=1, description="per-client test rows from the client's label mix"
    )
    features: Features | None = Field(None, description="frozen features instead of inputs")
    validation_fraction: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="hold this share of the training set out (stratified, before "
        "partitioning) as the server's validation set: validation_accuracy and "
        "validation_loss in the records",
    )
    input_scale: float = Field(
        1.0,
        gt=0,
        description="multiply every input the model sees (train, validation, test; the "
        "features when set) by this: 16 turns digits into raw 0-16 pixel values",
    )
    share_rows: bool | Annotated[int, Field(ge=1)] = Field(
        False,
        description="more clients than training rows: the partition is made for S "
        "slots (true: as many as rows; a number: that many) and client k "
        "holds slot k mod S",
    )
    eval_clients: int = Field(
        1000,
        ge=1,
        description="per-client figures use every client up to this many, else "
        "a sample of this size drawn once from the seed",
    )
    synthetic: SyntheticConfig = SyntheticConfig()
    mnist1d: Mnist1dConfig = Mnist1dConfig()
    blocks: BlockCyclicConfig | None = Field(
        None,
        description="block-cyclic data: each client's rows change with the block of the "
        "day; replaces data.partition (which must stay iid)",
    )

    @model_validator(mode="after")
    def _consistent(self) -> DataConfig:
        if self.blocks is not None and (
            self.partition.kind != "iid"
            or self.share_rows is not False
            or self.local_test_fraction is not None
            or self.dataset == "synthetic"
        ):
            raise inconsistent(
                "data.blocks",
                "block-cyclic data makes its own partition: leave data.partition iid, "
                "data.share_rows false and data.local_test_fraction unset, on a data set "
                "in memory (not synthetic)",
            )
        if self.partition.kind == "natural" and self.dataset != "synthetic":
            raise inconsistent(
                "data.partition.kind",
                f"'natural' needs a data set with its "
                f"own clients ('synthetic'), not {self.dataset!r}",
            )
        if self.partition.kind == "natural" and self.local_test_fraction is not None:
            raise inconsistent(
                "data.local_test_fraction",
                "a natural partition already has "
                "each client's own test split (synthetic.test_fraction)",
            )
        for name, unset in (
            ("validation_fraction", self.validation_fraction is None),
            ("input_scale", self.input_scale == 1.0),
        ):
            if self.partition.kind == "natural" and not unset:
                raise inconsistent(
                    f"data.{name}",
                    "a natural synthetic population is generated per client when it "
                    "takes part; use another partition (the pooled users) for this option",
                )
        return self
