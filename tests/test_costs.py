"""Costs as another model (`model.costs_as`): a stand-in trained here is charged, message by
message and FLOP by FLOP, as the reference model itself would be."""

import re
import struct
from pathlib import Path
from typing import get_args

import numpy as np
import pandas as pd
import pytest
import torch

from flnet.errors import ScenarioError
from flnet.learn import references
from flnet.learn.wire import Wire
from flnet.runner import run

# DRDM's KMNIST CNN by hand (drdm.md Sec. 4.4): conv1 1->16 3x3 (160), conv2 16->32 3x3 (4,640),
# FC 1568 -> 500 (784,500), FC 500 -> 10 (5,010)
KMNIST_PARAMS = 160 + 4_640 + 784_500 + 5_010
# MACs per sample: conv1 28*28*16*9, conv2 14*14*32*16*9, FC1 1568*500, FC2 500*10. Forward 2
# FLOPs a MAC; backward: weight gradients of every layer, input gradients of all but the first
CONV1, CONV2, FC1, FC2 = 28 * 28 * 16 * 9, 14 * 14 * 32 * 16 * 9, 1568 * 500, 500 * 10
KMNIST_FLOPS = 4 * (CONV1 + CONV2 + FC1 + FC2) + 2 * (CONV2 + FC1 + FC2)


def test_the_kmnist_reference_is_counted_by_hand():
    ref = references.charged("cnn_kmnist")
    assert ref.num_params == KMNIST_PARAMS == 794_310  # 25,417,920 bits: drdm.md Sec. 4.4
    assert ref.flops_per_sample == KMNIST_FLOPS == 10_604_592


def test_the_schemas_names_are_the_registrys():
    assert get_args(references.ReferenceName) == tuple(references.REFERENCES)


def test_every_reference_builds_at_its_papers_input():
    assert references.charged("logistic_mnist").num_params == 7_850
    # forward 2 x 784 x 10, weight gradient the same, no input gradient (the first layer)
    assert references.charged("logistic_mnist").flops_per_sample == 4 * 784 * 10
    assert references.charged("cnn_mcmahan").num_params == 1_663_370
    assert references.charged("cnn_dfl_mnist").flops_per_sample == 5_964_672  # test_models


def test_wire_charges_model_shaped_tensors_as_the_reference():
    wire = Wire(num_params=6, charged_params=100)
    assert wire.bits(torch.zeros(6)) == 3_200
    assert wire.bits(torch.zeros(3, 6)) == 3 * 3_200  # rows of models
    assert wire.bits((torch.zeros(6), torch.zeros(6))) == 6_400  # SCAFFOLD's pairs
    assert wire.bits(torch.zeros(())) == 32  # a scalar loss costs its own bits
    assert wire.bits(torch.zeros(5)) == 160
    assert wire.bits(torch.zeros(6, dtype=torch.float64)) == 6_400  # its own width


def _idx(path, array):
    raw = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    path.write_bytes(raw + array.astype(">u1").tobytes())


@pytest.fixture
def kmnist_root(tmp_path):
    """A tiny KMNIST in torchvision's layout: 28x28 images, so the reference CNN itself runs."""
    folder = tmp_path / "data" / "KMNIST" / "raw"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for split, n in (("train", 80), ("t10k", 20)):
        _idx(folder / f"{split}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        _idx(folder / f"{split}-labels-idx1-ubyte", np.arange(n) % 10)
    return str(tmp_path / "data")


SCAFFOLD = {"name": "scaffold", "cohort": {"clients_per_round": 3}}
ALGORITHMS = {
    "fedavg": ({"cohort": {"clients_per_round": 3}}, 1),
    "scaffold": (SCAFFOLD, 2),  # (x, c) down, (dy, dc) up: two model-sized vectors each way
}


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_stand_in_costs_what_the_reference_itself_costs(scenario, kmnist_root, algorithm):
    """Same data, seeds and radio: an MLP charged as cnn_kmnist and cnn_kmnist trained for real
    give the same ledger (bits, FLOPs, times, joules), row for row; and the hand count."""
    section, vectors = ALGORITHMS[algorithm]
    steps, batch = 2, 8

    def go(model):
        return run(
            scenario(
                data={"dataset": "kmnist", "root": kmnist_root},
                model=model,
                algorithm={**section, "name": algorithm, "local": {"steps": steps}},
                clients={"count": 5},
                run={"rounds": 2},
            ),
            write=False,
        )

    stand_in = go({"kind": "mlp", "hidden": [8], "costs_as": "cnn_kmnist"})
    itself = go({"kind": "cnn_kmnist"})
    cols = ["round", "node", "peer", "kind", "start_s", "end_s", "energy_j", "bits", "flops"]
    pd.testing.assert_frame_equal(stand_in.ledger[cols], itself.ledger[cols])
    led = stand_in.ledger
    for kind in ("download", "upload"):
        assert (led[led.kind == kind].bits == vectors * 32 * KMNIST_PARAMS).all()
    assert (led[led.kind == "compute"].flops == steps * batch * KMNIST_FLOPS).all()
    assert len(led[led.kind == "compute"]) == 2 * 3
    # what the costs were charged as, and what was trained
    assert stand_in.summary["costs_as"] == "cnn_kmnist"
    assert stand_in.summary["charged_params"] == KMNIST_PARAMS
    assert stand_in.summary["charged_flops_per_sample"] == KMNIST_FLOPS
    assert stand_in.summary["model_params"] == 28 * 28 * 8 + 8 + 8 * 10 + 10
    assert (stand_in.records.costs_as == "cnn_kmnist").all()
    assert itself.summary["costs_as"] is None
    assert itself.summary["charged_params"] == itself.summary["model_params"] == KMNIST_PARAMS


def test_fedbuff_models_and_deltas_are_charged_as_the_reference(scenario):
    res = run(
        scenario(
            model={"kind": "mlp", "hidden": [8], "costs_as": "logistic_mnist"},
            algorithm={"name": "fedbuff", "concurrency": 3, "buffer_size": 2},
            run={"rounds": 2},
        ),
        write=False,
    )
    led = res.ledger
    for kind in ("download", "upload"):
        rows = led[(led.kind == kind) & (led.outcome == "ok")]
        assert len(rows) and (rows.bits == 32 * 7_850).all()
    compute = led[(led.kind == "compute") & (led.outcome == "ok")]
    assert (compute.flops == 2 * 8 * 31_360).all()  # steps x batch x the reference's FLOPs


def test_gossip_messages_are_charged_as_the_reference(scenario):
    res = run(
        scenario(
            model={"kind": "mlp", "hidden": [8], "costs_as": "logistic_mnist"},
            algorithm={"name": "dpsgd", "topology": {"kind": "ring"}, "local": {"steps": 1}},
            run={"rounds": 1},
        ),
        write=False,
    )
    d2d = res.ledger[res.ledger.kind == "d2d"]
    assert len(d2d) and (d2d.bits == 32 * 7_850).all()
    assert res.records.bits_d2d.iloc[-1] == len(d2d) * 32 * 7_850


def test_an_unknown_reference_names_the_field_and_the_allowed_names(scenario):
    with pytest.raises(ScenarioError) as e:
        scenario(model={"kind": "mlp", "costs_as": "cnn_kmnis"})
    assert "model.costs_as" in str(e.value) and "'cnn_kmnist'" in str(e.value)


def test_the_docs_reference_table_holds_the_counted_numbers():
    """Every row of the `costs_as` table (docs/reference/data-and-models.md): the parameters
    and FLOPs the code counts."""
    page = Path(__file__).resolve().parent.parent / "docs" / "reference" / "data-and-models.md"
    section = page.read_text().split("## Costs as another model")[1].split("\n\n**")[0]
    rows = [r for r in section.splitlines() if r.startswith("| `") and "`costs_as`" not in r]
    seen = set()
    for row in rows:
        names, _, params, flops = (c.strip() for c in row.strip("|").split("|"))
        names = re.findall(r"`([a-z_0-9]+)`", names)
        params = [int(p.replace(",", "")) for p in re.findall(r"[\d,]{3,}", params)]
        flops = [int(f.replace(",", "")) for f in re.findall(r"[\d,]{3,}", flops)]
        for name, p, f in zip(names, params, flops):
            assert references.charged(name)[1:3] == (p, f), name
        seen |= set(names)
    assert seen == set(references.REFERENCES)
