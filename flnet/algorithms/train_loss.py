"""The records' `train_loss`: a step's participating clients' local losses, weighted as each
family's paper weights its clients, added to the Learner's tally (`flnet.learn.local.LossTally`),
which the Recorder reads and clears at every published step.

- Central rounds: the clients whose upload was delivered, each with its mean minibatch loss over
  its local steps. FedAvg, FedProx, MOON and FedDyn weigh them by sample count (the objective
  sum_k n_k / n F_k, FedAvg's line 8 weights); SCAFFOLD, MM-PSGD and MC-PSGD uniformly (their
  papers' 1/N mean); DRFA and DRDM by their draws from lambda (their estimator of the
  lambda-weighted loss).
- Gossip: the nodes that trained in the iteration, uniformly (the objective (1/n) sum_i f_i).
- Streams (FedAsync, FedBuff): each upload when it arrives, uniformly; its loss travels with the
  model (`Upload`), so a resumed run counts the work under way at its checkpoint as well.

The loss is each client's local objective as it trained on it: with FedProx's and FedAsync's
proximal term, MOON's contrastive term, FedDyn's and DRDM's linear terms. The global model's
loss on every training row, comparable across algorithms, is `global_train_loss`
(`run.global_train_loss`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
import torch

if TYPE_CHECKING:  # annotations only
    from flnet.algorithms.delivery import Delivered
    from flnet.learn.local import Learner, LocalWork


def delivered(
    learn: Learner,
    got: Delivered | None,
    work: LocalWork,
    weights: Literal["samples", "uniform"] | np.ndarray,
) -> None:
    """A central round's delivered clients' losses (`got`'s rows of the cohort's `work.loss`),
    weighted by their sample counts, uniformly, or by `weights` [C] of the cohort's members
    (DRFA's draws). A client that took no local step (partial work under a deadline) has no
    loss and is left out; nothing when nobody delivered."""
    if got is None:
        return
    if isinstance(weights, str):
        chosen = got.num_samples if weights == "samples" else np.ones(len(got.positions))
    else:
        chosen = np.asarray(weights)[got.positions]
    stepped = np.asarray(work.steps)[got.positions] > 0
    if stepped.all():
        learn.train_loss.add(got.rows(work.loss), chosen)
        return
    rows = torch.as_tensor(got.positions[stepped], device=work.loss.device)
    learn.train_loss.add(work.loss.index_select(0, rows), chosen[stepped])


class Upload(NamedTuple):
    """A stream upload: the model (or delta) and the local loss of the work that made it."""

    model: torch.Tensor  # [P]
    loss: torch.Tensor  # []


def arrived(learn: Learner, payload: Any) -> torch.Tensor:
    """The model of an arriving stream upload, its loss added to the tally (a bare tensor: a
    checkpoint written before uploads carried their loss, which counts nothing)."""
    if isinstance(payload, Upload):
        learn.train_loss.add_one(payload.loss)
        return payload.model
    return payload
