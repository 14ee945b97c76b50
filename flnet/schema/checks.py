"""The check every section shares: a cross-field error that names the field the user wrote."""

from __future__ import annotations

from pydantic_core import PydanticCustomError


def inconsistent(field: str, message: str) -> PydanticCustomError:
    """A cross-field error that still names its field."""
    return PydanticCustomError("inconsistent", message, {"field": field})
