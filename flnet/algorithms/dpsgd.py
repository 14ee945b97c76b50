"""D-PSGD: Lian et al., "Can Decentralized Algorithms Outperform Centralized Algorithms? A Case
Study for Decentralized Parallel Stochastic Gradient Descent", NeurIPS 2017, Algorithm 1.

No server: all n clients are nodes of a graph with a mixing matrix W (`flnet.sim.topology`),
kept sparse: O(n + edges) memory, and each mixing costs O(edges x P).
At iteration k every node i
  line 2: draws a minibatch xi_{k,i} (keyed by (seed, iteration, node));
  line 3: computes g_i = grad F_i(x_{k,i}; xi_{k,i}) at its own model, before mixing;
  line 4: mixes x_{k+1/2,i} = sum_j W_ij x_{k,j} with the models its neighbours sent;
  line 5: sets x_{k+1,i} = x_{k+1/2,i} - gamma g_i.
In matrix form X_{k+1} = W X_k - gamma G_k (rows are nodes; the paper writes X W with columns).
One gradient step per communication (K = 1), communicate-then-compute as in the DFL paper's
eqs. 6-8 (the gradient is taken at the model sent, not the mixed one). In time, a node sends x_k
as it starts computing g_i (`flnet.sim.patterns.exchange`: Lian et al. note that lines 3 and 4
can run in parallel), and the iteration ends when every node has its gradient and its messages.
The optimizer's one step from x_k gives y = x_k - gamma g_i, so line 5 is W_t X_k + (Y - X_k).

A message that did not arrive (late or lost) leaves its weight on the receiver's own model
(W_t, `flnet.learn.aggregate`); a node whose gradient the timeout cut short, or whose compute
dropped out (`clients.dropout_probability`), takes no step that iteration (gamma g_i = 0: it
only mixes; its x_k went out as the compute started). A node offline at the iteration's
start (or opted out by its battery; `exchange`) sits it out: it keeps x_k exactly (no
gradient, no mix; its optimizer state untouched), and its neighbours mix without it (its
messages count as not arrived); `nodes_offline` counts such nodes. The model judged is the
nodes' average x_bar = (1/n) sum_i x_i (Lian et al.'s Theorem 1 bounds its gradient); records
add `consensus_distance`, (1/n) sum_i ||x_i - x_bar||_2^2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from flnet.algorithms.base import Steps
from flnet.algorithms.configs import DpsgdConfig as Config
from flnet.algorithms.decentralized import hold, offline, train_online
from flnet.learn.aggregate import mix
from flnet.learn.cohort import LossFn
from flnet.learn.wire import ModelMessage
from flnet.sim import topology
from flnet.sim.patterns import Packet, exchange
from flnet.sim.world import AbstractWorld, Progress

if TYPE_CHECKING:  # the learning side's object, for annotations only
    from flnet.learn.local import Learner


# What D-PSGD asks of W: row-stochastic and connected to run as written (each mix a weighted
# average; consensus reachable); its analysis (Lian et al. 2017, Assumption 1.2) assumes W
# symmetric and doubly stochastic, so a W without those runs with a warning.
NEEDS = ("row_stochastic", "connected")
ASSUMES = ("symmetric", "doubly_stochastic")


class State(NamedTuple):
    round: int  # iterations done
    x: torch.Tensor  # [n, P] every node's model


def init(learn: Learner, cfg: Config) -> State:
    """Every node starts from the same x_0 (Algorithm 1's input)."""
    x0 = learn.model.init_params()
    return State(0, x0.expand(learn.data.num_clients, -1).clone())


def step(
    w: topology.Mixing, x: torch.Tensor, y: torch.Tensor, arrived: np.ndarray | None = None
) -> torch.Tensor:
    """Lines 4-5: X_{k+1} = W_t X_k - gamma G_k, with gamma G_k = X_k - Y.

    w the sparse W (n nodes, M edges), x [n, P] the models sent, y [n, P] each node's one local
    step from its x, arrived [M] which of w's edges delivered their message (None: all).
    """
    return mix(topology.effective_mixing(w, arrived), x) + (y - x)


def progress(state: State, figures: dict | None = None) -> Progress:
    """The model judged is the nodes' average; the nodes' models go along (consensus);
    `figures` the iteration's W's spectral gap."""
    return Progress(
        state.round, state.x.mean(dim=0), state, pattern="exchange", nodes=state.x, figures=figures
    )


def schedule_of(world: AbstractWorld, cfg: Config) -> topology.Schedule:
    """Every iteration's W; building it checks the first against NEEDS and ASSUMES."""
    return topology.Schedule(
        world, cfg.topology, world.num_clients, algorithm="D-PSGD", needs=NEEDS, assumes=ASSUMES
    )


def check(world: AbstractWorld, learn: Learner, cfg: Config) -> None:
    """Iteration 1's checks of W, without the run (`flnet validate`)."""
    schedule_of(world, cfg)


def protocol(
    world: AbstractWorld,
    learn: Learner,
    cfg: Config,
    state: State,
    loss_fn: LossFn | None = None,
) -> Steps:
    """`loss_fn` replaces the nodes' cross-entropy (tests use one with zero gradients)."""
    n, x = world.num_clients, state.x
    schedule = schedule_of(world, cfg)
    nodes = np.arange(n)
    for k in world.steps(state.round):
        w = schedule.at(k)  # sparse W (drawn afresh each iteration when time-varying)
        links = w.links()  # [M, 2] (j, i): j sends x_j to i for every W_ij > 0
        work = train_online(world, learn, nodes, x, cfg.local, k, loss_fn=loss_fn)  # lines 2-3
        done = yield from exchange(
            world,
            nodes,
            links,
            Packet(x, learn.bits(ModelMessage(x[0]))),
            work.flops,
            tag=k,
            timeout_s=cfg.timeout_s,
            client_state=work.keep,  # persisted optimizer states of the nodes that computed
            present=work.present,  # asked before the local work: only they trained
        )
        arrived = None if done.arrived.all() else done.arrived  # [M]: link e's x_j reached i
        y = work.params if done.computed.all() else _cut(x, work.params, done.computed)
        x = hold(done.present, step(w, x, y, arrived), x)  # lines 4-5; absent nodes keep x
        world.publish(progress(State(k, x), schedule.figures(w) | offline(done.present)))


def _cut(x: torch.Tensor, y: torch.Tensor, computed: np.ndarray) -> torch.Tensor:
    """A node whose gradient the timeout cut takes no step: its y is its x."""
    keep = torch.as_tensor(computed, device=x.device).unsqueeze(1)
    return torch.where(keep, y, x)


if TYPE_CHECKING:  # mypy checks this module against the shape, with its Config and State
    from flnet.algorithms import dpsgd as this_module
    from flnet.algorithms.base import AlgorithmModule

    _shape: AlgorithmModule[Config, State] = this_module
