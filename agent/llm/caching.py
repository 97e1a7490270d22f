"""Prompt caching markers, "system_and_3" (R-K1), and when to use them (R-K2).

Anthropic-family models cache the prompt prefix up to each ``cache_control`` breakpoint, at most 4 per
request, in the order tools, system, messages; a request reads the longest cached prefix ending at one of its
breakpoints or up to 20 blocks before one. A gateway request is laid out stable prefix first — tool schemas,
the system prompt (its pins last), which no compaction changes — then the handoff summary, then the verbatim
tail. So the system prompt's marker ends the stable prefix: the first request after a compaction reads it
from the cache, and rewrites only the new summary and the tail. The markers on the last 3 non-system messages
move with the tail: each request reads what the previous one wrote, within the lookback even after a turn of
several tool calls. Markers on any other message are removed, so re-applying to a grown list never exceeds
the 4-breakpoint limit and applying twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CACHE_TTLS",
    "apply_cache_markers",
    "cache_marker",
    "caching_enabled_for",
    "count_cache_markers",
    "validate_cache_ttl",
]

CACHE_TTLS = ("5m", "1h")
_TAIL = 3


def validate_cache_ttl(ttl: str) -> str:
    """Return ``ttl`` if Anthropic accepts it ("5m" or "1h"); anything else is a configuration error."""
    if ttl not in CACHE_TTLS:
        raise ValueError(f"prompt cache TTL must be one of {', '.join(CACHE_TTLS)}, not {ttl!r}")
    return ttl


def cache_marker(ttl: str = "5m") -> dict[str, str]:
    """The ``cache_control`` value for a TTL (5m is the API default, so it is left implicit)."""
    validate_cache_ttl(ttl)
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def caching_enabled_for(provider_name: str, model: str, base_url: str | None = None) -> bool:
    """Whether to send cache markers: Claude models on routes that accept ``cache_control``.

    Those routes are the native Anthropic Messages API and OpenRouter; other OpenAI-compatible servers
    either reject or silently drop unknown fields, so nothing is sent to them.
    """
    provider = (provider_name or "").lower()
    url = (base_url or "").lower()
    if "claude" not in (model or "").lower():
        return False
    return provider in ("anthropic", "openrouter") or "api.anthropic.com" in url or "openrouter.ai" in url


def _strip_parts(content: list[Any]) -> list[Any]:
    return [
        {k: v for k, v in part.items() if k != "cache_control"} if isinstance(part, Mapping) else part
        for part in content
    ]


def _has_marker(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    in_parts = isinstance(content, list) and any(
        isinstance(p, Mapping) and "cache_control" in p for p in content
    )
    return in_parts or "cache_control" in message


def _unmarked(message: Mapping[str, Any]) -> Mapping[str, Any]:
    if not _has_marker(message):
        return message
    clean = {k: v for k, v in message.items() if k != "cache_control"}
    if isinstance(clean.get("content"), list):
        clean["content"] = _strip_parts(clean["content"])
    return clean


def _marked(message: Mapping[str, Any], marker: dict[str, str], native_anthropic: bool) -> Mapping[str, Any]:
    base = dict(_unmarked(message))
    content = base.get("content")
    if base.get("role") == "tool":
        # OpenAI-format routes have no place for a marker on a tool result; the native API has one.
        if native_anthropic:
            base["cache_control"] = dict(marker)
        return base
    if isinstance(content, str) and content:
        base["content"] = [{"type": "text", "text": content, "cache_control": dict(marker)}]
    elif isinstance(content, list) and content:
        parts = list(content)
        last = parts[-1]
        parts[-1] = {**last, "cache_control": dict(marker)} if isinstance(last, Mapping) else last
        base["content"] = parts
    else:
        base["cache_control"] = dict(marker)
    return base


def apply_cache_markers(
    messages: Sequence[Mapping[str, Any]],
    *,
    system_included: bool = True,
    ttl: str = "5m",
    native_anthropic: bool = False,
) -> list[Mapping[str, Any]]:
    """Return a new list with cache breakpoints on the system prompt and the last 3 non-system messages.

    ``system_included`` says the first message is the system prompt to mark (when its role is system).
    String content becomes a one-part list carrying the marker; list content marks its last part; empty
    content marks the message itself; tool messages are marked only for the native Anthropic API. The
    caller's messages are never modified; unchanged messages are shared, changed ones are new dicts.
    """
    marker = cache_marker(ttl)
    targets: set[int] = set()
    if system_included and messages and messages[0].get("role") == "system":
        targets.add(0)
    non_system = [i for i, m in enumerate(messages) if m.get("role") != "system"]
    targets.update(non_system[-_TAIL:])
    return [
        _marked(m, marker, native_anthropic) if i in targets else _unmarked(m) for i, m in enumerate(messages)
    ]


def count_cache_markers(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many messages carry a cache breakpoint (on the message or any of its parts)."""
    return sum(1 for m in messages if _has_marker(m))
