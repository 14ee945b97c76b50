"""The one place where results of different code paths or kernels are compared.

Bit-for-bit equality holds only for the same path on the same machine (repeat runs, resume,
sweep workers). Across paths (batched vs sequential, dense vs autograd) or CPUs (Intel and AMD
pick different kernels and round differently) results agree only up to floating-point rounding,
so every such comparison goes through these helpers and their stated tolerances:

- parameters and losses: relative 1e-5 (float32 has 24 bits; a few roundings of a few steps);
- accuracies: within one evaluation sample (a prediction whose top two logits nearly tie may
  flip), i.e. absolute 1 / (number of rows evaluated);
- simulated times, joules and bits do not depend on torch kernels: relative 1e-12.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

PARAM_RTOL = 1e-5
PARAM_ATOL = 1e-6  # for entries near zero, where a relative bound means nothing
COST_RTOL = 1e-12
LOSS_COLUMNS = ("test_loss", "train_loss", "global_train_loss")  # computed by the model
ACCURACY_COLUMNS = (
    "test_accuracy",
    "client_accuracy_mean",
    "client_accuracy_worst",
    "client_accuracy_p10",
    "client_accuracy_std",  # one client's flip moves the std by at most its own 1/n_i
)


def assert_tensors_close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a.double(), b.double(), rtol=PARAM_RTOL, atol=PARAM_ATOL)


def accuracy_close(a, b, eval_rows: int) -> bool:
    """Accuracies (scalars or arrays) within one of `eval_rows` samples (plus 4-decimal rounding
    of a printed reference)."""
    return bool(
        np.all(np.abs(np.asarray(a, float) - np.asarray(b, float)) <= 1.0 / eval_rows + 5e-5)
    )


def assert_records_close(a: pd.DataFrame, b: pd.DataFrame, *, eval_rows: int) -> None:
    """Records of two paths: same rows and labels, costs to 1e-12, losses to PARAM_RTOL,
    accuracies within one of the smallest set of `eval_rows` rows evaluated."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for col in a.columns:
        x, y = a[col], b[col]
        if col in ACCURACY_COLUMNS:
            assert accuracy_close(x, y, eval_rows), (col, x.tolist(), y.tolist())
        elif col in LOSS_COLUMNS:
            np.testing.assert_allclose(x, y, rtol=PARAM_RTOL, err_msg=col)
        elif pd.api.types.is_float_dtype(x):
            np.testing.assert_allclose(x, y, rtol=COST_RTOL, err_msg=col)
        else:
            assert x.equals(y), col


def assert_ledgers_close(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Ledgers of two paths: the same rows in the same order, instants to COST_RTOL; a row's
    joules are a power times the difference of two such instants, so their bound grows by
    end_s / (end_s - start_s)."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for col in a.columns:
        if col in ("start_s", "end_s"):
            np.testing.assert_allclose(a[col], b[col], rtol=COST_RTOL, err_msg=col)
        elif col == "energy_j":
            with np.errstate(divide="ignore", invalid="ignore"):
                spread = np.nan_to_num(b.end_s / (b.end_s - b.start_s), nan=1.0, posinf=1.0)
            bound = 2 * COST_RTOL * np.maximum(spread, 1.0) * np.abs(b.energy_j)
            assert (np.abs(a.energy_j - b.energy_j) <= bound).all(), col
        else:
            assert a[col].equals(b[col]), col
