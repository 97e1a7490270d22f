"""What the settings sections share: the strict section config, the largest believable window, and lists
written as ``a,b`` or as a JSON list."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import ConfigDict
from pydantic_settings import NoDecode

__all__ = ["MAX_CONTEXT_LENGTH", "SECTION", "CsvList", "split_csv"]

SECTION = ConfigDict(extra="forbid", validate_default=True)
# The largest windows offered today are 10M tokens; far beyond that a value is a typo, not a model.
MAX_CONTEXT_LENGTH = 100_000_000


def split_csv(value: Any) -> Any:
    """A list from ``a,b`` or from a JSON list ``["a", "b"]`` (the usual pydantic-settings form)."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            raise ValueError("looks like a JSON list but is not valid JSON") from None
        if not isinstance(items, list) or not all(isinstance(i, str | int) and not isinstance(i, bool)
                                                  for i in items):
            raise ValueError("a JSON list here must hold only strings or numbers")
        return [str(item).strip() for item in items if str(item).strip()]
    return [item.strip() for item in value.split(",") if item.strip()]


CsvList = Annotated[list[str], NoDecode]
