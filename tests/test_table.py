"""The sparse per-client table: rows only for clients written, checkpoints, cohort commits."""

from typing import NamedTuple

import numpy as np
import torch

from flnet.learn.table import BLOCK_ROWS, ClientTable, Keep, Keeps


class Pair(NamedTuple):
    c: torch.Tensor  # [3]
    n: torch.Tensor  # [] a scalar per client


def pair_rows(clients) -> Pair:
    v = torch.as_tensor(np.asarray(clients), dtype=torch.float32)
    return Pair(v[:, None] * torch.tensor([1.0, 2.0, 3.0]), -v)


def test_unwritten_clients_read_the_initial_row_and_written_ones_their_own():
    table = ClientTable(torch.full((3,), 7.0))
    table.put(np.array([4, 1]), torch.tensor([[4.0, 4, 4], [1, 1, 1]]))
    got = table.rows(np.array([1, 2, 4, 1_000_000]))
    assert got.tolist() == [[1, 1, 1], [7, 7, 7], [4, 4, 4], [7, 7, 7]]
    assert table.written(np.array([0, 1, 4])).tolist() == [False, True, True]
    table.put(np.array([1]), torch.tensor([[5.0, 5, 5]]))  # overwrite in place
    assert table.rows(np.array([1])).tolist() == [[5, 5, 5]] and len(table) == 2


def test_a_table_costs_memory_only_for_the_rows_written():
    table = ClientTable(torch.zeros(1000))
    table.put(np.array([999_999, 3]), torch.ones(2, 1000))
    assert table.capacity == BLOCK_ROWS  # nothing for the million clients never written
    assert table.state_dict()["rows"][0].shape == (2, 1000)  # no spare capacity saved


def test_rows_survive_growth_across_blocks_in_any_order():
    rng = np.random.default_rng(0)
    table = ClientTable(Pair(torch.zeros(3), torch.zeros(())))
    order = rng.permutation(10_000)[: 5 * BLOCK_ROWS]
    for chunk in np.array_split(order, 17):
        table.put(chunk, pair_rows(chunk))
    ask = np.concatenate([order[::7], [10_001, 10_002]])
    got, want = table.rows(ask), pair_rows(ask)
    assert torch.equal(got.c[:-2], want.c[:-2]) and torch.equal(got.n[:-2], want.n[:-2])
    assert got.c[-2:].eq(0).all() and len(table) == len(order) <= table.capacity


def test_default_rows_replace_the_initial_row_for_unwritten_clients():
    table = ClientTable(torch.zeros(2))
    table.put(np.array([3]), torch.tensor([[3.0, 3.0]]))
    got = table.rows(np.array([3, 8]), default=torch.tensor([[9.0, 9.0], [8.0, 8.0]]))
    assert got.tolist() == [[3, 3], [8, 8]]


def test_state_dict_round_trips_through_a_weights_only_load(tmp_path):
    table = ClientTable(Pair(torch.zeros(3), torch.zeros(())))
    table.put(np.array([5, 2, 9]), pair_rows([5, 2, 9]))
    torch.save(table.state_dict(), tmp_path / "t.pt")
    again = ClientTable(Pair(torch.zeros(3), torch.zeros(())))
    again.put(np.array([1]), pair_rows([1]))  # replaced by the load
    again.load_state_dict(torch.load(tmp_path / "t.pt", weights_only=True))
    ask = np.array([1, 2, 5, 9])
    for a, b in zip(again.rows(ask), table.rows(ask)):
        assert torch.equal(a, b)
    assert again.written(ask).tolist() == [False, True, True, True]


def test_keep_writes_only_the_positions_committed():
    table, other = ClientTable(torch.zeros(2)), ClientTable(torch.zeros(()))
    cohort = np.array([10, 20, 30])
    keep = Keeps(
        Keep(table, cohort, torch.tensor([[1.0, 1], [2, 2], [3, 3]])),
        Keep(other, cohort, torch.tensor([1.0, 2, 3])),
        None,
    )
    keep.commit(np.array([2]))
    keep.commit(np.array([], dtype=np.int64))
    keep.commit(np.array([0]))
    assert table.rows(cohort).tolist() == [[1, 1], [0, 0], [3, 3]]
    assert other.rows(cohort).tolist() == [1, 0, 3]


def test_changes_are_the_rows_written_since_the_last_save():
    table = ClientTable(Pair(torch.zeros(3), torch.zeros(())))
    table.put(np.array([5, 2, 9]), pair_rows([5, 2, 9]))
    assert sorted(table.changes()["clients"].tolist()) == [2, 5, 9]
    table.mark_saved()
    assert len(table.changes()["clients"]) == 0
    table.put(np.array([9, 40]), pair_rows([90, 400]))  # one rewritten, one new
    changed = table.changes()
    order = np.argsort(changed["clients"].numpy())
    assert changed["clients"][order].tolist() == [9, 40]
    assert changed["rows"][1][order].tolist() == [-90.0, -400.0]
    assert table.nbytes == 4 * (3 + 1) * 4  # four rows of four float32s


def test_rows_loaded_from_a_checkpoint_count_as_saved():
    table = ClientTable(torch.zeros(2))
    table.put(np.array([1, 2]), torch.ones(2, 2))
    again = ClientTable(torch.zeros(2))
    again.load_state_dict(table.state_dict())
    assert len(again.changes()["clients"]) == 0 and len(again) == 2
