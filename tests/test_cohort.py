"""The cohort trainer: its two engines agree, batched and sequential agree, masks, counts, state."""

import numpy as np
import pytest
import torch
from tolerance import assert_tensors_close
from torch import nn

from flnet.learn import cohort, optim
from flnet.learn.kernels.dense import DenseStack
from flnet.learn.local import OptimizerStates
from flnet.learn.models import Model
from flnet.runner import Run, run
from flnet.scenario import merge

N, C, T, B = 60, 4, 5, 8


def mlp(bias=True) -> Model:
    torch.manual_seed(0)
    return Model(
        nn.Sequential(
            nn.Flatten(),
            nn.Linear(12, 7, bias=bias),
            nn.ReLU(),
            nn.Linear(7, 6),
            nn.ReLU(),
            nn.Linear(6, 3, bias=bias),
        ),
        (3, 4),
    )


def cnn() -> Model:
    torch.manual_seed(0)
    return Model(
        nn.Sequential(
            nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 3)
        ),
        (1, 6, 6),
    )


def dataset(model: Model):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(N, *model.input_shape, generator=g) * 2
    return x, torch.randint(0, 3, (N,), generator=g)


def start(model: Model) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    return model.init_params() + 0.1 * torch.randn(C, model.num_params, generator=g)


def batches() -> torch.Tensor:
    return torch.randint(0, N, (C, T, B), generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("make_model", [mlp, cnn], ids=["dense", "generic"])
@pytest.mark.parametrize(
    "make_opt",
    [
        lambda: optim.sgd(0.1, momentum=0.9),
        lambda: optim.delta_sgd(),
        lambda: optim.sam(optim.adam(0.01), 0.05),
    ],
    ids=["sgdm", "delta_sgd", "sam_adam"],
)
def test_batched_and_sequential_paths_give_the_same_clients(make_model, make_opt):
    model = make_model()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    steps = torch.tensor([T, 2, T, 1])
    results = [
        trainer.train(start(model), batches(), steps, make_opt(), path=path)
        for path in ("batched", "sequential")
    ]
    assert results[0].snapshot is None and results[1].snapshot is None
    for a, b in zip(
        torch.utils._pytree.tree_leaves(results[0][:-1]),
        torch.utils._pytree.tree_leaves(results[1][:-1]),
    ):
        assert_tensors_close(a, b)


def test_a_masked_client_is_the_client_trained_alone():
    model = cnn()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    rows, p0 = batches(), start(model)
    steps = torch.tensor([T, 3, 1, T])
    res = trainer.train(p0, rows, steps, optim.adam(0.01))
    alone = trainer.train(p0[1:2], rows[1:2, :3], steps[1:2], optim.adam(0.01))
    assert_tensors_close(res.params[1], alone.params[0])
    assert_tensors_close(res.loss[1], alone.loss[0])


def test_auto_path_slices_the_cohort_to_fit_its_memory_budget():
    model = mlp()
    x, y = dataset(model)
    per_client = cohort.Trainer(model, x, y).clients_per_call(1_000_000, B, "auto", optim.sgd(1))
    small = cohort.Trainer(model, x, y, memory_bytes=1)
    assert small.clients_per_call(C, B, "auto", optim.sgd(1)) == 1
    assert small.clients_per_call(C, B, "batched", optim.sgd(1)) == C
    assert 1 < per_client < 1_000_000
    x, y = dataset(cnn())
    assert cohort.Trainer(cnn(), x, y).clients_per_call(C, B, "auto", optim.sgd(1)) == 1


def test_work_counts_every_gradient_evaluation():
    model = mlp()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    steps = torch.tensor([T, 2, 3, 1])
    count = lambda opt: trainer.train(start(model), batches(), steps, opt).grad_evals  # noqa
    assert count(optim.sgd(0.1)).tolist() == steps.tolist()
    assert count(optim.sam(optim.sgd(0.1), 0.1)).tolist() == (2 * steps).tolist()
    # Delta-SGD: its first step has no previous iterate; each later one takes a second gradient
    assert count(optim.delta_sgd()).tolist() == (2 * steps - 1).tolist()
    assert (
        trainer.train(start(model), batches(), steps, optim.sgd(1)).sample_grads.tolist()
        == (B * steps).tolist()
    )
    sam = trainer.train(start(model), batches(), steps, optim.sam(optim.sgd(0.1), 0.1))
    assert sam.sample_grads.tolist() == (2 * B * steps).tolist()


def test_custom_loss_adds_a_term_to_the_gradient():
    """A FedProx-style proximal term through the loss hook: gradient + mu (w - anchor)."""
    model, mu = mlp(), 0.3
    x, y = dataset(model)
    anchor = model.init_params()

    def proximal(model_, params, xb, yb, aux):
        return cohort.cross_entropy(model_, params, xb, yb) + 0.5 * mu * (
            params - anchor
        ).square().sum(1)

    trainer = cohort.Trainer(model, x, y)
    p0, rows, one = start(model), batches()[:, :1], torch.ones(C, dtype=torch.long)
    plain = trainer.train(p0, rows, one, optim.sgd(1.0))
    prox = trainer.train(p0, rows, one, optim.sgd(1.0), loss_fn=proximal)
    assert torch.allclose(prox.params, plain.params - mu * (p0 - anchor), atol=1e-6)


def test_a_loss_linear_in_the_parameters_trains_with_stateful_optimizers():
    """The gradient of sum(w) is one broadcast 1 (a stride-0 tensor); momentum and Adam update
    it in place. Each step of SGD with lr 0.1 lowers every weight by 0.1 times its momentum
    buffer: 1, 1.9, 2.71 after three steps (heavy ball, beta 0.9)."""
    model = mlp()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    p0, rows = start(model), batches()[:, :3]
    three = torch.full((C,), 3, dtype=torch.long)

    def linear(model_, params, xb, yb, aux):
        return params.sum(1)

    out = trainer.train(p0, rows, three, optim.sgd(0.1, momentum=0.9), loss_fn=linear)
    assert torch.allclose(out.params, p0 - 0.1 * (1 + 1.9 + 2.71), atol=1e-5)
    adam = trainer.train(p0, rows, three, optim.adam(0.01), loss_fn=linear)
    assert torch.allclose(adam.params, p0 - 0.03, atol=1e-4)  # Adam: lr per step on a constant


def test_optimizer_states_continue_each_clients_state():
    opt = optim.adam()
    store = OptimizerStates()
    params = torch.zeros(2, 3)
    first = store.gather(np.array([1, 3]), opt, params)
    assert first[0].count.tolist() == [0, 0]
    store.keep(
        np.array([1, 3]), (first[0]._replace(count=torch.tensor([4.0, 7.0])), first[1])
    ).commit(np.array([0, 1]))
    again = store.gather(np.array([3, 4]), opt, params)
    assert again[0].count.tolist() == [7.0, 0.0]  # client 3 continues, client 4 is new


def test_flops_are_counted_from_the_model():
    model = Model(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 10)), (1, 8, 8)
    )
    conv = 2 * (4 * 6 * 6) * (1 * 3 * 3)  # forward; the weight gradient costs the same
    linear = 2 * (4 * 6 * 6) * 10  # forward, weight gradient, input gradient (for the conv)
    assert model.training_flops_per_sample() == 2 * conv + 3 * linear


def test_delta_sgd_is_charged_for_its_second_gradients(scenario):
    local = {"steps": 4, "batch_size": 8}
    sgd = run(scenario(algorithm={"name": "fedavg", "local": local}), write=False)
    delta = run(
        scenario(
            algorithm={
                "name": "fedavg",
                "local": {**local, "lr": None, "optimizer": {"name": "delta_sgd"}},
            }
        ),
        write=False,
    )
    flops = lambda res: res.ledger[res.ledger.kind == "compute"].flops.to_numpy()  # noqa: E731
    fps = sgd.summary["training_flops_per_sample"]
    assert flops(sgd) == pytest.approx(np.full(15, 4 * 8 * fps))
    assert flops(delta) == pytest.approx(np.full(15, (2 * 4 - 1) * 8 * fps))


def test_persistent_optimizer_state_survives_a_resume(tmp_path):
    from test_checkpoint import write_scenario

    path = write_scenario(tmp_path, rounds=10, checkpoint_every=4)
    persist = [
        "algorithm.local.optimizer_state=persist",
        "algorithm.local.lr=0.01",
        "algorithm.local.optimizer.name=adam",
    ]
    run(path, overrides=persist)
    longer = run(path, overrides=[*persist, "run.rounds=20"], resume=True)
    whole = run(path, overrides=[*persist, "run.rounds=20", f"output.dir={tmp_path / 'whole'}"])
    assert longer.records.equals(whole.records)


def test_persistent_optimizer_state_is_kept_only_by_completed_work(scenario):
    """Adam's step count per client = local steps x that client's completed computes: work cut
    at the deadline before its compute ended leaves the client's state as it was."""
    sc = dict(
        algorithm={
            "name": "fedavg",
            "cohort": {"clients_per_round": 6},
            "local": {
                "steps": 3,
                "optimizer": {"name": "adam"},
                "lr": 0.01,
                "optimizer_state": "persist",
            },
        },
        clients={"count": 10, "cpu_hz": {"kind": "lognormal", "median": 1e7, "sigma": 1.0}},
        run={"rounds": 4},
    )
    free = run(scenario(**sc), write=False).ledger
    round_start = free.groupby("round").start_s.transform("min")
    computed = free[free.kind == "compute"].end_s - round_start[free.kind == "compute"]
    deadline = float(computed.median())  # about half the computes end before it
    sim = Run(
        scenario(**merge(sc, {"algorithm": {"cohort": {"deadline_s": deadline}}})), write=False
    )
    sim.simulate()
    ledger = sim.world.ledger.frame()
    computes = ledger[ledger.kind == "compute"]
    done = computes[computes.outcome == "ok"].node.value_counts()
    assert (computes.outcome == "deadline").any() and len(done)  # some cut, some completed
    clients = np.arange(10)
    count = sim.learner.optimizer_states.table.rows(clients)[0]  # AdamState.count
    assert count.tolist() == [3.0 * done.get(k, 0) for k in clients]


def test_persistent_optimizer_state_changes_the_run(scenario):
    local = {"optimizer": {"name": "adam"}, "lr": 0.01}
    runs = [
        run(
            scenario(algorithm={"name": "fedavg", "local": {**local, "optimizer_state": s}}),
            write=False,
        )
        for s in ("reset", "persist")
    ]
    assert not np.allclose(runs[0].records.test_loss, runs[1].records.test_loss)


def test_benchmark_w1_scenario_is_the_w1_the_tests_check():
    from test_fedavg import W1

    from flnet.scenario import load_scenario

    assert load_scenario("benchmarks/w1.yaml") == load_scenario(data=W1)
    load_scenario("benchmarks/digits_1000.yaml")


def sliced_trainer(model, x, y) -> cohort.Trainer:
    """A trainer whose `auto` path cuts a cohort of C into slices of two clients."""
    trainer = cohort.Trainer(model, x, y)
    per_client = trainer.clients_per_call(1_000_000, B, "auto", optim.sgd(1))
    trainer.memory_bytes = trainer.memory_bytes * 2 // per_client
    assert trainer.clients_per_call(C, B, "auto", optim.sgd(1)) == 2
    return trainer


def per_client_proximal(mu):
    """mu/2 ||w - a_c||^2 with each client's own anchor a_c, handed in as aux rows [C, P]."""

    def loss_fn(model_, params, xb, yb, aux):
        return cohort.cross_entropy(model_, params, xb, yb) + 0.5 * mu * (
            params - aux
        ).square().sum(1)

    return loss_fn


def test_a_loss_closing_over_per_client_rows_fails_where_aux_rows_work():
    """The failure this fixes: rows [C, P] closed over by the loss meet a slice's parameters
    on the sequential path; as aux they are sliced with the cohort on every path."""
    model, mu, lr = mlp(), 0.3, 0.5
    x, y = dataset(model)
    trainer = sliced_trainer(model, x, y)
    p0, rows, one = start(model), batches()[:, :1], torch.ones(C, dtype=torch.long)
    anchors = torch.randn(C, model.num_params, generator=torch.Generator().manual_seed(5))
    closed = lambda m, w, xb, yb, aux: per_client_proximal(mu)(m, w, xb, yb, anchors)  # noqa
    with pytest.raises(RuntimeError):
        trainer.train(p0, rows, one, optim.sgd(lr), loss_fn=closed, path="sequential")
    plain = trainer.train(p0, rows, one, optim.sgd(lr))
    for path in ("batched", "sequential", "auto"):
        res = trainer.train(
            p0, rows, one, optim.sgd(lr), loss_fn=per_client_proximal(mu), aux=anchors, path=path
        )
        assert_tensors_close(res.params, plain.params - lr * mu * (p0 - anchors))


def test_aux_rows_reach_the_optimizer_sliced_with_the_cohort():
    """SCAFFOLD's correction as an optimizer transform: each step adds the client's own row."""
    model, lr = mlp(), 0.5
    x, y = dataset(model)
    trainer = sliced_trainer(model, x, y)
    p0, rows, one = start(model), batches()[:, :1], torch.ones(C, dtype=torch.long)
    corr = torch.randn(C, model.num_params, generator=torch.Generator().manual_seed(6))
    plain = trainer.train(p0, rows, one, optim.sgd(lr))
    corrected = optim.chain(optim.add_correction(lambda aux: aux["c"]), optim.sgd(lr))
    for path in ("batched", "sequential", "auto"):
        res = trainer.train(p0, rows, one, corrected, aux={"c": corr}, path=path)
        assert_tensors_close(res.params, plain.params - lr * corr)
    with pytest.raises(ValueError, match="aux leaves"):
        trainer.train(p0, rows, one, corrected, aux={"c": corr[0]})


@pytest.mark.parametrize("path", ["batched", "sequential", "auto"])
@pytest.mark.parametrize("t_snap", [0, 2, [3, 0, 5, 1]], ids=["t0", "t2", "per_client"])
def test_snapshot_at_a_step_is_the_run_stopped_after_that_step(path, t_snap):
    model = mlp()
    x, y = dataset(model)
    trainer = sliced_trainer(model, x, y)
    p0, rows, steps = start(model), batches(), torch.tensor([T, 2, T, 4])
    opt = lambda: optim.sgd(0.1, momentum=0.9)  # noqa: E731  state carried across steps
    res = trainer.train(p0, rows, steps, opt(), path=path, snapshot_at=torch.tensor(t_snap))
    t = torch.tensor(t_snap).expand(C)
    for c in range(C):  # client c's run stopped after t' of its steps, on the same path
        stop = min(int(t[c]), int(steps[c]))
        if stop == 0:
            assert torch.equal(res.snapshot[c], p0[c])
            continue
        stopped = trainer.train(p0, rows[:, :stop], steps.clamp(max=stop), opt(), path=path)
        assert torch.equal(res.snapshot[c], stopped.params[c])
    assert torch.equal(res.params, trainer.train(p0, rows, steps, opt(), path=path).params)
    batched = trainer.train(
        p0, rows, steps, opt(), path="batched", snapshot_at=torch.tensor(t_snap)
    )
    assert_tensors_close(res.snapshot, batched.snapshot)


@pytest.mark.parametrize(
    "algorithm", [{"name": "dpsgd"}, {"name": "fedbuff", "concurrency": 3, "buffer_size": 2}]
)
def test_gossip_and_stream_keep_persisted_optimizer_states(scenario, algorithm):
    """Every completed local work advances its client's Adam count by its steps."""
    local = {"steps": 1, "optimizer": {"name": "adam"}, "lr": 0.01, "optimizer_state": "persist"}
    sim = Run(scenario(algorithm={**algorithm, "local": local}, run={"rounds": 3}), write=False)
    sim.simulate()
    computes = sim.world.ledger.frame().query("kind == 'compute' and outcome == 'ok'")
    done = computes.node.value_counts()
    count = sim.learner.optimizer_states.table.rows(np.arange(10))[0]  # AdamState.count
    assert count.sum() > 0 and count.tolist() == [float(done.get(k, 0)) for k in range(10)]


@pytest.mark.parametrize(
    "make_opt",
    [lambda: optim.sgd(0.1, momentum=0.9), lambda: optim.delta_sgd()],
    ids=["sgdm", "delta_sgd"],
)
@pytest.mark.parametrize("steps", [[T] * C, [T, 2, T, 1]], ids=["uniform", "masked"])
def test_in_place_steps_train_as_the_updates_added(make_opt, steps):
    """The trainer steps through the optimizer's `apply` (params += -lr g, fused); without it,
    through params += updates: the same clients within float rounding, on both the uniform and
    the masked loop."""
    model = mlp()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    p0, rows, steps = start(model), batches(), torch.tensor(steps)
    fused = trainer.train(p0, rows, steps, make_opt())
    assert make_opt().apply is not None
    plain = trainer.train(p0, rows, steps, make_opt()._replace(apply=None))
    assert not torch.equal(fused.params, p0)
    for a, b in zip(torch.utils._pytree.tree_leaves(fused), torch.utils._pytree.tree_leaves(plain)):
        if a is not None:
            assert_tensors_close(a.double(), b.double())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", ["uniform", "masked", "short", "snapshot"])
def test_dense_stack_descend_equals_sgd_on_its_gradient(bias, case, monkeypatch):
    """Plain SGD (`plain_lr`) is stepped by `DenseStack.descend` on its own layout of the
    parameters (`split`), each weight's step fused into its gradient's GEMM, without a [C, P]
    gradient; the same as the gradient assembled and stepped by the optimizer, up to float
    rounding (the GEMM adds -lr times its sum, the optimizer -lr times the rounded gradient;
    compared within tests/tolerance.py). Masked clients keep their parameters; a step with a
    short batch is stepped by the engine's `padded` twin, on the same layout."""
    model = mlp(bias)
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    p0, rows = start(model), batches()
    steps = torch.tensor([T, 2, T, 1] if case == "masked" else [T] * C)
    sizes = None
    if case == "short":
        sizes = np.full((C, T), B)
        sizes[1, 2], sizes[3, 4] = 3, 5
    assert optim.sgd(0.1).plain_lr == 0.1
    descents = []
    descend = DenseStack.descend
    monkeypatch.setattr(DenseStack, "descend", lambda *a: descents.append(1) or descend(*a))
    snap = torch.tensor([3, 1, T, 2]) if case == "snapshot" else None
    fast = trainer.train(p0, rows, steps, optim.sgd(0.1), sizes=sizes, snapshot_at=snap)
    assert len(descents) == T  # every step, the two short ones included
    plain = trainer.train(
        p0, rows, steps, optim.sgd(0.1)._replace(plain_lr=None), sizes=sizes, snapshot_at=snap
    )
    assert len(descents) == T  # the optimizer's step, not the engine's
    assert not torch.equal(fast.params, p0)
    assert_tensors_close(fast.params, plain.params)
    if snap is not None:  # each client's iterate after its t'-th step, read mid-way
        assert_tensors_close(fast.snapshot, plain.snapshot)
        assert not torch.equal(fast.snapshot, fast.params)
    assert_tensors_close(fast.loss, plain.loss)
    assert torch.equal(fast.grad_evals, plain.grad_evals)
    assert torch.equal(fast.sample_grads, plain.sample_grads)


@pytest.mark.parametrize(
    "opt",
    [
        optim.sgd(0.1, momentum=0.9),
        optim.sgd(0.1, weight_decay=1e-4),
        optim.sam(optim.sgd(0.1), 0.05),
        optim.sps(),
        optim.chain(optim.add_correction(), optim.scale_by_learning_rate(0.1)),
    ],
    ids=["momentum", "weight_decay", "sam", "sps", "correction"],
)
def test_only_plain_sgd_offers_the_engine_its_step(opt):
    assert optim.sgd(0.05).plain_lr == 0.05
    assert opt.plain_lr is None


@pytest.mark.parametrize("make_model", [mlp, cnn], ids=["dense", "generic"])
@pytest.mark.parametrize(
    "make_opt", [lambda: optim.sgd(0.1), lambda: optim.adam(0.01)], ids=["sgd", "adam"]
)
def test_a_trainer_reusing_its_buffers_trains_as_a_fresh_one(make_model, make_opt):
    """The trainer and the dense engine keep their step buffers for the next call (the next
    round): a second cohort trains as it would on a fresh trainer, and nothing the first call
    returned changes under it."""
    model = make_model()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    steps = torch.full((C,), T)
    first = trainer.train(start(model), batches(), steps, make_opt())
    leaves = torch.utils._pytree.tree_leaves
    kept = [leaf.clone() for leaf in leaves(first) if leaf is not None]
    p1, rows1 = start(model) - 0.05, batches().flip(0)
    again = trainer.train(p1, rows1, steps, make_opt())
    fresh = cohort.Trainer(model, x, y).train(p1, rows1, steps, make_opt())
    for a, b in zip(leaves(again), leaves(fresh)):
        assert a is b is None or torch.equal(a, b)  # the same code path on the same machine
    assert all(torch.equal(a, b) for a, b in zip([v for v in leaves(first) if v is not None], kept))


@pytest.mark.parametrize(
    "loss",
    [None, "anchor", "own"],
    ids=["plain", "fedprox", "fedasync"],
)
@pytest.mark.parametrize(
    "make_opt", [lambda: optim.sgd(0.1), lambda: optim.adam(0.01)], ids=["sgd", "adam"]
)
def test_calls_of_varying_sizes_train_as_on_fresh_trainers(loss, make_opt, monkeypatch):
    """A stream's calls vary in size: the trainer's and the dense engine's buffers are kept
    for the most clients yet and their plans for every size seen, and each call trains as it
    would on a fresh trainer, bit for bit; with plain SGD a size seen before makes no new
    plan (the steps run on tensors the trainer keeps)."""
    model = mlp()
    x, y = dataset(model)
    made = []
    make_plan = DenseStack._make_plan
    monkeypatch.setattr(
        DenseStack, "_make_plan", lambda *a, **k: made.append(1) or make_plan(*a, **k)
    )
    trainer = cohort.Trainer(model, x, y)
    p0, rows = start(model), batches()
    results = []
    for call, c in enumerate([C, 2, 1, 2, C, 3, 1]):
        p, r = p0[:c] - 0.01 * call, rows.roll(call, 0)[:c]
        steps = torch.full((c,), T)
        fn = {
            "anchor": cohort.ProximalLoss(0.3, p0.mean(0)),
            "own": cohort.ProximalLoss(0.3, None),
        }.get(loss or "", None)
        aux = p.clone() if loss == "own" else None
        got = trainer.train(p, r, steps, make_opt(), loss_fn=fn, aux=aux)
        fresh = cohort.Trainer(model, x, y).train(p, r, steps, make_opt(), loss_fn=fn, aux=aux)
        assert torch.equal(got.params, fresh.params) and torch.equal(got.loss, fresh.loss)
        results.append((got.params, got.params.clone()))
    assert all(torch.equal(a, b) for a, b in results)  # none changed by the calls after it
    if make_opt().plain_lr is not None:
        # 4 sizes on the kept pieces (plain SGD) or [C, P] parameters (a proximal loss), the
        # largest first (each fresh trainer made its own)
        assert len(made) == 4 + 7


@pytest.mark.parametrize("case", ["uniform", "masked"])
def test_a_proximal_loss_takes_the_plain_sgd_step_through_the_dense_engine(case, monkeypatch):
    """FedProx's loss over the dense engine steps plain SGD without a [C, P] gradient too
    (each piece plus its slice of mu (w - anchor)): the optimizer's step after
    `ProximalLoss.over`'s gradient, with the same losses (within tests/tolerance.py)."""
    model = mlp()
    x, y = dataset(model)
    trainer = cohort.Trainer(model, x, y)
    p0, rows = start(model), batches()
    steps = torch.tensor([T, 2, T, 1] if case == "masked" else [T] * C)
    prox = cohort.ProximalLoss(0.3, p0.mean(0) + 0.2)
    gradients = []
    call = DenseStack.__call__
    monkeypatch.setattr(
        DenseStack, "__call__", lambda *a, **k: gradients.append(1) or call(*a, **k)
    )
    fast = trainer.train(p0, rows, steps, optim.sgd(0.1), loss_fn=prox)
    assert not gradients  # no [C, P] gradient assembled
    plain = trainer.train(p0, rows, steps, optim.sgd(0.1)._replace(plain_lr=None), loss_fn=prox)
    assert len(gradients) == T
    assert not torch.equal(fast.params, p0)
    assert_tensors_close(fast.params, plain.params)  # two paths (see the test above)
    assert_tensors_close(fast.loss, plain.loss)
