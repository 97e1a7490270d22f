"""JSON from outside (a model's tool-call arguments, a provider's reply) parsed with a nesting limit.

Python's json module recurses once per nesting level: arguments nested 100,000 deep raise RecursionError,
which is no ValueError and escapes every ``except ValueError``; arguments nested 900 deep parse, then break
whatever walks them recursively (schema validation, serialisation). `loads_bounded` turns both into
`TooDeep`, a ValueError, so every existing "not valid JSON" path handles it.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "TooDeep", "json_depth", "loads_bounded"]

MAX_JSON_DEPTH = 64


class TooDeep(ValueError):
    """The JSON nests deeper than allowed."""


def json_depth(value: Any) -> int:
    """Nesting depth of parsed JSON (a scalar is 0, ``[]`` is 1), walked without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def loads_bounded(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads(text)``, raising `TooDeep` when it nests deeper than ``max_depth``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(f"JSON nested too deeply (limit {max_depth} levels)") from None
    # Each level opens a bracket, so text with few brackets (nearly all of it) cannot nest too deep.
    opened = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    if opened > max_depth and json_depth(value) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    return value
