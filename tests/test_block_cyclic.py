"""Block-cyclic data (label windows, the block clock by rounds and by simulated time), MM-PSGD's
predictors against hand averages, MC-PSGD's separate chains and its traffic, and exact resume
(Ding et al. 2020; digest block_cyclic.md)."""

import numpy as np
import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import mc_psgd, mm_psgd
from flnet.errors import ScenarioError
from flnet.learn.data import blocks, embedded, minibatches
from flnet.learn.data.blocks import BlockClock
from flnet.runner import build, run
from flnet.scenario import load_scenario, merge

DIGITS = embedded.digits()


def small(tmp_path, name, blocks_cfg, rounds=6, **extra):
    """20 digits clients, all in every round, 2 blocks."""
    from conftest import BASE

    data = merge(
        BASE,
        {
            "output": {"dir": str(tmp_path / "out")},
            "data": {"dataset": "digits", "blocks": {"num_blocks": 2, **blocks_cfg}},
            "model": {"kind": "mlp", "hidden": [16]},
            "algorithm": {
                "name": name,
                "cohort": {"clients_per_round": 20},
                "local": {"steps": 3, "batch_size": 8, "lr": 0.05},
            },
            "clients": {"count": 20},
            "run": {"rounds": rounds, "eval_every": 2},
        },
    )
    return load_scenario(data=merge(data, extra))


def test_label_windows_share_one_label_with_each_neighbour():
    assert [w.tolist() for w in blocks.label_windows(10, 2)] == [
        [0, 1, 2, 3, 4, 5],
        [5, 6, 7, 8, 9, 0],
    ]
    assert [w.tolist() for w in blocks.label_windows(10, 5)][4] == [8, 9, 0]


def test_each_row_is_in_one_block_and_a_shared_label_is_split_evenly():
    y = DIGITS.y_train
    rows = blocks.block_rows(y, 2, np.random.default_rng(0))
    assert sorted(np.concatenate(rows).tolist()) == list(range(len(y)))
    for m, window in enumerate(blocks.label_windows(10, 2)):
        assert set(y[rows[m]].tolist()) == set(window.tolist())
    for shared in (0, 5):
        n0, n1 = ((y[r] == shared).sum() for r in rows)
        assert abs(n0 - n1) <= 1 and n0 + n1 == (y == shared).sum()


def test_a_clients_block_rows_are_its_slice_of_the_label_sorted_block():
    y = DIGITS.y_train
    split = blocks.split(y, DIGITS.y_test, 2, 20, seed=0)
    block_rows = blocks.block_rows(y, 2, blocks.generator(0, blocks.Stream.BLOCKS, 0))
    for m, views in enumerate(split.train):
        parts = list(views)
        assert len(parts) == 20 and min(map(len, parts)) >= 2
        joined = np.concatenate(parts)
        assert sorted(joined.tolist()) == block_rows[m].tolist()  # the block's rows, once each
        assert np.all(np.diff(y[joined]) >= 0)  # "in sequence": cut from the label-sorted block
        sizes = np.array(list(map(len, parts)))
        assert sizes.std() > 0  # unbalanced (Normal sizes), not equal shares
    windows = blocks.label_windows(10, 2)
    for m, rows in enumerate(split.test):  # each block's test rows hold that block's labels
        assert set(DIGITS.y_test[rows].tolist()) <= set(windows[m].tolist())


def test_minibatches_of_a_block_come_from_the_clients_rows_of_that_block(tmp_path):
    _, learn = build(small(tmp_path, "fedavg", {"rounds_per_block": 2}))
    clients = np.arange(20)
    for m in (0, 1):
        data = learn.data_in(m)
        rows = minibatches(data, clients, 3, np.full(20, 4), 8, seed=0).numpy()
        for k in clients:
            assert set(rows[k].ravel().tolist()) <= set(data.blocks.train[m][k].tolist())


def test_the_clock_by_rounds_and_by_seconds():
    by_rounds = BlockClock(3, rounds_per_block=2)
    assert [by_rounds.block(t, 0.0) for t in range(1, 8)] == [0, 0, 1, 1, 2, 2, 0]
    by_time = BlockClock(2, block_s=10.0)
    assert [by_time.block(9, s) for s in (0.0, 9.99, 10.0, 25.0, 30.0)] == [0, 0, 1, 0, 1]


def test_blocks_switch_at_the_configured_simulated_times(tmp_path):
    """A round trains on the block in force when it starts: the previous round's end time."""
    sc = small(tmp_path, "fedavg", {"block_s": 0.2}, rounds=12)
    world, learn = build(sc)
    trained_on = {}
    train = learn.local_train

    def spy(clients, start, local, round, **kw):
        trained_on[round] = kw["block"]
        return train(clients, start, local, round, **kw)

    learn.local_train = spy
    from flnet.algorithms import fedavg

    state = fedavg.init(learn, sc.algorithm)
    seen = run_protocol(world, 12, fedavg.protocol(world, learn, sc.algorithm, state))
    starts = [0.0] + [p.sim_time_s for p in seen[:-1]]
    expected = {p.step: int(s // 0.2) % 2 for p, s in zip(seen, starts)}
    assert trained_on == expected and set(expected.values()) == {0, 1}


def states_of(sc, module, rounds):
    world, learn = build(sc)
    state = module.init(learn, sc.algorithm)
    return [
        p.state
        for p in run_protocol(world, rounds, module.protocol(world, learn, sc.algorithm, state))
    ]


@pytest.mark.parametrize("averaging", ["uniform", "exponential"])
def test_mm_predictor_is_the_average_of_its_blocks_global_models(tmp_path, averaging):
    sc = small(tmp_path, "mm_psgd", {"rounds_per_block": 2}, algorithm={"averaging": averaging})
    states = states_of(sc, mm_psgd, 6)
    x = {s.round: s.x for s in states}
    # rounds 1, 2, 5, 6 are block 0's; 3, 4 block 1's
    if averaging == "uniform":  # eq. (7)
        want0 = (x[1] + x[2] + x[5] + x[6]) / 4
        want1 = (x[3] + x[4]) / 2
    else:  # weights 0.5^(r - j), normalised
        want0 = (x[1] / 8 + x[2] / 4 + x[5] / 2 + x[6]) / (1 / 8 + 1 / 4 + 1 / 2 + 1)
        want1 = (x[3] / 2 + x[4]) / 1.5
    assert_tensors_close(states[-1].predictors[0], want0)
    assert_tensors_close(states[-1].predictors[1], want1)
    assert_tensors_close(
        states[3].predictors[0],
        (x[1] + x[2]) / 2 if averaging == "uniform" else (x[1] / 2 + x[2]) / 1.5,
    )  # predictor 0 rests during block 1


def test_mc_chains_stay_separate_and_the_mixed_chain_is_mm_psgds(tmp_path):
    sc = small(tmp_path, "mc_psgd", {"rounds_per_block": 2})
    states = states_of(sc, mc_psgd, 6)
    w = {s.round: s.w for s in states}
    # a block's separate chain rests while the other block runs ...
    assert torch.equal(w[2][1], w[1][1]) and torch.equal(w[4][0], w[2][0])
    assert torch.equal(w[6][1], w[4][1])
    assert not torch.equal(w[5][0], w[4][0])
    # ... and resumes from where it stopped: round 5 trains block 0's chain from W[0] of round 2
    _, learn = build(sc)
    resumed = learn.local_train(np.arange(20), w[2][0], sc.algorithm.local, 5, block=0)
    assert_tensors_close(w[5][0], resumed.params.mean(0))
    # the block-mixed chain is MM-PSGD's (FedAvg's) chain: the same trajectory (another
    # protocol's code path, so within tests/tolerance.py, not bit for bit)
    mm = small(tmp_path, "mm_psgd", {"rounds_per_block": 2})
    assert_tensors_close(states_of(mm, mm_psgd, 6)[-1].x, states[-1].x)


def test_mc_folds_the_lower_loss_model_into_its_blocks_predictor(tmp_path):
    sc = small(
        tmp_path, "mc_psgd", {"rounds_per_block": 2}, rounds=3, algorithm={"separate_lr": 0.3}
    )
    states = states_of(sc, mc_psgd, 3)
    # round 2 folds round 1's models into predictor 0 (uniform: the first fold is the model)
    world, learn = build(sc)
    losses = [
        learn.query_losses(np.arange(20), model, 32, 2, blocks.Stream.BLOCK_LOSS, 0).mean()
        for model in (states[0].x, states[0].w[0])
    ]
    chosen, other = (states[0].w[0], states[0].x)[:: 1 if losses[1] < losses[0] else -1]
    assert_tensors_close(states[1].predictors[0], chosen)
    assert (other - chosen).abs().max() > 1e-3  # eta != gamma: the two chains differ
    assert states[1].separate_wins == int(losses[1] < losses[0])


def test_mc_uplink_is_twice_mm_psgds_plus_two_losses(tmp_path):
    def bits(algorithm):
        sc = small(tmp_path / algorithm, algorithm, {"rounds_per_block": 2}, rounds=4)
        return run(sc).records.iloc[-1]

    mm, mc = bits("mm_psgd"), bits("mc_psgd")
    # losses are asked from round 2 on: 3 rounds x 20 clients x 2 fp32
    assert mc.bits_up == 2 * mm.bits_up + 3 * 20 * 2 * 32
    model_bits = mm.bits_down / (4 * 20)
    # models a round: 1 (round 1: x; y starts at x = x_0), 2, 3 (block switch: W[1]), 2
    assert mc.bits_down == (1 + 2 + 3 + 2) * 20 * model_bits
    assert mc.energy_j > mm.energy_j


def test_mc_sends_what_a_round_uses_and_judges_its_blocks_predictor(tmp_path, monkeypatch):
    """Round 4 (block 1) delivers nothing: round 5 asks no losses and sends W[0], where its
    chain starts; every round (the empty one too) is judged on its block's predictor, live and
    by `progress` alike."""
    downs = {}
    real = mc_psgd.round_trip

    def spy(world, cohort, down, flops, up, *, tag, **kw):
        downs[tag] = down.payload
        if tag == 4:
            kw["deadline_s"] = 1e-12
        return (yield from real(world, cohort, down, flops, up, tag=tag, **kw))

    monkeypatch.setattr(mc_psgd, "round_trip", spy)
    sc = small(tmp_path, "mc_psgd", {"rounds_per_block": 2})
    world, learn = build(sc)
    state = mc_psgd.init(learn, sc.algorithm)
    seen = run_protocol(world, 6, mc_psgd.protocol(world, learn, sc.algorithm, state))
    by_round = {p.step: p for p in seen}
    assert torch.equal(by_round[4].state.x, by_round[3].state.x)  # round 4: nothing delivered
    sizes = {t: (d[1].numel(), d[2].numel()) for t, d in downs.items()}  # (asked, start)
    p = downs[1][0].numel()
    assert sizes == {1: (0, 0), 2: (p, 0), 3: (p, p), 4: (p, 0), 5: (0, p), 6: (p, 0)}
    assert torch.equal(downs[5][2], by_round[4].state.w[0])
    for t, block in {1: 0, 2: 0, 3: 1, 4: 1, 5: 0, 6: 0}.items():
        live = by_round[t]
        assert torch.equal(live.model, live.state.predictors[block])
        assert torch.equal(mc_psgd.progress(live.state).model, live.model)
    # round 4's block-1 predictor is still x_0 (round 3's models were never folded), so judging
    # block 0's predictor there would be a different model
    assert not torch.equal(by_round[4].state.predictors[0], by_round[4].state.predictors[1])


def test_mc_psgd_with_blocks_by_time_resumes_exactly(tmp_path):
    def make(name):
        return small(
            tmp_path,
            "mc_psgd",
            {"block_s": 0.15},
            rounds=8,
            algorithm={"averaging": "exponential"},
            radio={"rayleigh_fading": True},
            run={"checkpoint_every": None, "checkpoint_interval_s": None},
            output={"dir": str(tmp_path / name)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(3))
    assert {"block_0_accuracy", "predictor_1_test_accuracy"} <= set(whole.records.columns)


@pytest.mark.parametrize(
    "blocks_cfg, extra, field",
    [
        ({}, {}, "data.blocks.rounds_per_block"),
        ({"rounds_per_block": 2, "block_s": 1.0}, {}, "data.blocks.rounds_per_block"),
        (
            {"rounds_per_block": 2},
            {"partition": {"kind": "dirichlet", "alpha": 0.5}},
            "data.blocks",
        ),
    ],
)
def test_bad_block_settings_name_the_field(tmp_path, blocks_cfg, extra, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        small(tmp_path, "fedavg", blocks_cfg, data=extra)


def test_mc_psgd_refuses_persisted_optimizer_states(tmp_path):
    with pytest.raises(ScenarioError, match=r"algorithm\.local\.optimizer_state"):
        small(
            tmp_path,
            "mc_psgd",
            {"rounds_per_block": 2},
            algorithm={"local": {"optimizer": {"name": "adam"}, "optimizer_state": "persist"}},
        )


def test_fedavgs_block_accuracies_recompose_its_test_accuracy(tmp_path):
    """The blocks' test rows partition the test set: FedAvg's one model, judged per block,
    weighted by block test sizes, gives back its whole-test accuracy."""
    sc = small(tmp_path, "fedavg", {"rounds_per_block": 2}, rounds=4)
    rec = run(sc, write=False).records
    _, learn = build(sc)
    sizes = np.array([len(r) for r in learn.data.blocks.test])
    assert sizes.sum() == len(learn.data.y_test)
    for _, row in rec.iterrows():
        per_block = np.array([row.block_0_accuracy, row.block_1_accuracy])
        assert (per_block * sizes).sum() / sizes.sum() == pytest.approx(row.test_accuracy)
        assert row.block_accuracy_mean == pytest.approx(per_block.mean())
        assert row.block_accuracy_max == per_block.max()


@pytest.mark.parametrize("name", ["fedprox", "scaffold", "moon"])
def test_algorithms_that_do_not_follow_the_blocks_are_refused(tmp_path, name):
    """Only fedavg, mm_psgd and mc_psgd pass the round's block to local training: any other
    would train on block 0's rows throughout, so the scenario is refused naming data.blocks."""
    with pytest.raises(ScenarioError, match=r"data\.blocks.*fedavg, mm_psgd, mc_psgd only"):
        small(tmp_path, name, {"rounds_per_block": 2})


def test_stragglers_epochs_are_epochs_of_the_rounds_block(tmp_path):
    """A straggler's `amount` epochs are epochs of its rows in the round's block (not block
    0's). FedAvg drops its stragglers, but the plan is the one FedProx's would be."""
    from flnet.algorithms import partial

    sc = small(
        tmp_path,
        "fedavg",
        {"rounds_per_block": 1},
        rounds=2,
        algorithm={
            "local": {"steps": None, "epochs": 3, "batch_size": 8},
            "partial_work": {"kind": "stragglers", "fraction": 1.0},
        },
    )
    world, learn = build(sc)
    cohort = np.arange(20)
    epochs_of = [-(-learn.samples_in(block)[cohort] // 8) for block in (0, 1)]  # ceil(n_k / B)
    assert (epochs_of[0] != epochs_of[1]).any()
    for t, block in ((1, 0), (2, 1)):
        cfg = sc.algorithm
        p = partial.plan(world, learn, cfg.partial_work, cfg.local, cohort, t, 1.0, None, block)
        amounts = p.steps // epochs_of[block]
        assert (p.steps == amounts * epochs_of[block]).all()
        assert ((1 <= amounts) & (amounts <= 3)).all()


def test_the_partition_table_has_each_blocks_label_histogram(tmp_path):
    """A client's rows change with the block: the partition table stacks one histogram per
    block (column `block`), each client's counts those of its rows in that block, by hand;
    block m's labels lie in its window."""
    sc = small(tmp_path, "fedavg", {"rounds_per_block": 1})
    _, learn = build(sc)
    data = learn.data
    table = data.label_histogram()
    assert table.columns[0] == "block" and len(table) == 2 * 20
    y = data.y_train.numpy()
    windows = blocks.label_windows(data.num_classes, 2)
    for m in range(2):
        part = table[table.block == m].set_index("client")
        for k in range(20):
            rows, _ = data.blocks.train[m].gather([k])
            hand = np.bincount(y[rows], minlength=data.num_classes)
            got = part.loc[k, [f"label_{c}" for c in range(data.num_classes)]].to_numpy()
            assert got.tolist() == hand.tolist() and part.loc[k, "num_samples"] == len(rows)
        held = [c for c in range(data.num_classes) if part[f"label_{c}"].sum() > 0]
        assert set(held) <= set(windows[m].tolist())
    assert (
        not table[table.block == 0]
        .drop(columns="block")
        .equals(table[table.block == 1].drop(columns="block"))
    )


def test_client_accuracy_is_on_the_rows_of_the_block_in_force(tmp_path):
    """One block a round: the records' client accuracy at round t is the global model's
    accuracy on each client's rows of round t's block ((t - 1) mod 2), by hand, not block
    0's (which differ in rounds of block 1); round 0's is block 0's."""
    from harness import Keep

    sc = small(tmp_path, "fedavg", {"rounds_per_block": 1}, rounds=3, run={"eval_every": 1})
    keep = Keep(99)
    rec = run(sc, write=False, observers=[keep]).records.set_index("round")
    _, learn = build(sc)
    data = learn.data
    y = data.y_train

    def by_hand(params, m):
        accs = []
        for k in range(20):
            rows, _ = data.blocks.train[m].gather([k])
            ix = torch.as_tensor(rows)
            pred = learn.model.predict(params, data.x_train[ix]).argmax(1)
            accs.append((pred == y[ix]).double().mean().item())
        return np.array(accs)

    differs = 0
    for p in keep.seen:
        m = max(p.step - 1, 0) % 2  # round 0 (the initial model): block 0, where runs start
        hand = by_hand(p.model, m)
        row = rec.loc[p.step]
        assert row.client_accuracy_mean == pytest.approx(hand.mean(), rel=1e-12)
        assert row.client_accuracy_worst == pytest.approx(hand.min(), rel=1e-12)
        differs += m == 1 and not np.isclose(hand.mean(), by_hand(p.model, 0).mean())
    assert differs >= 1


def test_the_deadline_check_counts_the_fewest_rows_of_any_block(tmp_path):
    """With epochs, `check_deadline` refuses a deadline shorter than the fastest client's
    round on the fewest rows any client holds: in block 1 here (12 rows), not block 0 (27),
    so a deadline between the two rounds' times is accepted (it was refused)."""
    from flnet.runner import check_deadline

    local = {"steps": None, "epochs": 1, "batch_size": 8}
    sc = small(tmp_path, "fedavg", {"rounds_per_block": 1}, algorithm={"local": local})
    world, learn = build(sc)
    fewest = [int(learn.samples_in(m).min()) for m in (0, 1)]
    assert fewest == [27, 12]
    bits = learn.charged.num_params * 32

    def fastest(samples):
        return world.fastest_round_trip_s(bits, samples * learn.flops_per_sample, bits)

    def with_deadline(s):
        cohort = {"clients_per_round": 20, "deadline_s": s}
        return small(
            tmp_path,
            "fedavg",
            {"rounds_per_block": 1},
            algorithm={"local": local, "cohort": cohort},
        )

    check_deadline(with_deadline((fastest(12) + fastest(27)) / 2), world, learn)
    with pytest.raises(ScenarioError, match="algorithm.cohort.deadline_s"):
        check_deadline(with_deadline(fastest(12) * 0.99), world, learn)
