"""Every broken input in the corpus (tests/corpus.py: scenario files and data files in every
format) gives exit status 2 and one message, one line per offending field or file, naming it,
and no traceback. Most cases run through `flnet.cli.main` in one driver process (each under a
60 s alarm); every twelfth also through its own `python -m flnet.cli validate` process (a 300 s
timeout: a hang guard, not a speed check)."""

import collections
import json
import subprocess
import sys

import corpus
import pytest

FORMATS = ("yaml", "idx", "idx-gz", "cifar10", "cifar100", "npz")


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
    return corpus.build(tmp_path_factory.mktemp("corpus"))


def _fmt(case) -> str:
    return next(f for f in sorted(FORMATS, key=len, reverse=True) if case.name.startswith(f + "-"))


def _check(case, rc, stderr):
    assert "Traceback" not in stderr, f"{case.name}: {stderr}"
    assert rc == 2, f"{case.name}: exit {rc}: {stderr}"
    lines = [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == case.lines, f"{case.name}: {stderr}"
    assert lines[0].startswith("error:"), f"{case.name}: {stderr}"
    assert case.expect in stderr, f"{case.name}: {case.expect!r} not in {stderr}"
    assert case.names in stderr, f"{case.name}: {case.names!r} not in {stderr}"
    assert not case.absent or case.absent not in stderr, f"{case.name} echoes the file: {stderr}"


def test_corpus_covers_every_format(cases):
    counts = collections.Counter(map(_fmt, cases))
    assert len(cases) >= 80
    assert all(counts[f] >= 5 for f in FORMATS), counts


def test_every_broken_input_gives_one_clear_error(cases, tmp_path):
    argv = tmp_path / "cases.json"
    argv.write_text(json.dumps([c.argv for c in cases]))
    out = subprocess.run(
        [sys.executable, "tests/corpus_driver.py", str(argv)],
        capture_output=True,
        text=True,
        timeout=60 * len(cases),
    )
    results = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(results) == len(cases), out.stderr
    failures = []
    for case, result in zip(cases, results):
        try:
            _check(case, result["rc"], result["stderr"])
        except AssertionError as e:
            failures.append(str(e).splitlines()[0][:300])
    assert not failures, "\n".join(failures)


def test_a_sample_through_the_real_command(cases):
    for case in cases[::12]:
        out = subprocess.run(
            [sys.executable, "-m", "flnet.cli", "validate", *case.argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
        _check(case, out.returncode, out.stderr)
