"""Text made storable on every backend where it enters the agent (the model's answers, tool results).

PostgreSQL refuses NUL in text and JSONB, and a lone UTF-16 surrogate has no UTF-8 form; SQLite takes both.
Replacing them with U+FFFD where text enters means every backend stores the same thing and an answer already
paid for is never lost when it is persisted. (Platform text is cleaned the same way in `adapters.base`, which
the agent may not import.)
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["storable", "storable_text"]

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text)


def storable(value: Any) -> Any:
    """Every string inside ``value`` (a message dict, its parts and tool calls) made storable; other values
    are returned as they are, so an already clean message comes back equal."""
    if isinstance(value, str):
        return storable_text(value) if _UNSTORABLE.search(value) else value
    if isinstance(value, dict):
        return {key: storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [storable(item) for item in value]
    return value
