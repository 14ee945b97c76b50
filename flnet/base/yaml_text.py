"""YAML from a user's file, with errors that say where and what without quoting the file.

A file named by `extends:` may be anything (a password file, a key): YAML's own messages quote
what they stumbled on (a tag, an alias, a handle, the character that starts no token), so a
parse error could print a piece of it. `describe` keeps the line, the column and the kind of
error, and leaves out every quoted piece of the file: token kinds (``<block end>``) and one
punctuation or control character stay, since they show the syntax and hold no secret. `Loader`
is the safe loader whose values that cannot be built (``2001-13-45``, ``!!int "abc"``) are a
YAML error at their place instead of a bare ValueError that quotes them.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_SYNTAX = re.compile(r"<[a-z ]+>|[^\w\s]|\\[a-z]|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}| ")
_KINDS = {
    "ReaderError": "an unreadable character",
    "ScannerError": "a syntax error",
    "ParserError": "a structure error",
    "ComposerError": "an anchor or alias error",
    "ConstructorError": "a value that cannot be built",
}


class Loader(_SAFE):  # type: ignore[misc,valid-type]
    """The safe loader, whose standard tags' conversion errors name their place."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError):  # their text quotes the value
            kind = node.tag.rsplit(":", 1)[-1]
            raise yaml.constructor.ConstructorError(
                None, None, f"not a valid {kind}", node.start_mark
            ) from None


def _unquoted(text: str) -> str:
    def keep(m: re.Match[str]) -> str:
        return m.group(0) if _SYNTAX.fullmatch(m.group(0)[1:-1]) else "(a piece of the file)"

    return _QUOTED.sub(keep, text)


def describe(e: yaml.YAMLError, text: str = "") -> str:
    """``at line L, column C: problem (kind)`` for an error in `text`, every quoted piece of
    the file left out."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    if isinstance(e, yaml.reader.ReaderError):  # a control character: its code, not itself
        at = e.position
        line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
        where = f" at line {line}, column {column}" if text else f" at character {at}"
        code = ord(e.character) if isinstance(e.character, str) else e.character
        problem = f"character #x{code:04x} is not allowed in YAML"
    kind = _KINDS.get(type(e).__name__, "a YAML error")
    text = _unquoted(str(problem)) if problem else kind
    return f"{where}: {text}" + (f" ({kind})" if problem else "")
