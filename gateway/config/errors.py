"""Configuration errors as an operator reads them: `ConfigError`, one line per bad key with its value (secrets
masked) and what is allowed, and a "did you mean" for a misspelt setting or section."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from gateway.config.masking import describe_value

__all__ = ["ConfigError", "did_you_mean", "format_errors"]


class ConfigError(ValueError):
    """The configuration is invalid; the message names every bad key, its value and what is allowed."""


_SECRET_KEYS = ("api_key", "token", "secret", "password", "url")


def _describe_value(loc: tuple[Any, ...], value: Any) -> str:
    key = str(loc[-1]) if loc else ""
    return describe_value(key, value, secret=any(word in key for word in _SECRET_KEYS))


def format_errors(exc: ValidationError, root: type[BaseModel]) -> str:
    """The message of a failed validation of ``root``: one indented line per error."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        key = ".".join(str(p) for p in loc) or "(root)"
        message = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            lines.append(f"  {key}: unknown setting{did_you_mean(loc, _sibling_settings(root, loc))}")
            continue
        lines.append(f"  {key} = {_describe_value(loc, err.get('input'))}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def did_you_mean(loc: tuple[Any, ...], known: Iterable[str]) -> str:
    """" (did you mean llm.temperature?)" when a known name is close to the last part of ``loc``."""
    close = difflib.get_close_matches(str(loc[-1]).lower(), list(known), n=1, cutoff=0.7)
    return f" (did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?)" if close else ""


def _sibling_settings(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The settings of the section that holds ``loc`` (empty when the path leads nowhere)."""
    model: Any = root
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(str(part))
        if field is None:
            return []
        # A section typed `Model | None` is still that model.
        model = next((t for t in (field.annotation, *get_args(field.annotation)) if hasattr(t, "model_fields")), None)
    return list(getattr(model, "model_fields", {}))
