"""The README's scenario reference names every field of the schema."""

import re
from pathlib import Path

from flnet.scenario import Scenario, _unwrap


def field_paths(model, prefix=""):
    members = model if isinstance(model, tuple) else (model,)
    for m in members:
        for name, f in m.model_fields.items():
            path = f"{prefix}{name}"
            yield path
            sub = _unwrap(f.annotation)
            if isinstance(sub, tuple) or hasattr(sub, "model_fields"):
                yield from field_paths(sub, path + ".")


def test_readme_documents_every_scenario_field():
    text = Path("README.md").read_text()
    documented = set(re.findall(r"`([a-z_][a-z_0-9.]*)`", text))

    def ok(path):
        return (path in documented or path.rsplit(".", 1)[0] in documented
                or any(d.startswith(path + ".") for d in documented))

    missing = sorted({p for p in field_paths(Scenario) if not ok(p)})
    assert not missing, f"README's scenario reference lacks: {missing}"
