"""Turn each API's usage block into the one `Usage` record.

Both sides agree that ``Usage.prompt_tokens`` is the whole prompt. OpenAI already counts cached tokens in
``prompt_tokens``; Anthropic reports the uncached remainder as ``input_tokens``, so the cache reads and
writes are added back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.llm.base import Usage

__all__ = ["parse_anthropic_usage", "parse_openai_usage"]


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def parse_openai_usage(usage: Mapping[str, Any] | None) -> Usage:
    """Usage from a Chat Completions ``usage`` object (None or malformed → all zeros)."""
    if not isinstance(usage, Mapping):
        return Usage()
    prompt_details = _section(usage, "prompt_tokens_details")
    completion_details = _section(usage, "completion_tokens_details")
    return Usage(
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        # OpenRouter/DeepSeek spell cache figures differently; take whichever is present.
        cache_read_tokens=_int(prompt_details.get("cached_tokens")) or _int(usage.get("prompt_cache_hit_tokens")),
        cache_write_tokens=_int(prompt_details.get("cache_write_tokens")),
        reasoning_tokens=_int(completion_details.get("reasoning_tokens")),
    )


def parse_anthropic_usage(usage: Mapping[str, Any] | None, *, output_tokens: int | None = None) -> Usage:
    """Usage from a Messages API ``usage`` object; prompt = input + cache_read + cache_creation.

    ``output_tokens`` overrides the block's own figure (streams report the final count in message_delta).
    """
    if not isinstance(usage, Mapping):
        usage = {}
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_write = _int(usage.get("cache_creation_input_tokens"))
    return Usage(
        prompt_tokens=_int(usage.get("input_tokens")) + cache_read + cache_write,
        completion_tokens=_int(usage.get("output_tokens")) if output_tokens is None else _int(output_tokens),
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
