import pytest
import torch
from harness import StopAt, assert_resumes_exactly, run_protocol
from tolerance import assert_tensors_close

from flnet.algorithms import dpsgd
from flnet.errors import ScenarioError, TopologyWarning
from flnet.scenario import load_scenario
from flnet.sim import topology as topo


def path3_w() -> topo.Mixing:
    return topo.from_edges([[0, 1], [1, 2]], 3, "metropolis_hastings")


def test_step_is_mixing_then_the_gradient_taken_before_mixing():
    """x_{k+1,i} = sum_j W_ij x_{k,j} - gamma g_i(x_{k,i}): Y - X is -gamma G."""
    w = path3_w()
    x = torch.tensor([[3.0], [0.0], [6.0]], dtype=torch.float64)
    y = x - 0.1 * torch.tensor([[1.0], [2.0], [3.0]], dtype=torch.float64)
    # W x by hand: (2, 3, 4)
    assert_tensors_close(dpsgd.step(w, x, y), torch.tensor([[1.9], [2.8], [3.7]]))


def test_more_than_one_local_step_is_refused():
    with pytest.raises(ScenarioError, match="algorithm.local.steps: D-PSGD takes one"):
        load_scenario(data={"algorithm": {"name": "dpsgd", "local": {"steps": 5}}})


PATH3 = [[2 / 3, 1 / 3, 0.0], [1 / 3, 1 / 3, 1 / 3], [0.0, 1 / 3, 2 / 3]]


def zero_gradients(model, params, x, y, aux=None):
    """A loss whose gradient is exactly 0 (as a fresh tensor: the SGD step scales it in place)."""
    return (params * params).sum(dim=1) * 0.0


def simulate(scenario, x0, steps, loss_fn=zero_gradients, **algorithm):
    from flnet.runner import build

    sc = scenario(
        algorithm={"name": "dpsgd", "local": {"steps": 1, "lr": 0.1, "batch_size": 4}, **algorithm},
        clients={"count": len(x0)},
    )
    world, learn = build(sc)
    protocol = dpsgd.protocol(world, learn, sc.algorithm, dpsgd.State(0, x0), loss_fn=loss_fn)
    seen = run_protocol(world, steps, protocol)
    return [p.state.x for p in seen], world, learn, sc  # every step's nodes' models


@pytest.fixture
def p_digits(scenario):
    from flnet.runner import build

    _, learn = build(scenario())
    return learn.model.num_params


def test_zero_gradients_give_w_to_the_k_on_a_path_of_three(scenario, p_digits):
    x0 = torch.randn(3, p_digits, generator=torch.Generator().manual_seed(0))
    xs, world, _, _ = simulate(scenario, x0, 4, topology={"kind": "matrix", "matrix": PATH3})
    w64 = torch.tensor(PATH3, dtype=torch.float64)
    for k, got in enumerate(xs, start=1):  # sparse mixing against dense powers of W
        assert_tensors_close(got, torch.linalg.matrix_power(w64, k) @ x0.double())
    ledger = world.ledger.frame()
    sends = ledger[ledger.kind == "d2d"]
    assert len(sends) == 4 * 4  # 4 iterations x the path's 4 directed edges
    assert (sends.bits == p_digits * 32).all()
    assert len(ledger[ledger.kind == "d2d_rx"]) == 16
    assert set(ledger.pattern) == {"exchange"}


def test_a_doubly_stochastic_w_keeps_the_average(scenario, p_digits):
    x0 = torch.randn(5, p_digits, generator=torch.Generator().manual_seed(1))
    xs, *_ = simulate(scenario, x0, 3, topology={"kind": "ring"})  # Metropolis-Hastings
    for x in xs:
        assert_tensors_close(x.mean(0), x0.mean(0))
    # uniform weights on a path are not column-stochastic: the average moves, and D-PSGD
    # warns, naming the property its analysis assumes
    with pytest.warns(TopologyWarning, match="assumes a doubly stochastic W.*column 0 sums to"):
        xs_u, *_ = simulate(
            scenario,
            x0[:3],
            1,
            topology={
                "kind": "matrix",
                "matrix": [[0.5, 0.5, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0.5, 0.5]],
            },
        )
    assert not torch.allclose(xs_u[0].mean(0), x0[:3].mean(0), atol=1e-3)


def test_with_gradients_the_average_takes_the_mean_local_step(scenario, p_digits):
    """Doubly stochastic W: mean(X_{k+1}) = mean(W X_k - gamma G_k) = mean(Y_k), with Y_k
    each node's one local step from its own x_k, keyed by (iteration, node)."""
    x0 = torch.randn(4, p_digits, generator=torch.Generator().manual_seed(2)) * 0.1
    xs, _, learn, sc = simulate(scenario, x0, 2, loss_fn=None, topology={"kind": "ring"})
    nodes = torch.arange(4).numpy()
    for k, (before, after) in enumerate(zip([x0, *xs], xs), start=1):
        y = learn.local_train(nodes, before, sc.algorithm.local, k).params
        assert_tensors_close(after.mean(0), y.mean(0))
        assert not torch.allclose(after, y)  # and the nodes did mix


def test_messages_lost_to_the_timeout_leave_their_weight_at_home(scenario, p_digits):
    x0 = torch.randn(3, p_digits, generator=torch.Generator().manual_seed(3))
    xs, world, _, _ = simulate(
        scenario, x0, 2, topology={"kind": "matrix", "matrix": PATH3}, timeout_s=1e-9
    )
    for x in xs:
        assert torch.equal(x, x0)  # nothing arrived: W_t = I
    ledger = world.ledger.frame()
    assert (ledger[ledger.kind == "d2d"].outcome == "timeout").all()


def test_an_interrupted_run_resumes_to_the_same_records_and_ledger(scenario, tmp_path):
    """request_stop (what SIGTERM does) ends the run at the end of an iteration; --resume
    continues on the same trajectory: the same topology, keys (iteration, node) and D2D links."""

    def make(name):
        return scenario(
            algorithm={
                "name": "dpsgd",
                "local": {"steps": 1, "batch_size": 8},
                "topology": {"kind": "erdos_renyi", "p": 0.4},
            },
            clients={"count": 6},
            radio={"rayleigh_fading": True},
            run={
                "rounds": 12,
                "eval_every": 4,
                "checkpoint_every": None,
                "checkpoint_interval_s": None,
            },
            output={"dir": str(tmp_path / name)},
        )

    whole, _ = assert_resumes_exactly(make, StopAt(5))
    assert "consensus_distance" in whole.records and whole.records.bits_d2d.iloc[-1] > 0


def test_a_graph_that_cannot_be_drawn_stops_before_the_run(tmp_path):
    import subprocess
    import sys

    import yaml

    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "algorithm": {"name": "dpsgd", "topology": {"kind": "erdos_renyi", "p": 0.01}},
                "clients": {"count": 30},
            }
        )
    )
    for cmd in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o")]):
        out = subprocess.run(
            [sys.executable, "-m", "flnet.cli", *cmd], capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 2, out.stderr
        assert "algorithm.topology.p" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "o" / "records.parquet").exists()


@pytest.mark.parametrize(
    "topology, count, words",
    [
        ({"kind": "torus"}, 10, "algorithm.topology.kind: a torus needs a square number"),
        ({"kind": "matrix", "matrix": [[1.0]]}, 2, "algorithm.topology.matrix: has 1 rows for 2"),
        ({"kind": "erdos_renyi", "p": 1.5}, 4, "algorithm.topology.p: must be <= 1"),
        ({"kind": "hypercube"}, 4, "algorithm.topology: unknown kind 'hypercube'"),
        ({"kind": "random_k", "k": 4}, 4, "algorithm.topology.k: 4 neighbours, but there are 3"),
        ({"kind": "edges", "edges": [[0, 4]]}, 4, r"algorithm.topology.edges\[0\]: \[0, 4\]"),
        ({"kind": "random_geometric", "radius_m": 5}, 4, "needs clients.positions"),
        (
            {"kind": "random_k", "k": 2, "weights": "metropolis_hastings"},
            4,
            "algorithm.topology.weights: a directed random_k graph mixes with uniform",
        ),
    ],
)
def test_impossible_topologies_are_refused_by_field(topology, count, words):
    with pytest.raises(ScenarioError, match=words):
        load_scenario(
            data={"algorithm": {"name": "dpsgd", "topology": topology}, "clients": {"count": count}}
        )


def test_the_dpsgd_scenario_runs(tmp_path):
    from flnet.runner import run

    res = run(
        "scenarios/dpsgd.yaml",
        overrides=["run.rounds=4", "run.eval_every=2", f"output.dir={tmp_path}"],
    )
    assert list(res.records["round"]) == [0, 2, 4]
    assert res.records.bits_d2d.iloc[-1] == 4 * 32 * (res.summary["model_params"] * 32)
    assert res.summary["bits_d2d"] == res.records.bits_d2d.iloc[-1]  # the summary says it too
    assert res.records.consensus_distance.iloc[-1] > 0 and res.records.bits_up.iloc[-1] == 0
