"""W1 side by side (benchmarks/bench.py --w1): the plain references reproduce W1, Flower's
client trains as they do, and the report reads right with Flower present or absent. No timing is
asserted; Flower itself is only needed by the tests that import it (the `bench` extra)."""

import json
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tolerance import accuracy_close

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench
import w1_reference as ref


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_childs_peak_memory_is_its_own_not_its_parents():
    """getrusage's ru_maxrss in a child started from a 1 GiB process says at least 1 GiB (Linux
    keeps it across exec); the benchmark's children report their own peak."""
    ballast = np.ones(2**30 // 8)  # 1 GiB, touched
    out = subprocess.run(
        [sys.executable, "-c", "import bench; print(bench.peak_rss_mb())"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(bench.__file__).parent,
    )
    assert ballast.sum() == 2**27  # still alive while the child ran
    assert float(out.stdout) < 600, out.stdout  # python + torch: about 200 MB here


def test_plain_torch_loop_reproduces_w1_at_round_10():
    """BENCHMARKS.md: plain PyTorch FedAvg gives 0.7861 after round 10 (exactly on the machine
    that measured it; within one test sample of 360 across CPUs, as tests/test_fedavg.py)."""
    _, curve = ref.torch_loop(rounds=10)
    assert list(curve) == [10]
    assert accuracy_close(curve[10], ref.W1_CURVE[0], eval_rows=360)


def test_plain_vmap_reproduces_w1s_curve():
    _, curve = ref.torch_vmap()
    assert list(curve) == [10, 20, 30, 40, 50]
    assert accuracy_close(list(curve.values()), ref.W1_CURVE, eval_rows=360)


def test_references_train_on_flnets_w1_rows():
    """The references' split, client parts and minibatch keys are flnet's W1: the same
    training features and, in a round, every client's same [10, 32] training rows."""
    from flnet.learn import data as data_mod
    from flnet.scenario import DataConfig

    flnet_data = data_mod.load(DataConfig(), ref.CLIENTS, seed=0, device=torch.device("cpu"))
    rows = data_mod.minibatches(
        flnet_data, np.arange(ref.CLIENTS), 3, np.full(ref.CLIENTS, ref.STEPS), ref.BATCH, seed=0
    )
    data = ref.load()
    mine = np.stack([p[ref.minibatch_rows(3, k, len(p))] for k, p in enumerate(data.parts)])
    assert np.array_equal(rows.numpy(), mine)
    assert torch.equal(flnet_data.x_train.flatten(1), data.x_train)
    assert torch.equal(flnet_data.y_train, data.y_train) and len(data.y_test) == 360


def test_flower_client_trains_as_the_plain_loop(monkeypatch):
    """Flower's ClientApp train function, called as the simulation calls it, replies with the
    weights of the plain loop's local training and its sample count as the FedAvg weight."""
    pytest.importorskip("flwr")
    import flower_w1
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.supercore.task_identity import TaskIdentity

    for key in ("_task_id", "_run_id", "_node_id"):  # what a simulation sets for its messages
        monkeypatch.setattr(TaskIdentity, key, 1)

    assert isinstance(flower_w1.client_app(), ClientApp)
    assert isinstance(flower_w1.server_app(ref.ROUNDS, {}), ServerApp)
    start = ref.init_model()
    msg = Message(
        RecordDict(
            {"arrays": ArrayRecord(start.state_dict()), "config": ConfigRecord({"server-round": 4})}
        ),
        dst_node_id=1,
        message_type="train",
    )
    context = Context(1, 1, {"partition-id": 42}, RecordDict(), {})
    reply = flower_w1.train(msg, context)
    expected = ref.init_model()
    n = ref.train_client(expected, ref.load(), 4, 42)
    assert reply.content["metrics"]["num-examples"] == n == 14
    got = reply.content["arrays"].to_torch_state_dict()
    for name, value in expected.state_dict().items():
        assert torch.equal(got[name], value), name  # the same code on the same machine
    assert not torch.equal(got["0.weight"], start.state_dict()["0.weight"])


def fake_runs(walls: dict[str, list[float]], curves: dict[str, tuple]):
    """A stand-in for bench.w1_run: the next canned result of each variant."""
    made = {label: iter(ws) for label, ws in walls.items()}

    def run(label, **kwargs):
        wall_s = next(made[label])
        acc = {"0": 0.1, **{str(10 * (i + 1)): a for i, a in enumerate(curves[label])}}
        parts = {f"{key}_wall_s": 0.02 * wall_s for key in bench.OUTSIDE_PARTS}
        return {"wall_s": wall_s, "trainer_wall_s": 0.8 * wall_s, "accuracy": acc, **parts}

    return run


def test_w1_section_without_flower_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "flwr", None)  # `import flwr` raises ImportError
    walls = {label: [1.0, 2.0] for label in bench.W1_VARIANTS if label != bench.FLOWER}
    monkeypatch.setattr(bench, "w1_run", fake_runs(walls, dict.fromkeys(walls, ref.W1_CURVE)))
    bench.w1_side_by_side(2)  # a Flower run would find no canned result and raise
    out = capsys.readouterr().out
    skip = [line for line in out.splitlines() if "Flower W1: skipped" in line]
    assert len(skip) == 1 and "make bench" in skip[0] and "pip install -e .[bench]" in skip[0]
    assert "ratio of medians" not in out
    assert "flnet W1 (benchmarks/w1.yaml)" in out and "outside 20% of wall" in out
    # outside: 0.2 of 1 and 2 s, of which each part 0.02
    parts = ", ".join(f"{key} 30" for key in bench.OUTSIDE_PARTS)
    rest = 300 - 30 * len(bench.OUTSIDE_PARTS)
    assert f"outside, median ms: {parts}, the rest {rest} (of 300)" in out


def test_w1_section_prints_the_ratio_of_medians_and_the_curves_agreement(monkeypatch, capsys):
    monkeypatch.setattr(bench, "flower_missing", lambda: None)
    one_off = (0.7861, 0.8806 + 1 / 360, 0.9028, 0.9167, 0.9278)
    walls = {label: [1.0, 3.0, 2.0] for label in bench.W1_VARIANTS}
    walls[bench.FLOWER] = [70.0, 40.0, 50.0]
    curves = {**dict.fromkeys(walls, ref.W1_CURVE), bench.FLOWER: one_off}
    monkeypatch.setattr(bench, "w1_run", fake_runs(walls, curves))
    bench.w1_side_by_side(3)
    out = capsys.readouterr().out
    ratio = statistics.median(walls[bench.FLOWER]) / statistics.median(walls[bench.FLNET])
    assert f"ratio of medians: {ratio:.1f}x" in out and ratio == 25
    flower = next(line for line in out.splitlines() if bench.FLOWER in line)
    assert "within one test sample of 360" in flower and "[40.00-70.00]" in flower
    flnet = next(line for line in out.splitlines() if bench.FLNET in line)
    assert "the same curve in all 3 runs" in flnet


def test_curve_agreement_counts_test_samples():
    same, two_off = ref.W1_CURVE, (0.7861 - 2 / 360, *ref.W1_CURVE[1:])
    assert bench.curve_agreement([same, same]) == "the same curve in all 2 runs"
    assert bench.curve_agreement([same, two_off]).startswith("DIFFERS: up to 2 test samples")
    assert bench.curve_agreement([same[:4]]).startswith("DIFFERS: not evaluated")


def test_training_option_prints_the_training_table_and_nothing_else(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # main's; not the suite's
    monkeypatch.setattr(bench, "matmul_peak_gflops", lambda reps: 100.0)
    monkeypatch.setattr(bench, "training_table", lambda peak, reps: ran.append(("table", reps)))
    for section in ("channel_report", "scenarios_report", "w1_side_by_side"):
        monkeypatch.setattr(bench, section, lambda *a, name=section: ran.append((name,)))
    bench.main(["--training"])
    assert ran == [("table", 3)]
    assert "float32 matmul peak: 100.0 GFLOP/s" in capsys.readouterr().out
    bench.main([])  # the whole benchmark goes on past the table
    assert ran[1:] == [("table", 3), ("channel_report",), ("scenarios_report",)]


def test_a_plain_replay_of_the_recorded_plan_reaches_w1s_curve(tmp_path, monkeypatch):
    """What pfl's side trains (benchmarks/pfl_side.py) is what flnet trained: a plain torch
    FedAvg over the plan flnet's W1 run wrote (each round's clients, their rows in order in
    minibatches of 32, weights, initial model, lr) reaches W1's accuracy after round 10."""
    from flnet import runner

    w1, overrides = str(Path(bench.__file__).parent / "w1.yaml"), ["run.rounds=10"]
    recorder = bench.PlanRecorder(tmp_path / "plan")
    recorder.install(monkeypatch.setattr)
    runner.run(w1, [*overrides, f"output.dir={tmp_path}/out"], write=False)
    recorder.write(w1, overrides)
    plan = np.load(tmp_path / "plan" / "plan.npz")
    meta = json.loads((tmp_path / "plan" / "meta.json").read_text())
    assert meta == {"lr": 0.05, "batch_size": 32, "eval_every": 10}
    assert plan["rows"].shape == (10, 100, 320) and plan["weights"].sum(1).tolist() == [1437] * 10
    model = torch.load(tmp_path / "plan" / "model.pt", weights_only=False)
    x, y = torch.from_numpy(plan["x_train"]), torch.from_numpy(plan["y_train"])
    for rows, weights in zip(plan["rows"], plan["weights"]):
        start = [p.detach().clone() for p in model.parameters()]
        total = [torch.zeros_like(p) for p in start]
        for client_rows, weight in zip(rows, weights):
            for p, s in zip(model.parameters(), start):
                p.data.copy_(s)
            opt = torch.optim.SGD(model.parameters(), meta["lr"])
            for batch in torch.from_numpy(client_rows).view(-1, meta["batch_size"]):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
                opt.step()
            for t, p in zip(total, model.parameters()):
                t.add_(p.detach(), alpha=float(weight) / weights.sum())
        for p, t in zip(model.parameters(), total):
            p.data.copy_(t)
    with torch.no_grad():
        logits = model(torch.from_numpy(plan["x_test"]))
    accuracy = float((logits.argmax(1) == torch.from_numpy(plan["y_test"])).float().mean())
    assert accuracy_close(accuracy, ref.W1_CURVE[0], eval_rows=360)


def test_pfl_runs_workers_sum_cpu_take_the_slowest_wall_and_the_first_curve(tmp_path):
    """pfl_run reads one JSON line per torchrun worker: wall the slowest's, CPU the sum,
    accuracy the first worker's; a missing worker's line is an error, not a result."""
    (tmp_path / "meta.json").write_text("{}")
    python = tmp_path / "python"
    lines = [
        '{"rank": 1, "wall_s": 3.0, "cpu_s": 2.5, "accuracy": {}}',
        '{"rank": 0, "wall_s": 2.0, "cpu_s": 1.5, "accuracy": {"10": 0.5}}',
    ]
    # a stand-in for torchrun: each worker's JSON into --out (the last argument)
    python.write_text(
        '#!/bin/sh\necho "$@" > '
        + str(tmp_path / "args")
        + "\necho 'a log line'\n"
        + 'for last; do :; done\nout="${last#--out=}"\n'
        + "".join(f"echo '{line}' > \"$out/rank{i}.json\"\n" for i, line in enumerate(lines))
    )
    python.chmod(0o755)
    got = bench.pfl_run(python, 2, tmp_path)
    assert got == {"wall_s": 3.0, "cpu_s": 4.0, "accuracy": {"10": 0.5}}
    args = (tmp_path / "args").read_text().split()
    assert args[:4] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    assert args[-3:-1] == [str(Path(bench.__file__).parent / "pfl_side.py"), str(tmp_path)]
    assert "error" in bench.pfl_run(python, 3, tmp_path)
    assert "error" in bench.pfl_run(python, 2, tmp_path / "nowhere")


def test_c1_section_prints_the_ratio_and_how_close_the_curves_are(monkeypatch, capsys, tmp_path):
    import c1_data

    monkeypatch.setattr(bench, "pfl_missing", lambda python: None)
    monkeypatch.setattr(c1_data, "write", lambda root: root / "cifar-10-batches-py")
    walls = {bench.C1_FLNET: iter([20.0, 22.0, 30.0]), bench.PFL2: iter([40.0, 33.0, 36.0])}
    curves = {bench.C1_FLNET: {"5": 0.61, "10": 0.80}, bench.PFL2: {"5": 0.6, "10": 0.815}}

    def run(label, data_root, plan, pfl_python):
        wall_s = next(walls[label])
        parts = {f"{key}_wall_s": wall_s / 10 for key in ("trainer", "evaluation", "build")}
        return {
            "wall_s": wall_s,
            "cpu_s": 1.0,
            "trainer_cpu_s": 1.5,
            **parts,
            "accuracy": {"0": 0.1, **curves[label]},
        }

    monkeypatch.setattr(bench, "c1_run", run)
    bench.c1_side_by_side(3)
    out = capsys.readouterr().out
    assert "ratio of medians: 1.64x (target >= 1.5x)" in out  # 36 / 22
    assert "at most 1.50 points apart (rounds [5, 10]); final 1.50 points apart (within 2)" in out
    assert "test accuracy after round 5: 0.6100 10: 0.8000" in out
    assert "inside cohort.Trainer.train 2.20 s (1.5 CPU-s), evaluation 2.20 s" in out


def test_w1_and_c1_say_how_to_get_pfl_when_it_is_absent(monkeypatch, capsys, tmp_path):
    import c1_data

    monkeypatch.setattr(bench, "flower_missing", lambda: "no flwr")
    monkeypatch.setattr(c1_data, "write", lambda root: root / "cifar-10-batches-py")
    ran = []

    def run(label, *args, **kwargs):
        ran.append(label)
        return {"error": "not run here"}

    monkeypatch.setattr(bench, "w1_run", run)
    monkeypatch.setattr(bench, "c1_run", run)
    bench.w1_side_by_side(1, pfl_python=tmp_path / "python")
    bench.c1_side_by_side(1, pfl_python=tmp_path / "python")
    out = capsys.readouterr().out
    skips = [line for line in out.splitlines() if "pfl-research: skipped" in line]
    assert len(skips) == 2 and all("make bench-pfl" in line for line in skips)
    assert not set(ran) & set(bench.PFL_WORKERS)


def test_c1_data_are_pickled_as_cifars_own_files_and_read_back(monkeypatch, tmp_path):
    """Each batch holds its image bytes as one Python 2 str (the real CIFAR-10 files' layout),
    not as Python 3's protocol-2 text (half as long again: every byte over 127 takes two), and
    flnet reads back the bytes written, over 255."""
    import c1_data

    from flnet.learn.data import files

    rng = np.random.default_rng(0)
    written = {}

    def images(_, prototypes, n):  # any bytes, every value present
        x, y = rng.integers(0, 256, (n, 3072)).astype(np.uint8), rng.integers(0, 10, n)
        written.setdefault(n, []).append((x, y))
        return x, y

    monkeypatch.setattr(c1_data, "images", images)
    monkeypatch.setattr(c1_data, "TRAIN_PER_BATCH", 20)
    monkeypatch.setattr(c1_data, "TEST_ROWS", 10)
    folder = c1_data.write(tmp_path)
    raw = (folder / "test_batch").read_bytes()
    assert b"T" + (10 * 3072).to_bytes(4, "little") + written[10][0][0].tobytes() in raw
    assert len(raw) < 10 * 3072 + 500
    src = files.load_cifar_set("cifar10", tmp_path, download=False)
    x_train = np.concatenate([x for x, _ in written[20]]).reshape(-1, 3, 32, 32)
    assert np.array_equal(src.x_train, x_train.astype(np.float32) / np.float32(255))
    assert np.array_equal(src.y_test, written[10][0][1])


def test_the_cohort_profile_prints_its_time_and_the_kernels_table(capsys):
    """benchmarks/profile_cohort.py on W1's MLP: one line of CPU seconds a cohort, then the
    profiler's table of the aten kernels, grouped by input shape."""
    import profile_cohort

    threads = torch.get_num_threads()
    try:
        profile_cohort.main(["--row", "a", "--top", "5"])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "(a) MLP" in out and "CPU-s a cohort (one thread)" in out
    assert "aten::" in out and "Self CPU" in out
