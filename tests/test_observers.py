"""Observers: the public way to watch a run, and the stop hook a signal handler calls."""

import gc

import pytest
import torch
from harness import assert_resumes_exactly

from flnet.runner import run
from flnet.sim.world import INTERRUPTED


class Watch:
    """A user's observer: reads the model after every step; asks to stop at `stop_at`."""

    def __init__(self, stop_at=None):
        self.steps, self.norms, self.ends = [], [], []
        self.stop_at = stop_at

    def on_start(self, world):
        self.steps.append("start")

    def on_progress(self, world, progress, stopping):
        self.steps.append(progress.step)
        self.norms.append(float(torch.linalg.vector_norm(progress.model)))
        if progress.step == self.stop_at:
            world.request_stop()  # what the runner's signal handler does
        return None

    def on_end(self, world, reason):
        self.ends.append(reason)


def _scenario(scenario, tmp_path, name):
    return scenario(
        run={
            "rounds": 12,
            "eval_every": 5,
            "checkpoint_every": None,
            "checkpoint_interval_s": None,
        },
        output={"dir": str(tmp_path / name)},
        radio={"rayleigh_fading": True},
    )


def test_observer_sees_every_step_and_the_model(scenario, tmp_path):
    watch = Watch()
    res = run(_scenario(scenario, tmp_path, "a"), write=False, observers=[watch])
    assert watch.steps == ["start", *range(13)] and watch.ends == ["rounds"]
    assert len(set(watch.norms)) == 13  # the model moves every round
    assert list(res.records["round"]) == [0, 5, 10, 12]
    assert res.records["events"].is_monotonic_increasing
    assert res.records["events"].iloc[-1] == 12 * 5  # five clients delivered each round


def test_requested_stop_ends_at_the_next_step_and_resumes_exactly(scenario, tmp_path):
    watch = Watch(stop_at=3)  # asked during step 3: the run stops at the end of step 4
    _, cut = assert_resumes_exactly(lambda name: _scenario(scenario, tmp_path, name), watch)
    assert cut.summary["stop_reason"] == INTERRUPTED and watch.steps[-1] == 4
    assert list(cut.records["round"]) == [0]  # no evaluation added at the interruption


class FreezeCount(Watch):
    """Counts the objects the garbage collector leaves alone at each step; fails at `fail_at`."""

    def __init__(self, fail_at=None):
        super().__init__()
        self.frozen, self.fail_at = [], fail_at

    def on_progress(self, world, progress, stopping):
        self.frozen.append(gc.get_freeze_count())
        if progress.step == self.fail_at:
            raise RuntimeError("observer failed")


def test_the_collector_skips_what_was_alive_at_the_start_only_while_the_run_lasts(
    scenario, tmp_path
):
    watch = FreezeCount()
    run(_scenario(scenario, tmp_path, "a"), write=False, observers=[watch])
    assert min(watch.frozen[1:]) > 10_000  # modules, data, world (step 0 is published before)
    assert gc.get_freeze_count() == 0  # given back to the collector at the end
    with pytest.raises(RuntimeError, match="observer failed"):
        run(_scenario(scenario, tmp_path, "b"), write=False, observers=[FreezeCount(fail_at=2)])
    assert gc.get_freeze_count() == 0  # and when the run fails
    gc.freeze()  # a caller that froze objects itself keeps them as it left them
    try:
        frozen = gc.get_freeze_count()
        run(_scenario(scenario, tmp_path, "c"), write=False, observers=[watch])
        assert frozen // 2 < gc.get_freeze_count() <= frozen  # kept frozen; some since died
    finally:
        gc.unfreeze()


def test_every_step_is_evaluated_on_one_thread_and_the_callers_threads_come_back(
    scenario, tmp_path
):
    """A small model on the CPU runs on one torch thread from the initial evaluation (step 0,
    published while the run is built) to the end; the caller's setting is restored."""

    class Threads:
        def __init__(self):
            self.seen = []

        def on_start(self, world):
            pass

        def on_progress(self, world, progress, stopping):
            self.seen.append(torch.get_num_threads())

        def on_end(self, world, reason):
            pass

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads = Threads()
        run(_scenario(scenario, tmp_path, "t"), ["run.rounds=2"], write=False, observers=[threads])
        assert threads.seen == [1, 1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_arrow_allocates_with_malloc_during_a_run_unless_the_user_chose_a_pool(
    scenario, tmp_path, monkeypatch
):
    """The run's tables come from the system allocator (mimalloc's first allocation sets up its
    arenas); the caller's default pool comes back, and a pool named in the environment stays."""
    pyarrow = pytest.importorskip("pyarrow")

    class Pool(Watch):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_progress(self, world, progress, stopping):
            self.seen.append(pyarrow.default_memory_pool().backend_name)

    before = pyarrow.default_memory_pool()
    pool = Pool()
    result = run(
        _scenario(scenario, tmp_path, "p"), ["run.rounds=2"], write=False, observers=[pool]
    )
    assert pool.seen == ["system"] * 3
    assert pyarrow.default_memory_pool().backend_name == before.backend_name
    assert result.records["round"].tolist() == [0, 2]  # the tables outlive the pool's change
    chosen = Pool()
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", before.backend_name)
    run(_scenario(scenario, tmp_path, "q"), ["run.rounds=2"], write=False, observers=[chosen])
    assert chosen.seen == [before.backend_name] * 3
