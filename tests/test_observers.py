"""Observers: the public way to watch a run, and the stop hook a signal handler calls."""

import torch
from runs import assert_resumes_exactly

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
