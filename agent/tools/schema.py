"""A small JSON-Schema validator for tool arguments: the subset tool schemas actually use.

Models send arguments as JSON text, and they get them wrong: wrong types, missing fields, invented ones.
The errors this returns are written for the model to read and correct on its next call, so each names the
exact path (``$.items[2].name``) and what was expected. Supported keywords: type (incl. lists of types),
properties, required, additionalProperties (bool or schema), items, enum, const, minimum, maximum,
minLength, maxLength, minItems, maxItems, anyOf, oneOf. Unknown keywords are ignored, as JSON Schema says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["validate"]

_TYPE_CHECKS: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    # bool is an int subclass in Python, but never a JSON number.
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def validate(schema: Mapping[str, Any], value: Any, path: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema``, as readable one-line messages (empty when valid)."""
    errors: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_TYPE_CHECKS.get(n, lambda _v: True)(value) for n in names):
            return [f"{path}: expected {' or '.join(names)}, got {_json_type(value)}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: must be {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        errors.append(f"{path}: must be one of {allowed}, got {value!r}")
    errors.extend(_check_bounds(schema, value, path))
    if isinstance(value, dict):
        errors.extend(_check_object(schema, value, path))
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            errors.extend(validate(schema["items"], item, f"{path}[{i}]"))
    errors.extend(_check_combinators(schema, value, path))
    return errors


def _check_bounds(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if _TYPE_CHECKS["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append(f"{path}: must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(f"{path}: must be <= {schema['maximum']}, got {value}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append(f"{path}: must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append(f"{path}: must be at most {schema['maxLength']} characters, got {len(value)}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{path}: needs at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{path}: allows at most {schema['maxItems']} items, got {len(value)}")
    return errors


def _check_object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> list[str]:
    errors: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or ():
        if name not in value:
            errors.append(f"{path}: missing required property {name!r}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            errors.extend(validate(properties[name], item, f"{path}.{name}"))
        elif extra is False:
            known = ", ".join(sorted(properties)) or "none"
            errors.append(f"{path}: unexpected property {name!r} (allowed: {known})")
        elif isinstance(extra, Mapping):
            errors.extend(validate(extra, item, f"{path}.{name}"))
    return errors


def _check_combinators(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
    if "anyOf" in schema:
        branches = [validate(s, value, path) for s in schema["anyOf"]]
        if all(branches):
            return [f"{path}: matches none of the allowed forms ({branches[0][0]})"]
    if "oneOf" in schema:
        matches = sum(1 for s in schema["oneOf"] if not validate(s, value, path))
        if matches != 1:
            return [f"{path}: must match exactly one allowed form, matched {matches}"]
    return []
