"""Every shipped scenario at a fixed small size, reduced to one digest of its tables: a
refactoring that claims "behaviour unchanged" runs this before and after on one machine and
compares (bit for bit holds only for the same path on the same machine; never a test).

    .venv/bin/python benchmarks/same_records.py --save /tmp/before.json   # at the old commit
    .venv/bin/python benchmarks/same_records.py --check /tmp/before.json  # at the new one

Each scenario runs `--rounds` rounds (default 5) in memory (nothing written); the digest is a
SHA-256 of the records and the ledger as CSV (full float precision), the partition too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path

from flnet.runner import run

ROOT = Path(__file__).resolve().parent.parent


def digest(path: Path, rounds: int) -> dict[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(path, {"run": {"rounds": rounds}, "device": "cpu"}, write=False)
    out = {}
    for name, table in (("records", result.records), ("ledger", result.ledger)):
        text = "" if table is None else table.to_csv(index=False, float_format="%.17g")
        out[name] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path)
    group.add_argument("--check", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("scenarios", nargs="*", type=Path)
    args = parser.parse_args()
    paths = args.scenarios or sorted((ROOT / "scenarios").glob("*.yaml"))
    seen = {}
    for path in paths:
        seen[path.name] = digest(path, args.rounds)
        print(path.name, seen[path.name], flush=True)
    if args.save:
        args.save.write_text(json.dumps(seen, indent=1))
        return 0
    before = json.loads(args.check.read_text())
    changed = [k for k in seen if before.get(k) != seen[k]]
    print("changed:", ", ".join(changed) if changed else "none", f"({len(seen)} scenarios)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
