"""The ledger: exact energy totals, the append-only journal, and records that add up."""

import functools
import math
import operator
import random

import numpy as np
import pandas as pd
import pytest

from flnet.errors import FlnetError
from flnet.runner import run
from flnet.sim import ledger as ledger_mod
from flnet.sim.ledger import Ledger, Tag, block, block_of


def _rows(n=500, seed=1):
    """Rows as `Ledger.add` takes them: joules over 12 orders of magnitude (naive sums lose
    bits)."""
    rng = random.Random(seed)
    return [
        (
            Tag("stream", i // 10),
            i % 7,
            -1,
            "compute",
            i * 0.1,
            i * 0.1 + rng.random(),
            rng.random() * 10 ** rng.randint(-9, 3),
            rng.random() * 1e6,
            1e6 / 3,
            "ok",
        )
        for i in range(n)
    ]


def _running_sum(xs):
    """Left to right, one rounding per addition: what `sum` did before Python 3.12 (which
    compensates it)."""
    return functools.reduce(operator.add, xs, 0.0)


def _filled(n=500, seed=1):
    ledger = Ledger()
    for row in _rows(n, seed):
        ledger.add(*row)
    return ledger


def test_total_energy_is_fsum_of_the_rows_bit_for_bit():
    ledger = _filled()
    joules = ledger.frame().energy_j.tolist()
    assert ledger.total_energy_j == math.fsum(joules)
    assert _running_sum(joules) != math.fsum(joules)  # else it could not tell a naive running sum


class _Heard(list):
    """A ledger subscriber that lists what it hears."""

    def spend(self, client, t_s, energy_j, outcome):
        self.append((client, t_s, energy_j, outcome))


def _mixed_rows(n=400, seed=3):
    """Rows of mixed kinds and outcomes, joules of both signs."""
    kinds, outcomes = ["download", "compute", "upload"], ["ok", "dropped", "deadline"]
    return [
        (*row[:3], kinds[i % 3], *row[4:6], -row[6] if i % 3 == 0 else row[6], *row[7:9])
        + (outcomes[i % 5 % 3],)
        for i, row in enumerate(_rows(n, seed))
    ]


def _columns_equal(a, b):
    assert list(a) == list(b)
    for c in a:  # floats compared bit for bit (as int64 views), ints and codes exactly
        x, y = np.asarray(a[c]), np.asarray(b[c])
        assert x.dtype == y.dtype and np.array_equal(
            x.view(np.int64) if x.dtype.kind == "f" else x,
            y.view(np.int64) if y.dtype.kind == "f" else y,
        ), c


def test_extend_keeps_the_rows_and_exact_totals_that_adding_them_one_by_one_keeps():
    rows, rng = _mixed_rows(), random.Random(4)
    kinds = ["download", "compute", "upload"]
    one, blocks = Ledger(), Ledger()
    for row in rows:
        one.add(*row)
    cut = sorted(rng.sample(range(1, len(rows)), 5))
    for a, b in zip([0, *cut], [*cut, len(rows)]):  # in blocks, each joining what is summed
        blocks.extend(block_of(rows[a:b]))
    _columns_equal(blocks.columns(), one.columns())
    for kind in kinds:  # every kind's joules sum exactly: + and - over 12 orders of magnitude
        joules = [r[6] for r in rows if r[3] == kind]
        assert blocks.energy_j[kind] == one.energy_j[kind] == math.fsum(joules)
        assert math.fsum(joules) != _running_sum(joules)
    assert blocks.total_energy_j == one.total_energy_j
    assert blocks.bits == one.bits  # summed in row order, as add does
    uploads = [r[7] for r in rows if r[3] == "upload"]
    assert _running_sum(uploads) != math.fsum(uploads)  # the order of the sum shows in its bits
    blocks.add(*rows[0])  # the partials extend left go on taking rows one by one
    one.add(*rows[0])
    assert blocks.energy_j == one.energy_j
    assert len(blocks) == len(one) == len(rows) + 1


def test_each_flush_converts_only_its_new_rows(tmp_path, monkeypatch):
    """Rows added one by one stay in one growing run: a checkpoint's flush converts the rows
    since the last one, not the whole run again (a long run's checkpoints would slow down)."""
    converted = []

    def counting(rows):
        converted.append(len(rows))
        return block_of(rows)

    monkeypatch.setattr(ledger_mod, "block_of", counting)
    ledger, rows = Ledger(), _mixed_rows(300, seed=8)
    for part in range(3):
        for row in rows[100 * part : 100 * (part + 1)]:
            ledger.add(*row)
        ledger.flush(tmp_path / "journal.csv")
    assert converted == [100, 100, 100]
    monkeypatch.undo()
    replayed = Ledger()
    replayed.load_journal(tmp_path / "journal.csv", 300, (tmp_path / "journal.csv").stat().st_size)
    _columns_equal(replayed.columns(), ledger.columns())


def test_blocks_and_tuples_mixed_give_the_rows_journal_and_resume_of_tuples_alone(tmp_path):
    """Runs of `add` between blocks (`extend`), flushed at checkpoints in between: the same
    columns, frame, journal bytes, totals and subscribers' calls as every row added alone, and
    a journal that resumes to the same ledger."""
    rows, rng = _mixed_rows(300, seed=5), random.Random(6)
    seen_one, seen_mixed = _Heard(), _Heard()
    one, mixed = Ledger([seen_one]), Ledger([seen_mixed])
    paths = tmp_path / "one.csv", tmp_path / "mixed.csv"
    cut = sorted(rng.sample(range(1, len(rows)), 12))
    for i, (a, b) in enumerate(zip([0, *cut], [*cut, len(rows)])):
        for row in rows[a:b]:
            one.add(*row)
        if i % 3 == 2:
            for row in rows[a:b]:
                mixed.add(*row)
        else:
            mixed.extend(block_of(rows[a:b]))
        assert len(mixed) == len(one) == b
        if i % 4 == 1:  # a checkpoint: each flushes its new rows
            assert one.flush(paths[0]) == mixed.flush(paths[1])
            mixed.columns()  # converting in between changes nothing
            assert mixed.total_energy_j == one.total_energy_j  # exact sums read in between
            assert mixed.energy_j == one.energy_j and mixed.bits == one.bits
    assert one.flush(paths[0]) == mixed.flush(paths[1])
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert seen_mixed == seen_one and len(seen_one) == len(rows)  # every client row, in order
    pd.testing.assert_frame_equal(mixed.frame(), one.frame(), check_exact=True)
    assert (mixed.total_energy_j, mixed.energy_j, mixed.bits) == (
        one.total_energy_j,
        one.energy_j,
        one.bits,
    )
    again = Ledger()
    again.load_journal(paths[1], *mixed.flush(paths[1]))
    _columns_equal(again.columns(), mixed.columns())
    assert (again.total_energy_j, again.bits) == (mixed.total_energy_j, mixed.bits)


def test_a_block_holds_its_columns_one_value_or_one_per_row():
    from flnet.sim.ledger import KINDS, OUTCOMES

    tag, node = Tag("round_trip", 4), np.array([3, 1])
    got = block(
        tag,
        node,
        -1,
        np.array([0, 2]),
        0.5,
        np.array([1.0, 2.0]),
        np.array([0.1, 0.2]),
        8.0,
        0.0,
        np.array([0, 1]),
    )
    rows = [
        (tag, 3, -1, KINDS[0], 0.5, 1.0, 0.1, 8.0, 0.0, OUTCOMES[0]),
        (tag, 1, -1, KINDS[2], 0.5, 2.0, 0.2, 8.0, 0.0, OUTCOMES[1]),
    ]
    _columns_equal(got, block_of(rows))


def test_journal_appends_only_new_rows_and_replays_exactly(tmp_path):
    ledger, path = _filled(300), tmp_path / "journal.csv"
    rows, size = ledger.flush(path)
    head = path.read_bytes()
    for row in _rows(50, seed=2):
        ledger.add(*row)
    rows2, size2 = ledger.flush(path)
    assert (rows, rows2) == (300, 350) and size2 > size
    assert path.read_bytes()[:size] == head  # appended, never rewritten
    again = Ledger()
    again.load_journal(path, rows2, size2)
    pd.testing.assert_frame_equal(again.frame(), ledger.frame(), check_exact=True)
    assert again.total_energy_j == ledger.total_energy_j
    # resuming from the first checkpoint cuts off what came after it
    cut = Ledger()
    cut.load_journal(path, rows, size)
    assert len(cut) == 300 and path.stat().st_size == size


def test_journal_gives_back_every_double_bit_for_bit(tmp_path):
    """The journal writes floats as Arrow's shortest text: random bit patterns cover the
    whole double range (subnormals, huge, negative), plus zeros of both signs, infinities and
    whole numbers written without ".0"; every one reads back the same double."""
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**63, 5 * 2000, dtype=np.int64).view(np.float64)
    special = [0.0, -0.0, 1.0, 3e20, 5e-324, 1e-7, 0.1, math.inf, -math.inf, 1.7976931348623157e308]
    values = [v for v in [*bits.tolist(), *special] if not math.isnan(v)]
    values += [0.0] * (-len(values) % 5)
    ledger = Ledger()
    for i in range(0, len(values), 5):
        ledger.add(Tag("round_trip", i), i % 9, -1, "upload", *values[i : i + 5], "ok")
    path = tmp_path / "journal.csv"
    again = Ledger()
    again.load_journal(path, *ledger.flush(path))
    cols = again.columns()
    written = np.stack([cols[c] for c in ("start_s", "end_s", "energy_j", "bits", "flops")], 1)
    written = written.ravel().tolist()
    assert np.array_equal(np.array(written).view(np.int64), np.array(values).view(np.int64))
    assert "\n0,round_trip,0,-1,upload," in path.read_text()  # the journal's plain CSV


def test_journal_shorter_than_its_checkpoint_is_refused(tmp_path):
    ledger, path = _filled(10), tmp_path / "journal.csv"
    rows, size = ledger.flush(path)
    with pytest.raises(FlnetError, match="expects 11"):
        Ledger().load_journal(path, rows + 1, size)


def test_each_record_energy_is_fsum_of_rows_ended_by_its_time(scenario):
    """Cut and cancelled work included (deadline, over-selection, fading)."""
    res = run(
        scenario(
            algorithm={
                "name": "fedavg",
                "cohort": {"clients_per_round": 4, "over_selection": 1.5, "deadline_s": 0.012},
                "local": {"steps": 2, "batch_size": 8},
            },
            clients={"count": 10, "cpu_hz": {"kind": "lognormal", "median": 2e8, "sigma": 0.6}},
            radio={"rayleigh_fading": True},
            run={"rounds": 8},
        ),
        write=False,
    )
    led = res.ledger
    assert {"deadline", "cancelled"} <= set(led.outcome)
    for rec in res.records.itertuples():
        assert rec.energy_j == math.fsum(led.energy_j[led.end_s <= rec.sim_time_s])


def test_columns_hold_each_row_in_order_and_an_empty_ledger_has_empty_columns():
    from flnet.sim.ledger import COLUMNS, KINDS, OUTCOMES, PATTERNS

    empty = Ledger().columns()
    assert list(empty) == list(COLUMNS) and all(len(v) == 0 for v in empty.values())
    ledger = Ledger()
    rows = [
        (Tag("round_trip", 3), 4, -1, "upload", 1.5, 2.25, 0.5, 800.0, 0.0, "ok"),
        (Tag("exchange", 7), 2, 5, "d2d", 0.0, 1.0, 0.0, 64.0, 0.0, "lost"),
        (Tag("stream", 9), 1, -2, "compute", 3.0, 4.0, 1e-9, 0.0, 1e6, "battery"),
    ]
    for row in rows:
        ledger.add(*row)
    cols = ledger.columns()
    for i, (tag, node, peer, kind, start, end, joules, bits, flops, outcome) in enumerate(rows):
        assert cols["round"][i] == tag.step and PATTERNS[cols["pattern"][i]] == tag.pattern
        assert (cols["node"][i], cols["peer"][i]) == (node, peer)
        assert KINDS[cols["kind"][i]] == kind and OUTCOMES[cols["outcome"][i]] == outcome
        got = [cols[c][i] for c in ("start_s", "end_s", "energy_j", "bits", "flops")]
        assert got == [start, end, joules, bits, flops]
    assert cols["round"].dtype.kind == "i" and cols["energy_j"].dtype.kind == "f"
