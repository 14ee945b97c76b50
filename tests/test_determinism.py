"""Same scenario and seed, same records: across training paths, processes and sweep workers
(the sweep case is in test_sweep.py)."""

import subprocess
import sys

import pandas as pd
import pytest
from conftest import BASE
from tolerance import assert_ledgers_close, assert_records_close

from flnet.runner import run
from flnet.scenario import load_scenario, merge


@pytest.mark.parametrize("model", [{"kind": "mlp"}, {"kind": "cnn_dfl_mnist"}])
def test_batched_and_sequential_paths_agree_within_tolerance(model):
    """Different paths round differently (tests/tolerance.py): the same within its bounds.
    Client accuracy is over each client's training share, at least ~30 rows here."""
    results = [
        run(
            load_scenario(
                data=merge(
                    BASE,
                    {
                        "model": model,
                        "run": {"rounds": 3},
                        "data": {"partition": {"kind": "dirichlet", "alpha": 0.5}},
                        "algorithm": {
                            "local": {"path": path, "optimizer": {"name": "sgd", "momentum": 0.9}}
                        },
                    },
                )
            ),
            write=False,
        )
        for path in ("batched", "sequential")
    ]
    assert_records_close(results[0].records, results[1].records, eval_rows=30)
    assert_ledgers_close(results[0].ledger, results[1].ledger)


def test_another_process_gives_identical_records_on_the_same_machine(tmp_path):
    here = run(load_scenario(data=BASE), write=False)
    code = (
        "import sys; sys.path.insert(0, 'tests'); from conftest import BASE; "
        "from flnet.runner import run; from flnet.scenario import load_scenario; "
        "run(load_scenario(data=BASE), write=False).records"
        f".to_parquet({str(tmp_path / 'r.parquet')!r})"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    pd.testing.assert_frame_equal(
        here.records, pd.read_parquet(tmp_path / "r.parquet"), check_exact=True
    )
