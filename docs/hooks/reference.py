"""MkDocs hook: the reference pages made from their one source when the site is built.

- `reference/scenario.md` from `scenario.schema.json` (the schema `flnet schema` prints; a test
  keeps the file equal to it) and, for the per-client distributions the schema names only by
  their `kind`, from `flnet.dists`;
- `reference/cli.md` from the argparse parser of `flnet.cli`.

The pages exist only in the built site, never in the repository, so they cannot go stale. The
functions below are plain (schema or parser in, Markdown out) so the tests call them without
MkDocs; `on_files` is the hook MkDocs calls (`hooks:` in mkdocs.yml).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "scenario.schema.json"
SCENARIO_PAGE = "reference/scenario.md"
CLI_PAGE = "reference/cli.md"
TAGS = ("name", "kind", "mode")  # the field that picks a union's member, as in flnet.scenario

# A field's unit is in its name (the project's naming rule); longest suffix first.
SUFFIX_UNITS = (
    ("_dbm_hz", "dBm/Hz"),
    ("_dbm", "dBm"),
    ("_db", "dB"),
    ("_hz", "Hz"),
    ("_bits", "bit"),
    ("_s", "s"),
    ("_j", "J"),
    ("_w", "W"),
    ("_m", "m"),
    ("_h", "h"),
    ("_hour", "hour of day"),
    ("_soc", "fraction of capacity"),
)


# ---------------------------------------------------------------- the scenario reference


def _ref_name(node: dict) -> str | None:
    ref = node.get("$ref")
    return ref.rsplit("/", 1)[-1] if ref else None


def _members(node: dict) -> list[dict]:
    """The alternatives of a union node (oneOf / anyOf), or the node itself."""
    return node.get("oneOf") or node.get("anyOf") or [node]


def _is_distribution(node: dict) -> bool:
    """A per-client distribution: the schema names only its `kind` (flnet.dists)."""
    props = node.get("properties", {})
    return node.get("type") == "object" and set(props) == {"kind"} and "const" in props["kind"]


def _tag_of(defn: dict) -> tuple[str, str] | None:
    """(tag field, its value) of a union member; a tag that allows several values (a CNN's
    `kind`) gives them all, joined by ` / `."""
    props = defn.get("properties", {})
    for key in TAGS:
        node = props.get(key, {})
        if "const" in node:
            return key, str(node["const"])
        if "enum" in node and key in defn.get("required", []):
            return key, " / ".join(map(str, node["enum"]))
    return None


def _children(node: dict) -> Iterator[tuple[str, str]]:
    """(definition name, path suffix) of every definition a field's node refers to; an array's
    items add `[]` to the path."""
    for member in _members(node):
        name = _ref_name(member)
        if name:
            yield name, ""
        elif member.get("type") == "array" and "items" in member:
            for child, suffix in _children(member["items"]):
                yield child, "[]" + suffix
        elif member is not node and ("oneOf" in member or "anyOf" in member):
            yield from _children(member)


def where_used(schema: dict) -> dict[str, list[str]]:
    """Each definition's dotted paths in a scenario file, in the order a reader meets them
    (breadth first from the top level); the top level itself is ``""``."""
    defs = schema["$defs"]
    paths: dict[str, list[str]] = {"": [""]}
    queue: list[tuple[str, dict]] = [("", schema)]
    while queue:
        prefix, defn = queue.pop(0)
        for field, node in defn.get("properties", {}).items():
            for child, suffix in _children(node):
                path = f"{prefix}{field}{suffix}"
                seen = paths.setdefault(child, [])
                if path not in seen:
                    seen.append(path)
                    queue.append((path + ".", defs[child]))
    return paths


def _number(value: float) -> str:
    if isinstance(value, bool) or not isinstance(value, float):
        return json.dumps(value)
    text = f"{value:.6g}"
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m[1].replace("+", "") + m[2], text)


def _value(value: Any) -> str:
    """A value as a scenario file writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w.+/-]+", value) else json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"


def _default(node: dict, required: bool) -> str:
    if "default" not in node:
        return "required" if required else ""
    value = node["default"]
    if isinstance(value, dict):
        tags = {k: value[k] for k in TAGS if k in value}
        if tags:
            return f"`{_value(tags)}` (its defaults)"
        return "its fields' defaults"
    text = _value(value)
    return f"`{text}`" if len(text) <= 60 else f"`{text[:57]}...`"


def _bounds(node: dict) -> list[str]:
    out = []
    for key, sign in (
        ("minimum", ">= "),
        ("exclusiveMinimum", "> "),
        ("maximum", "<= "),
        ("exclusiveMaximum", "< "),
    ):
        if key in node:
            out.append(sign + _number(node[key]))
    if "minItems" in node and node.get("minItems") == node.get("maxItems"):
        out.append(f"exactly {node['minItems']} items")
    else:
        if "minItems" in node:
            out.append(f"at least {node['minItems']} items")
        if "maxItems" in node:
            out.append(f"at most {node['maxItems']} items")
    if "minLength" in node:
        out.append(f"at least {node['minLength']} characters")
    if "pattern" in node:
        out.append(f"matches `{node['pattern']}`")
    return out


def _link(defs: dict, name: str) -> str:
    tag = _tag_of(defs[name])
    label = f"{tag[0]}: {tag[1]}" if tag else name
    return f"[`{label}`](#{name.lower()})"


def _type(node: dict, defs: dict) -> tuple[str, list[str]]:
    """(what the field holds, what values it allows) for one schema node."""
    name = _ref_name(node)
    if name:
        return _link(defs, name), []
    if "oneOf" in node or "anyOf" in node:
        kinds: list[str] = []
        allowed: list[str] = []
        dists = False
        for member in _members(node):
            if _is_distribution(member):
                dists = True
                continue
            kind, allow = _type(member, defs)
            kinds.append(kind)
            allowed += allow
        if dists:
            kinds.insert(
                1 if kinds and kinds[0] == "number" else 0,
                "[per-client distribution](#per-client-distributions)",
            )
        return " or ".join(dict.fromkeys(kinds)), allowed
    if "enum" in node:
        return node.get("type", "value"), ["one of " + ", ".join(f"`{v}`" for v in node["enum"])]
    if "const" in node:
        return node.get("type", "value"), [f"`{_value(node['const'])}`"]
    kind = node.get("type", "any")
    if kind == "array" and "items" in node:
        item, allowed = _type(node["items"], defs)
        return f"list of {item}", _bounds(node) + [f"each {a}" for a in allowed]
    return kind, _bounds(node)


def unit_of(field: str, named: dict[str, str] | None = None) -> str:
    """The unit `named` gives a field (`kappa`: J/(cycle Hz^2), `path_loss_slope_db`:
    dB/decade), else the unit its name ends with (`tx_power_dbm`: dBm)."""
    if named and named.get(field):
        return named[field]
    for suffix, unit in SUFFIX_UNITS:
        if field.endswith(suffix):
            return unit
    return ""


def named_units() -> dict[str, str]:
    """Units from the plausible ranges in flnet.units, by field name (`clients.kappa`:
    J/(cycle Hz^2)); a field name given two units there gets none from here."""
    from flnet.units import PLAUSIBLE

    units: dict[str, set[str]] = {}
    for path, plausible in PLAUSIBLE.items():
        units.setdefault(path.rsplit(".", 1)[-1], set()).add(plausible.unit)
    return {f: u.pop() for f, u in units.items() if len(u) == 1 and "" not in u}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _prose(text: str) -> str:
    """Text from a docstring or a schema description as literal Markdown: `W[i][j]` or
    `a * b * c` outside backticks must not become a link or emphasis."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside backticks
        parts[i] = re.sub(r"([\\*_\[\]])", r"\\\1", parts[i])
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")  # no Markdown escape
    return _cell("`".join(parts))


TAGS = {  # the tag fields that pick one of several sections: their value says which
    "kind": "which kind this is: the value picks this section's fields",
    "name": "which one this is: the value picks this section's fields",
    "mode": "which radio model: the value picks this section's fields",
}


def field_table(defn: dict, defs: dict, units: dict[str, str] | None = None) -> list[str]:
    required = set(defn.get("required", []))
    rows = [
        "| field | type | allowed | default | unit | description |",
        "|---|---|---|---|---|---|",
    ]
    for field, node in defn.get("properties", {}).items():
        kind, allowed = _type(node, defs)
        description = node.get("description", "")
        if not description and _ref_name(node):
            description = defs[_ref_name(node) or ""].get("description", "")
        if not description and field in TAGS and ("const" in node or "enum" in node):
            description = TAGS[field]
        cells = [
            f"`{field}`",
            kind,
            "; ".join(allowed),
            _default(node, field in required),
            unit_of(field, units),
            _prose(description),
        ]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _section_of(path: str) -> str:
    return re.split(r"[.\[]", path, maxsplit=1)[0]


def distribution_fields(schema: dict, paths: dict[str, list[str]]) -> list[str]:
    """The dotted paths of the fields that take a per-client distribution."""
    found = []
    for name, defn in [("", schema), *schema["$defs"].items()]:
        for field, node in defn.get("properties", {}).items():
            if any(_is_distribution(m) for m in _members(node)):
                found += [f"{p}.{field}" if p else field for p in paths[name]]
    return found


def distribution_section(distributions: dict[str, dict], at: list[str]) -> list[str]:
    """The per-client distributions (kind -> the JSON Schema of its model in flnet.dists) and
    the fields (`at`) that take one."""
    lines = [
        "## Per-client distributions {#per-client-distributions}",
        "",
        "A field marked *per-client distribution* takes a number (every client the same) or a "
        "mapping with a `kind` below, sampled once per client when the world is built, e.g. "
        "`cpu_hz: {kind: lognormal, median: 1.0e+9, sigma: 0.3}`.",
        "",
        "**At:** " + ", ".join(f"`{p}`" for p in at),
        "",
    ]
    for kind, schema in distributions.items():
        lines += [f"### `kind: {kind}` {{#distribution-{kind.replace('_', '-')}}}", ""]
        if schema.get("description"):
            lines += [_prose(schema["description"]), ""]
        lines += field_table(schema, {}) + [""]
    return lines


def scenario_reference(
    schema: dict, distributions: dict[str, dict], units: dict[str, str] | None = None
) -> str:
    """The scenario reference page: every field of every definition the schema holds, grouped
    by the top-level section where a reader first meets it."""
    defs = schema["$defs"]
    paths = where_used(schema)
    unreached = sorted(set(defs) - set(paths))
    if unreached:
        raise ValueError(f"definitions no field refers to: {unreached}")
    lines = [
        "# Scenario reference",
        "",
        "Every field a scenario file may hold, with its type, the values it allows, its default, "
        "its unit and what it means. This page is generated from `scenario.schema.json` when the "
        "site is built (`flnet schema` prints the same schema; `flnet validate FILE` checks a "
        "file against it, and more). A field's unit is part of its name: `_s` seconds, `_j` "
        "joules, `_w` watts, `_hz` hertz, `_m` metres, `_db` / `_dbm` decibels, `_bits` bits. "
        "*required* marks a field without a default.",
        "",
        "A field whose type is a link holds a mapping described further down; a union (several "
        "links) picks its member by the tag field the link names (`name: fedavg`, `kind: iid`, "
        "`mode: physical`). Lists are written `[]` in paths.",
        "",
        "## Top level {#scenario}",
        "",
    ]
    lines += field_table(schema, defs, units) + [""]
    sections = list(schema["properties"])
    for section in sections:
        owned = [n for n in paths if n and _section_of(paths[n][0]) == section]
        if not owned:
            continue
        lines += [f"## `{section}`", ""]
        for name in owned:
            defn = defs[name]
            tag = _tag_of(defn)
            title = f"{name} (`{tag[0]}: {tag[1]}`)" if tag else name
            at = ", ".join(f"`{p}`" for p in paths[name])
            lines += [f"### {title} {{#{name.lower()}}}", "", f"**At:** {at}", ""]
            if defn.get("description"):
                lines += [_prose(defn["description"]), ""]
            lines += field_table(defn, defs, units) + [""]
    lines += distribution_section(distributions, distribution_fields(schema, paths))
    return "\n".join(lines)


def distribution_schemas() -> dict[str, dict]:
    """kind -> JSON Schema of each per-client distribution model in flnet.dists."""
    from flnet import dists

    return {kind: model.model_json_schema() for kind, model in dists._KINDS.items()}


def scenario_page() -> str:
    schema = json.loads(SCHEMA_PATH.read_text())
    return scenario_reference(schema, distribution_schemas(), named_units())


# ---------------------------------------------------------------- the command-line reference


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _invocation(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    flags = ", ".join(action.option_strings)
    if action.nargs == 0:
        return f"`{flags}`"
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    if action.nargs == "?":
        metavar = f"[{metavar}]"
    return f"`{flags} {metavar}`"


def _argument_rows(p: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | meaning | default |", "|---|---|---|"]
    for action in p._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        meaning = action.help or ""
        if isinstance(action, argparse._AppendAction) and "repeatable" not in meaning:
            meaning += " (repeatable)"
        if action.required and action.option_strings:
            meaning += " (required)"
        default = action.default
        shown = (
            ""
            if default in (None, False, argparse.SUPPRESS) or action.nargs == 0
            else f"`{default}`"
        )
        rows.append(f"| {_invocation(action)} | {_prose(meaning)} | {shown} |")
    return rows


def _usage(p: argparse.ArgumentParser) -> str:
    p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=80)  # not the terminal's
    lines = p.format_usage().strip().splitlines()
    indent = len("usage: ")  # argparse aligns the later lines after it
    return "\n".join([lines[0][indent:]] + [line[indent:] for line in lines[1:]])


def _command(p: argparse.ArgumentParser, help: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{p.prog}`", ""]
    if help:
        lines += [help[0].upper() + help[1:] + ".", ""]
    if p.description and p.description != help:
        lines += [_prose(p.description), ""]
    lines += ["```text", _usage(p), "```", ""]
    if len(_argument_rows(p)) > 2:
        lines += _argument_rows(p) + [""]
    sub = _subparsers(p)
    if sub is not None:
        helps = {a.dest: a.help or "" for a in sub._choices_actions}
        for name, child in sub.choices.items():
            lines += _command(child, helps.get(name, ""), level + 1)
    return lines


def cli_reference(parser: argparse.ArgumentParser) -> str:
    lines = [
        "# Command line",
        "",
        "Every command of `flnet`, generated from its argparse parser (`flnet.cli.parser`) "
        "when the site is built; `flnet COMMAND --help` prints the same.",
        "",
        "Exit status: 0 done; 1 a sweep with points that did not finish; 2 a refused scenario, "
        "file or argument; 3 a run that diverged (its records up to then are kept); 4 a run "
        "whose results could not all be written; 130 interrupted (Ctrl-C or SIGTERM); 141 the "
        "reader of the output went away (`| head`).",
        "",
        "```text",
        _usage(parser),
        "```",
        "",
    ]
    lines += _argument_rows(parser) + [""]
    sub = _subparsers(parser)
    assert sub is not None
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    for name, child in sub.choices.items():
        lines += _command(child, helps.get(name, ""), 2)
    return "\n".join(lines)


def cli_page() -> str:
    from flnet.cli import parser

    return cli_reference(parser())


# ---------------------------------------------------------------- the MkDocs hook


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (MkDocs 1.6+: `File.generated`)."""
    from mkdocs.structure.files import File

    for uri, text in ((SCENARIO_PAGE, scenario_page()), (CLI_PAGE, cli_page())):
        files.append(File.generated(config, uri, content=text))
    return files
