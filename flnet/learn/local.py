"""Local work, the math half: a cohort's local training, computed now in one batched call.

The time half (how long that work takes and what it costs) is the World's, on the SimPy clock;
a `Learner` only says how many FLOPs each client's work took.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from flnet.config import LocalConfig
from flnet.learn import cohort, optim, references
from flnet.learn import data as data_mod
from flnet.learn.data import FederatedData
from flnet.learn.data.blocks import BlockClock
from flnet.learn.models import Model
from flnet.learn.references import Charged
from flnet.learn.table import ClientTable, Keep
from flnet.learn.wire import Wire
from flnet.rng import Stream

OPTIMIZER_STATES = "optimizer_states"  # state_dict key of the persisted optimizer states
TABLES = "tables/"  # state_dict key prefix of the algorithms' tables


class LocalWork(NamedTuple):
    """Local training computed for a cohort, waiting to be delivered through SimPy."""

    params: torch.Tensor  # [C, P]
    opt_state: Any
    loss: torch.Tensor  # [C]
    flops: np.ndarray  # [C] training FLOPs to charge to each client
    steps: np.ndarray  # [C] local steps each client took
    snapshot: torch.Tensor | None = None  # [C, P] iterates at the step asked for, if any
    keep: Keep | None = None  # the persisted optimizer states, for the pattern to commit
    samples: np.ndarray | None = None  # [C] per-sample gradients computed (what flops count)


class LossTally:
    """The local losses of one step's participating clients, summed as they are delivered
    (`add`), read (`take`) or dropped (`clear`) once the step is published: the records'
    `train_loss`. Each algorithm adds its clients' losses with the weights its paper's
    objective gives them (`flnet.algorithms.train_loss`); the sums stay on the losses' device
    until `take`."""

    def __init__(self) -> None:
        self._sum: torch.Tensor | None = None  # [] float64: sum of weight * loss
        self._weight = 0.0

    def add(self, losses: torch.Tensor, weights: np.ndarray | None = None) -> None:
        """losses [D] (each a client's mean minibatch loss over its local steps), weighted by
        `weights` [D] (None: one each)."""
        if not len(losses):
            return
        w = np.ones(len(losses)) if weights is None else np.asarray(weights, dtype=np.float64)
        part = (losses.double() * torch.as_tensor(w, device=losses.device)).sum()
        self._sum = part if self._sum is None else self._sum + part
        self._weight += float(w.sum())

    def add_one(self, loss: torch.Tensor) -> None:
        """One loss ([] or [1]) of weight one (a stream upload's): what ``add(loss)`` adds,
        bit for bit (times one and a sum of one are exact), without its weight arrays."""
        part = loss.reshape(()).double()
        self._sum = part if self._sum is None else self._sum + part
        self._weight += 1.0

    def take(self) -> float:
        """The weighted mean of what was added since the last `take` or `clear` (NaN: nothing
        was), and clear."""
        total, weight = self._sum, self._weight
        self.clear()
        return math.nan if total is None or weight <= 0 else float(total) / weight

    def clear(self) -> None:
        """Forget what was added (a step not evaluated: no device sync to read it)."""
        self._sum, self._weight = None, 0.0


class OptimizerStates:
    """Client optimizer states kept across rounds (``optimizer_state: persist``), in a
    `ClientTable` made on first use from the state's per-client leaves; a client's first
    participation starts from ``optimizer.init`` of its start parameters."""

    def __init__(self) -> None:
        self.table: ClientTable | None = None
        self._saved: dict | None = None  # a checkpoint's rows, until the first gather

    def gather(
        self, clients: np.ndarray, optimizer: optim.GradientTransformation, params: torch.Tensor
    ) -> Any:
        """The cohort's states: stored rows, fresh ``optimizer.init(params)`` for newcomers."""
        fresh, spec = tree_flatten(optimizer.init(params))
        rows = [leaf for leaf in fresh if cohort._per_client(leaf)]
        if rows and self.table is None:
            self.table = ClientTable([row[0].clone() for row in rows])
            if self._saved is not None:
                self.table.load_state_dict(self._saved)
        if not rows or self.table is None or not len(self.table):  # (rows: a table exists)
            return tree_unflatten(fresh, spec)
        stored = iter(self.table.rows(clients, default=rows))
        return tree_unflatten(
            [next(stored) if cohort._per_client(leaf) else leaf for leaf in fresh], spec
        )

    def keep(self, clients: np.ndarray, state: Any) -> Keep | None:
        """The cohort's new states, kept by the clients whose local work completes."""
        rows = [leaf for leaf in tree_flatten(state)[0] if cohort._per_client(leaf)]
        if not rows:
            return None
        assert self.table is not None  # made by `gather`, which comes first
        return Keep(self.table, clients, rows)

    def state_dict(self) -> dict:
        return self.table.state_dict() if self.table is not None else (self._saved or {})

    def load_state_dict(self, state: dict) -> None:
        self.table, self._saved = None, (state or None)


class Learner:
    """One model on one federated data set: the clients' local training, its FLOPs and the
    bits of its messages. With `charged` (``model.costs_as``) both are charged as a reference
    model's: FLOPs per processed sample and parameters per model-shaped message."""

    def __init__(
        self,
        model: Model,
        data: FederatedData,
        seed: int,
        charged: Charged | None = None,
        clock: BlockClock | None = None,
    ) -> None:
        self.model = model
        self.data = data
        self.clock = clock  # block-cyclic data: which block is in force (data.blocks)
        # the block of the round under way or last run (`block`); None: block 0 before the
        # first round (the data a run starts in, `FederatedData.client_indices`) or no blocks
        self.block_in_force: int | None = None
        self._blocks: dict[int, FederatedData] = {}
        self.seed = seed
        self.charged = charged or references.own(model)
        self.flops_per_sample = self.charged.flops_per_sample  # charged per sample processed
        self.forward_flops_per_sample = self.charged.forward_flops_per_sample  # a forward pass
        self.wire = Wire(model.num_params, self.charged.num_params)
        self.trainer = cohort.Trainer(model, data.x_train, data.y_train)
        self.optimizer_states = OptimizerStates()  # persist only
        self.tables: dict[str, ClientTable] = {}  # algorithms' per-client state, by name
        self._saved_tables: dict[str, dict] = {}  # a checkpoint's, until each table is made
        self.num_samples = data.num_samples
        self.last_steps = np.zeros(0, dtype=np.int64)  # [C] local steps of the last cohort
        self.train_loss = LossTally()  # the step's participating clients' local losses

    def block(self, round: int, now_s: float) -> int | None:
        """The data block of round `round` starting at `now_s` (None: data without blocks).
        The block-aware algorithms ask it as each round starts: it is then the block in force
        (`block_in_force`) until the next round asks."""
        self.block_in_force = None if self.clock is None else self.clock.block(round, now_s)
        return self.block_in_force

    def data_in(self, block: int | None) -> FederatedData:
        """The data as block `block` has them (`FederatedData.in_block`), made once."""
        if block is None:
            return self.data
        if block not in self._blocks:
            self._blocks[block] = self.data.in_block(block)
        return self._blocks[block]

    def samples_in(self, block: int | None) -> np.ndarray:
        """[N] training rows of each client in block `block` (None: `num_samples`)."""
        return self.data_in(block).num_samples

    def bits(self, message: Any) -> int:
        """Bits charged for one message (`flnet.learn.wire.Wire`): what it holds, or as the
        reference model's parameters with ``model.costs_as``."""
        return self.wire.bits(message)

    def full_steps(
        self, clients: np.ndarray, local: LocalConfig, block: int | None = None
    ) -> np.ndarray:
        """[C] local steps each client's full work takes: `local.steps`, or its epochs' steps
        over its rows (in block `block`, with block-cyclic data)."""
        if local.epochs is None:
            return np.full(len(clients), local.steps, dtype=np.int64)
        return data_mod.epoch_steps(
            self.samples_in(block)[clients], local.epochs, local.batch_size, local.drop_last
        )

    def planned_samples(
        self, clients: np.ndarray, local: LocalConfig, round: int
    ) -> np.ndarray | None:
        """[C] per-sample gradients `local_train(clients, _, local, round)` will compute (what
        its FLOPs count), known before training: the samples its steps process (`local.steps`
        full batches, or each epoch's rows: n_k, or floor(n_k / B) * B with drop_last) times
        the gradients a step takes. None where only training tells: Delta-SGD takes its
        second gradient only once a client has a previous iterate."""
        if local.optimizer.name == "delta_sgd":
            return None
        grads = optim.from_config(local, round).grads_per_step
        if local.epochs is None:
            return self.full_steps(clients, local) * (local.batch_size * grads)
        n = self.num_samples[clients].astype(np.int64)
        used = (n // local.batch_size) * local.batch_size if local.drop_last else n
        return used * local.epochs * grads

    def step_flops(self, local: LocalConfig) -> float:
        """FLOPs of one local step of a full minibatch: B samples times the gradient
        evaluations the optimizer's step takes at most (a short batch costs less)."""
        grads = optim.from_config(local).grads_per_step
        return float(local.batch_size * self.flops_per_sample * grads)

    def client_table(self, name: str, initial: Any) -> ClientTable:
        """The per-client table `name` (made on first call, with `initial` as the row of
        clients never written), checkpointed with the run: an algorithm's client state
        (SCAFFOLD's c_i). After a resume it holds the checkpoint's rows."""
        if name not in self.tables:
            self.tables[name] = ClientTable(initial)
            if name in self._saved_tables:
                self.tables[name].load_state_dict(self._saved_tables.pop(name))
        return self.tables[name]

    def _made_tables(self) -> dict[str, ClientTable]:
        made = {f"{TABLES}{name}": t for name, t in self.tables.items()}
        if self.optimizer_states.table is not None:
            made[OPTIMIZER_STATES] = self.optimizer_states.table
        return made

    def state_dict(self, changed_only: bool = False) -> dict[str, dict]:
        """Per-client state that outlives a round (saved in checkpoints, `flnet.journal`), by
        table: "optimizer_states" and "tables/NAME", each a `ClientTable.state_dict`. Every
        row, or with `changed_only` those written since `mark_saved`; tables without rows are
        left out."""
        out = {}
        if not changed_only:
            if self.optimizer_states.table is None and self.optimizer_states._saved:
                out[OPTIMIZER_STATES] = self.optimizer_states._saved
            out.update({f"{TABLES}{name}": s for name, s in self._saved_tables.items()})
        for key, table in self._made_tables().items():
            out[key] = table.changes() if changed_only else table.state_dict()
        return {key: s for key, s in out.items() if len(s["clients"])}

    def mark_saved(self) -> None:
        """Every table's rows are saved (a checkpoint has them)."""
        for table in self._made_tables().values():
            table.mark_saved()

    def table_bytes(self) -> int:
        """Bytes of the rows the tables hold (saved rows of tables not made yet included)."""
        made = sum(t.nbytes for t in self._made_tables().values())
        pending = [*self._saved_tables.values()]
        if self.optimizer_states.table is None and self.optimizer_states._saved:
            pending.append(self.optimizer_states._saved)
        return made + sum(r.nbytes for s in pending for r in s["rows"])

    def load_state_dict(self, state: dict[str, dict]) -> None:
        """Tables as `state_dict` gives them (each made with these rows when first used)."""
        unknown = [k for k in state if k != OPTIMIZER_STATES and not k.startswith(TABLES)]
        if unknown:
            raise ValueError(f"no per-client table {unknown[0]!r} in this learner")
        self.optimizer_states.load_state_dict(state.get(OPTIMIZER_STATES, {}))
        self.tables = {}
        self._saved_tables = {
            k.removeprefix(TABLES): s for k, s in state.items() if k.startswith(TABLES)
        }

    def local_train(
        self,
        clients: np.ndarray,
        start: torch.Tensor,
        local: LocalConfig,
        round: int,
        optimizer: optim.GradientTransformation | None = None,
        loss_fn: cohort.LossFn | None = None,
        aux: Any = None,
        snapshot_at: int | torch.Tensor | None = None,
        work_counts: np.ndarray | None = None,
        steps: np.ndarray | None = None,
        block: int | None = None,
    ) -> LocalWork:
        """Every client in `clients` does its local work from `start` ([P] or [C, P]):
        `local.steps` steps, or `local.epochs` epochs over its own rows (ceil(n_k / B) * E
        steps). FLOPs are those of the samples really processed (a short batch costs its own
        size) times the gradients each step took.

        `optimizer` replaces the scenario's client optimizer and `loss_fn` the mean
        cross-entropy; `aux` (per-client rows [C, ...]) and `snapshot_at` go to
        `cohort.Trainer.train`. With ``local.optimizer_state: persist`` a client's optimizer
        continues from its state at the end of its last completed local work: the new states
        are in `LocalWork.keep`, which the algorithm hands to its pattern to commit.
        `work_counts` ([C], stream pattern) keys each client's minibatches by (client, its work
        count), not the round. `steps` ([C], partial work) caps each client's local steps: it
        takes the first of the steps its full work would take (the same minibatches).
        `block` (block-cyclic data, `block`): each client trains on its rows of that block.
        """
        data = self.data_in(block)
        cap = None if steps is None else np.asarray(steps, dtype=np.int64)
        if len(clients) == 0:  # nobody trains (every client straggles, or none is online)
            self.last_steps = np.zeros(0, dtype=np.int64)
            nothing = start.new_zeros((0, start.shape[-1]))
            none = np.zeros(0)
            return LocalWork(nothing, None, start.new_zeros(0), none, self.last_steps, None, None)
        if self.data.lazy is not None:  # this cohort's rows, generated now (see minibatches)
            # the last cohort's rows go first: a round holds one cohort's, not two
            self.trainer.x_data, self.trainer.y_data = self.data.x_train, self.data.y_train
            self.trainer.x_data, self.trainer.y_data = self.data.cohort_arrays(clients)
        if local.epochs is None:
            steps = np.full(len(clients), local.steps)
            steps = steps if cap is None else np.minimum(steps, cap)
            batches = data_mod.minibatches(
                data, clients, round, steps, local.batch_size, self.seed, work_counts
            )
            sizes = None
        else:
            steps = data_mod.epoch_steps(
                data.num_samples[clients], local.epochs, local.batch_size, local.drop_last
            )
            batches, sizes = data_mod.epoch_batches(
                data,
                clients,
                round,
                local.epochs,
                local.batch_size,
                local.drop_last,
                self.seed,
                work_counts,
            )
            steps = steps if cap is None else np.minimum(steps, cap)
        self.last_steps = steps
        params = start.expand(len(clients), -1) if start.dim() == 1 else start
        optimizer = optimizer or optim.from_config(local, round)  # the round's lr
        persist = local.optimizer_state == "persist"
        state = self.optimizer_states.gather(clients, optimizer, params) if persist else None
        res = self.trainer.train(
            params,
            batches,
            torch.as_tensor(steps, device=params.device),
            optimizer,
            state,
            loss_fn=loss_fn,
            path=local.path,
            sizes=sizes,
            aux=aux,
            snapshot_at=snapshot_at,
        )
        keep = self.optimizer_states.keep(clients, res.opt_state) if persist else None
        samples = res.sample_grads.cpu().numpy()
        flops = samples * self.flops_per_sample
        return LocalWork(
            res.params,
            res.opt_state,
            res.loss,
            flops.astype(float),
            steps,
            res.snapshot,
            keep,
            samples.astype(np.int64),
        )

    def forward_flops(self, samples: np.ndarray | int) -> np.ndarray:
        """[C] FLOPs of forward passes alone over `samples` samples each (a loss query, MOON's
        extra forwards), charged as the model's (or the reference's) forward FLOPs a sample."""
        return np.asarray(samples, dtype=float) * self.forward_flops_per_sample

    def query_losses(
        self,
        clients: np.ndarray,
        params: torch.Tensor,
        batch_size: int,
        round: int,
        stream: Stream = Stream.DUAL_BATCH,
        block: int | None = None,
    ) -> torch.Tensor:
        """[C] mean cross-entropy of the model `params` ([P]) on one minibatch of each client's
        own rows (of `block`), B drawn with replacement from the stream (seed, `stream`, round,
        client), forward only (DRFA's dual step asks this of its uniform clients; `forward_flops`
        of B samples is its cost)."""
        if self.data.lazy is not None:  # as local_train: this cohort's rows, generated now
            self.trainer.x_data, self.trainer.y_data = self.data.x_train, self.data.y_train
            self.trainer.x_data, self.trainer.y_data = self.data.cohort_arrays(clients)
        rows = data_mod.minibatches(
            self.data_in(block),
            clients,
            round,
            np.ones(len(clients), dtype=np.int64),
            batch_size,
            self.seed,
            stream=stream,
        )[:, 0]  # [C, B]
        x, y = self.trainer.x_data[rows], self.trainer.y_data[rows]
        with torch.no_grad():
            stacked = params.expand(len(clients), -1)
            return cohort.cross_entropy(self.model, stacked, x, y)
