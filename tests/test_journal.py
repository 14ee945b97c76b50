"""The table journal: a checkpoint appends only the rows changed since the previous one; resume
replays exactly its prefix; compaction; truncated or foreign journals are clear errors."""

import numpy as np
import pytest
import torch

from flnet import journal
from flnet.errors import FlnetError
from flnet.journal import TableJournal
from flnet.learn.table import ClientTable

P = 1000  # floats a row: 4000 bytes, far above an entry's framing


class Tables:
    """Two named tables, as a Learner exposes them to the journal."""

    def __init__(self):
        self.t = {"tables/a": ClientTable(torch.zeros(P)), "tables/b": ClientTable(torch.zeros(2))}

    def state_dict(self, changed_only=False):
        out = {k: t.changes() if changed_only else t.state_dict() for k, t in self.t.items()}
        return {k: s for k, s in out.items() if len(s["clients"])}

    def mark_saved(self):
        for t in self.t.values():
            t.mark_saved()

    def table_bytes(self):
        return sum(t.nbytes for t in self.t.values())

    def write(self, clients, value):
        clients = np.asarray(clients)
        self.t["tables/a"].put(clients, torch.full((len(clients), P), float(value)))


def rows_of(state: dict, clients) -> torch.Tensor:
    table = ClientTable(torch.full((P,), -1.0))
    table.load_state_dict(state)
    return table.rows(np.asarray(clients))


def test_a_row_untouched_since_the_last_checkpoint_is_not_written_again(tmp_path):
    tables, j = Tables(), TableJournal(tmp_path)
    tables.write(np.arange(50), 1.0)
    first = j.save(tables)
    assert first["entries"] == 1 and j.written_bytes > 50 * P * 4
    before = j.written_bytes
    tables.write([7], 2.0)  # one client of the fifty changes
    second = j.save(tables)
    assert second["entries"] == 2
    assert P * 4 < j.written_bytes - before < 2 * P * 4  # that one row, not the fifty
    assert j.save(tables) == second and j.written_bytes - before < 2 * P * 4  # nothing new
    _, state = TableJournal.resume(tmp_path, second)
    got = rows_of(state["tables/a"], [0, 7, 49, 50])
    assert got[:, 0].tolist() == [1.0, 2.0, 1.0, -1.0]  # 50 was never written


def test_the_same_client_written_at_every_checkpoint_resumes_to_its_last_row(tmp_path):
    tables, j = Tables(), TableJournal(tmp_path)
    positions = []
    for step in range(12):
        tables.write([3, step % 4 + 10], step)
        tables.t["tables/b"].put(np.array([3]), torch.tensor([[step, -step]], dtype=torch.float32))
        positions.append(j.save(tables))
    assert positions[-1]["file"] == journal.FILES[0]  # small: no compaction
    for step in (0, 5, 11):  # each checkpoint sees exactly the rows of its own step
        _, state = TableJournal.resume(tmp_path, positions[step])
        a = rows_of(state["tables/a"], [3, 10, 11, 12, 13])[:, 0]
        last = {10 + s % 4: float(s) for s in range(step + 1)}
        assert a.tolist() == [step, *(last.get(k, -1.0) for k in range(10, 14))]
        assert state["tables/b"]["rows"][0].tolist() == [[step, -step]]
        # resuming cut off what the later checkpoints had appended
        assert (tmp_path / positions[step]["file"]).stat().st_size == positions[step]["bytes"]
        j = TableJournal.resume(tmp_path, positions[step])[0]
        for later in range(step + 1, 12):  # the run goes on from there, the same way
            tables.write([3, later % 4 + 10], later)
            tables.t["tables/b"].put(
                np.array([3]), torch.tensor([[later, -later]], dtype=torch.float32)
            )
            assert j.save(tables) == positions[later]  # byte for byte the same journal


def test_compaction_moves_the_live_rows_to_the_other_file(tmp_path, monkeypatch):
    monkeypatch.setattr(journal, "COMPACT_MIN_BYTES", 0)
    tables, j = Tables(), TableJournal(tmp_path)
    files = set()
    for step in range(10):
        tables.write([1, 2], step)  # two live rows, rewritten each time
        position = j.save(tables)
        j.committed()  # the checkpoint naming `position` is on disk
        files.add(position["file"])
        live = tables.table_bytes()
        assert position["bytes"] <= journal.COMPACT_FACTOR * live + 4096  # bounded by the rows
        assert [f.name for f in tmp_path.iterdir()] == [position["file"]]
        _, state = TableJournal.resume(tmp_path, position)
        assert rows_of(state["tables/a"], [1, 2, 3])[:, 0].tolist() == [step, step, -1]
    assert files == set(journal.FILES)


def test_a_compaction_not_yet_committed_leaves_the_checkpoint_on_disk_resumable(
    tmp_path, monkeypatch
):
    """Killed after the new file is written and before the checkpoint naming it is renamed
    into place: the old checkpoint's file is untouched, and resuming deletes the new one."""
    monkeypatch.setattr(journal, "COMPACT_MIN_BYTES", 0)
    tables, j = Tables(), TableJournal(tmp_path)
    tables.write([1, 2], 0.0)
    on_disk, step = j.save(tables), 0
    while True:
        step += 1
        tables.write([1, 2], step)
        new = j.save(tables)
        if new["file"] != on_disk["file"]:
            break  # compacted, never committed
        on_disk = new
        j.committed()
    _, state = TableJournal.resume(tmp_path, on_disk)
    assert rows_of(state["tables/a"], [1])[0, 0] == step - 1
    assert [f.name for f in tmp_path.iterdir()] == [on_disk["file"]]


def test_a_checkpoint_without_rows_needs_no_journal_file(tmp_path):
    tables, j = Tables(), TableJournal(tmp_path)
    position = j.save(tables)
    assert position["bytes"] == 0 and not list(tmp_path.iterdir())
    (tmp_path / journal.FILES[0]).write_bytes(b"written after the checkpoint")
    _, state = TableJournal.resume(tmp_path, position)
    assert state == {} and not list(tmp_path.iterdir())


@pytest.mark.parametrize("damage", ["truncated", "foreign", "edited", "missing"])
def test_a_damaged_journal_is_one_clear_error_naming_it(tmp_path, damage):
    tables, j = Tables(), TableJournal(tmp_path)
    tables.write(np.arange(5), 1.0)
    position = j.save(tables)
    path = tmp_path / position["file"]
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[:-10])
        why = r"expects \d+ \(truncated\)"
    elif damage == "foreign":  # another run's journal of the same length
        other, oj = Tables(), TableJournal(tmp_path / "other")
        (tmp_path / "other").mkdir()
        other.write(np.arange(5) + 100, 1.0)
        oj.save(other)
        path.write_bytes((tmp_path / "other" / position["file"]).read_bytes())
        why = "differs from the bytes the checkpoint recorded"
    elif damage == "edited":
        path.write_bytes(data[:-5] + b"xxxxx")
        why = "differs from the bytes the checkpoint recorded"
    else:
        path.unlink()
        why = "No such file"
    with pytest.raises(FlnetError, match=f"table journal {path}.*{why}"):
        TableJournal.resume(tmp_path, position)


def test_a_failed_write_keeps_the_position_and_the_rows_unsaved(tmp_path, monkeypatch):
    tables, j = Tables(), TableJournal(tmp_path)
    tables.write([1], 1.0)
    first = j.save(tables)
    tables.write([2], 2.0)

    def full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(j, "_write", full)
    with pytest.raises(OSError):
        j.save(tables)
    assert j.position() == first
    monkeypatch.undo()
    second = j.save(tables)  # the row is still owed
    _, state = TableJournal.resume(tmp_path, second)
    assert rows_of(state["tables/a"], [1, 2])[:, 0].tolist() == [1.0, 2.0]


@pytest.mark.parametrize("compact", [False, True])
def test_checkpoints_at_every_round_resume_to_the_uninterrupted_run(tmp_path, monkeypatch, compact):
    """FedDyn with persisted momentum buffers on 4 clients, 3 a round: each client's g_i and
    optimizer rows are rewritten in most rounds and journaled at every checkpoint (compacted
    at almost every one with `compact`); resuming from round 5 gives the run never stopped."""
    from conftest import BASE

    from flnet import checkpoint
    from flnet.runner import run
    from flnet.scenario import load_scenario, merge

    if compact:
        monkeypatch.setattr(journal, "COMPACT_MIN_BYTES", 0)
        monkeypatch.setattr(journal, "COMPACT_FACTOR", 1)
    sc = merge(
        BASE,
        {
            "data": {"dataset": "digits", "partition": {"kind": "dirichlet", "alpha": 0.3}},
            "algorithm": {
                "name": "feddyn",
                "cohort": {"clients_per_round": 3},
                "local": {
                    "steps": 3,
                    "batch_size": 8,
                    "lr": 0.01,
                    "optimizer": {"name": "sgd", "momentum": 0.9},
                    "optimizer_state": "persist",
                },
            },
            "clients": {"count": 4},
            "run": {"rounds": 10, "checkpoint_every": 1},
        },
    )

    def scenario(out, rounds):
        return load_scenario(data=merge(sc, {"run": {"rounds": rounds}, "output": {"dir": out}}))

    whole = run(scenario(str(tmp_path / "whole"), 10))
    out = tmp_path / "part"
    run(scenario(str(out), 5))
    ckpt = checkpoint.load(out, torch.device("cpu"))
    assert ckpt.round == 5 and ckpt.tables["entries"] > 0
    assert "tables" not in str(ckpt.state)  # the rows are in the journal, not the checkpoint
    names = [f.name for f in out.iterdir() if f.name.startswith("tables-journal")]
    assert names == [ckpt.tables["file"]]
    _, rows = TableJournal.resume(out, ckpt.tables)
    assert set(rows) == {"optimizer_states", "tables/feddyn.grad"}
    assert len(rows["tables/feddyn.grad"]["clients"]) == 4  # every client has taken part
    resumed = run(scenario(str(out), 10), resume=True)
    assert resumed.records.equals(whole.records)
    assert resumed.ledger.equals(whole.ledger)
