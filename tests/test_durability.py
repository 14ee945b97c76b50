"""The order in which a checkpoint reaches the disk: the journals it points into are fsynced
before it is renamed into place, the checkpoint's own bytes before its rename, and the folder
after the rename (before the journal file an earlier checkpoint named is deleted), so a power
cut at any instant leaves a checkpoint whose journals hold what it says. Each file is fsynced
once per checkpoint."""

import os
from pathlib import Path

import pytest
from conftest import BASE

from flnet import journal
from flnet.runner import run
from flnet.scenario import load_scenario, merge

ROUNDS = 6


def with_client_tables(out: Path):
    """A run with per-client tables (FedDyn's lagged gradients, persisted momentum buffers), so
    both journals grow, and a checkpoint every round."""
    return load_scenario(
        data=merge(
            BASE,
            {
                "algorithm": {
                    "name": "feddyn",
                    "cohort": {"clients_per_round": 3},
                    "local": {
                        "steps": 2,
                        "batch_size": 8,
                        "lr": 0.01,
                        "optimizer": {"name": "sgd", "momentum": 0.9},
                        "optimizer_state": "persist",
                    },
                },
                "clients": {"count": 6},
                "run": {"rounds": ROUNDS, "checkpoint_every": 1, "checkpoint_interval_s": None},
                "output": {"dir": str(out)},
            },
        )
    )


def record_syncs(monkeypatch) -> list[tuple[str, str]]:
    """[(call, name)] for every os.fsync (the file or folder synced), os.replace (the target)
    and os.unlink / Path.unlink, in call order."""
    calls: list[tuple[str, str]] = []
    fsync, replace, unlink = os.fsync, os.replace, Path.unlink

    def fsync_(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return fsync(fd)

    def replace_(src, dst, **k):
        replace(src, dst, **k)
        calls.append(("replace", str(dst)))

    def unlink_(self, *a, **k):
        unlink(self, *a, **k)
        calls.append(("unlink", str(self)))

    monkeypatch.setattr(os, "fsync", fsync_)
    monkeypatch.setattr(os, "replace", replace_)
    monkeypatch.setattr(Path, "unlink", unlink_)
    return calls


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="names descriptors via /proc")
@pytest.mark.parametrize("compact", [False, True], ids=["append", "compacting"])
def test_journals_are_synced_before_the_checkpoint_that_points_into_them(
    tmp_path, monkeypatch, compact
):
    if compact:  # every checkpoint rewrites the live rows into the other journal file
        monkeypatch.setattr(journal, "COMPACT_MIN_BYTES", 0)
        monkeypatch.setattr(journal, "COMPACT_FACTOR", 1)
    out = (tmp_path / "out").resolve()
    calls = record_syncs(monkeypatch)
    result = run(with_client_tables(out))
    assert result.checkpoint_round == ROUNDS
    ckpt = str(out / "checkpoint.pt")
    ledger = str(out / "ledger-journal.csv")
    tables = tuple(str(out / name) for name in journal.FILES)
    ends = [i for i, c in enumerate(calls) if c == ("replace", ckpt)]
    assert len(ends) == ROUNDS + 1  # round 0 (the initial model) to ROUNDS
    start, tables_synced = 0, 0
    for end in ends:
        span = calls[start:end]  # what this checkpoint did before its rename
        synced = [name for call, name in span if call == "fsync"]
        assert synced.count(ledger) == 1, span
        assert sum(synced.count(t) for t in tables) <= 1, span  # none when no row changed
        tables_synced += sum(synced.count(t) for t in tables)
        mine = [n for n in synced if Path(n).name.startswith(".checkpoint.pt.")]
        assert len(mine) == 1, span  # its own bytes, under the temporary name
        # the journals first, then the checkpoint's bytes
        last_journal = max(i for i, (c, n) in enumerate(span) if n == ledger or n in tables)
        assert last_journal < next(i for i, (c, n) in enumerate(span) if n == mine[0])
        # the rename is made durable before anything else happens: the folder's fsync next
        assert calls[end + 1] == ("fsync", str(out)), calls[end : end + 3]
        start = end + 2
    assert tables_synced >= ROUNDS - 1  # the g_i and momentum rows changed in every round
    if compact:
        # the old journal file goes only after the folder sync that put the new checkpoint's
        # name on disk
        dropped = [
            i for i, (c, n) in enumerate(calls) if c == "unlink" and n in tables and i > ends[0]
        ]
        assert dropped
        for i in dropped:
            before = max(e for e in ends if e < i)
            assert calls[before + 1] == ("fsync", str(out)) and before + 1 < i
