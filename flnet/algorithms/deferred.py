"""Stream work trained when first needed, several clients in one call (FedBuff, FedAsync).

A stream (`flnet.sim.patterns.stream`) starts clients one or a few at a time, each from the
server model of that instant. Trained at its start, each start is a cohort of one: on a
smartphone trace that made FedBuff several times slower than FedAvg per simulated hour. Yet a
start needs nothing of the training's result: its FLOPs, and so its timing, charges and fate,
are known beforehand (`Learner.planned_samples`); the upload is first needed when the server
uses it (FedAsync: at its arrival; FedBuff: at its buffer's K-th arrival, the server update),
the client's new optimizer state (``optimizer_state: persist``) when its compute completes. So
a start only registers its work here (a `Later`), and training is lazy:

    the first time a work's result is needed, every work registered and not yet trained that
    trains with the same optimizer (the same learning rate) is trained in one stacked call,
    each row from the model its client started from ([C, P] start rows), its minibatches
    keyed by (client, work count) as alone.

When a batch forms is fixed by the simulated timeline: at the instant a result is first
needed, over the works started before it. Nothing later is read, and no semantics change:

- a work that fails (session end, dropout, loss) before its batch is dropped and never
  trained (`cancel`); one that fails after only wasted the arithmetic. Its charges are the
  simulated timeline's either way: FLOPs are fixed at its start, as before;
- a row's maths is its own (`cohort.Trainer`), so the other clients in a batch change a
  client's result only by float rounding, within tests/tolerance.py's tolerance; the batch is
  a function of the timeline (rows in (client, work count) order), so runs repeat to the bit;
- a checkpoint keeps a trained work's upload and an untrained one's `Ticket` (its start model
  and keys); a resumed stream registers the tickets again (`thaw`), so its batches are the
  uninterrupted run's, and so are its bits.

The batches are the timeline's, so their number is too: on benchmarks/bench.py's week trace
FedBuff (K = 5, 10 at once) runs about twice FedAvg's client works per simulated hour, in
batches of about 7 (one call for about 2 server updates in 3; a one-off count) against FedAvg's
rounds of 10, and its training alone costs more than FedAvg's whole run. Fewer calls are not to
be had: an update whose buffer holds a work of staleness 0 needs a call, as that work started
from the model the previous update made, after any earlier call; training every pending work at
each call leaves later updates the fewest to wait for. Batches of other sizes would change the
bits (`bench.py --streams` prints that floor beside each server's ratio).

Where the FLOPs are known only by training (Delta-SGD skips its second gradient on a client's
first step), or with `LAZY` off, each start trains at once as before (the eager path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from flnet.algorithms.train_loss import Upload
from flnet.sim.patterns import Member, Packet, Work, thawed_payloads

if TYPE_CHECKING:  # the learning side's objects, for annotations only
    from flnet.config import LocalConfig
    from flnet.learn.local import Learner, LocalWork

LAZY = True  # False: every start trains at once (the eager path the tests compare with)

# (clients [C], work counts [C], start rows [C, P], version) -> the batch's local work
Train = Callable[[np.ndarray, np.ndarray, torch.Tensor, int], "LocalWork"]
# (the batch's local work, start rows [C, P]) -> what each row uploads [C, P]
Uploads = Callable[["LocalWork", torch.Tensor], torch.Tensor]


class Ticket(NamedTuple):
    """A started work not trained yet: all its training needs, and what a checkpoint keeps."""

    client: int
    count: int  # type: ignore[assignment]  # the client's work count (a tuple method's name)
    version: int  # the server version it started from
    start: torch.Tensor  # [P] the model it starts from


class Later:
    """A work's upload, trained when first asked for (`result`)."""

    __slots__ = ("batches", "ticket", "upload", "keep")

    def __init__(self, batches: Batches, ticket: Ticket) -> None:
        self.batches, self.ticket = batches, ticket
        self.upload: Upload | None = None
        self.keep: Member | None = None  # its optimizer state, once trained (persist)

    def result(self) -> Upload:
        if self.upload is None:
            self.batches.train(self)
        assert self.upload is not None  # `train` trains every pending work of its batch
        return self.upload

    def frozen(self) -> Any:
        """What a checkpoint keeps: the upload once trained, else the ticket."""
        return self.ticket if self.upload is None else self.upload

    def cancel(self) -> None:
        """Its work failed: it is never needed, so never trained."""
        self.batches.drop(self)


class LaterState:
    """A lazy work's client state (`patterns.ClientState`): trained when committed."""

    def __init__(self, later: Later) -> None:
        self.later = later

    def commit(self, positions: np.ndarray) -> None:
        if len(positions):
            self.later.result()
            if self.later.keep is not None:
                self.later.keep.commit(positions)


class Batches:
    """The works started and not yet trained, each group of one learning rate trained in
    one call when one of them is first needed. `train` and `uploads` are the algorithm's."""

    def __init__(
        self, learn: Learner, local: LocalConfig, train: Train, uploads: Uploads, bits: float
    ) -> None:
        self.learn, self.local, self._train, self._uploads = learn, local, train, uploads
        self.bits = bits  # a model's (the download's and the upload's)
        self.pending: dict[float | None, list[Later]] = {}  # by learning rate
        self.persist = local.optimizer_state == "persist"
        self._last_steps = np.zeros(0, dtype=np.int64)

    def start(
        self, clients: np.ndarray, counts: np.ndarray, x: torch.Tensor, version: int
    ) -> list[Work] | None:
        """Each client's work from the model `x` of `version`, registered, not trained; None
        where its FLOPs are known only by training (the caller trains at once)."""
        samples = self.learn.planned_samples(clients, self.local, version)
        if samples is None:
            return None
        # the records' local steps are the last started cohort's, as when trained at once
        self._last_steps = self.learn.last_steps = self.learn.full_steps(clients, self.local)
        flops = (samples * self.learn.flops_per_sample).astype(float)
        works = []
        for client, count, f in zip(clients.tolist(), counts.tolist(), flops.tolist()):
            later = self.register(Ticket(client, count, version, x))
            state = LaterState(later) if self.persist else None
            works.append(Work(Packet(x, self.bits), f, Packet(later, self.bits), state=state))
        return works

    def register(self, ticket: Ticket) -> Later:
        later = Later(self, ticket)
        self.pending.setdefault(self.local.lr_at(ticket.version), []).append(later)
        return later

    def drop(self, later: Later) -> None:
        lr = self.local.lr_at(later.ticket.version)
        group = self.pending.get(lr, [])
        if later in group:
            group.remove(later)
            if not group:  # (a schedule makes a group per version: none is kept empty)
                del self.pending[lr]

    def train(self, later: Later) -> None:
        """Train `later`'s group: every pending work of its learning rate, rows in (client,
        work count) order (a function of what is pending, not of the order it came in)."""
        group = sorted(
            self.pending.pop(self.local.lr_at(later.ticket.version)),
            key=lambda w: (w.ticket.client, w.ticket.count),
        )
        tickets = [w.ticket for w in group]
        clients = np.asarray([t.client for t in tickets], dtype=np.int64)
        counts = np.asarray([t.count for t in tickets], dtype=np.int64)
        starts = torch.stack([t.start for t in tickets])
        done = self._train(clients, counts, starts, tickets[0].version)
        self.learn.last_steps = self._last_steps  # the records' (see `start`)
        up = self._uploads(done, starts)
        for i, w in enumerate(group):
            # each its own storage (checkpoints), with its local loss (the records')
            w.upload = Upload(up[i].clone(), done.loss[i].clone())
            w.keep = Member.of(done.keep, i)

    def thaw(self, payload: Any) -> Any:
        """A checkpoint's payload back: a ticket registered again (to train when needed)."""
        return self.register(Ticket(*payload)) if isinstance(payload, Ticket) else payload

    def resumed(self, flight: dict | None) -> dict | None:
        """A checkpoint's stream flight (the State's) with its tickets registered again."""
        return None if flight is None else thawed_payloads(flight, self.thaw)


def received(payload: Any) -> Any:
    """An arriving upload's payload, trained now if it was not yet."""
    return payload.result() if isinstance(payload, Later) else payload
