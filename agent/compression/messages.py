"""Small read-only helpers over OpenAI-format message dicts, shared by the compression stages.

Every helper treats messages as immutable values; none of them mutates its argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent.jsonlimits import loads_bounded

__all__ = [
    "Message",
    "content_text",
    "has_image",
    "has_visible_text",
    "is_image_part",
    "last_index",
    "parse_arguments",
    "plain_text",
    "tool_call_ids",
    "tool_calls_of",
]

Message = Mapping[str, Any]

_IMAGE_TYPES = ("image_url", "image", "input_image")


def is_image_part(part: Any) -> bool:
    """Whether a content part is an image (OpenAI ``image_url`` or an Anthropic-style ``image`` block)."""
    return isinstance(part, Mapping) and part.get("type") in _IMAGE_TYPES


def content_text(message: Message) -> str:
    """The visible text of a message's content (text parts joined), '' for None or image-only content."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "") for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        )
    return ""


def has_image(message: Message) -> bool:
    """Whether the message's content carries at least one image part."""
    content = message.get("content")
    return isinstance(content, list) and any(is_image_part(p) for p in content)


def has_visible_text(message: Message) -> bool:
    """Whether the message shows the user some text (a tool-calls-only assistant turn does not)."""
    return bool(content_text(message).strip())


def tool_calls_of(message: Message) -> list[Mapping[str, Any]]:
    """The well-formed tool calls of an assistant message (entries that are not dicts are ignored)."""
    if message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    if not calls:
        return []
    # (A dict is checked first: the Mapping check is an ABC lookup, and every stage asks this of every message.)
    return [c for c in calls if type(c) is dict or isinstance(c, Mapping)]


def tool_call_ids(message: Message) -> list[str]:
    """Ids of an assistant message's tool calls, in order."""
    return [str(c.get("id")) for c in tool_calls_of(message) if c.get("id")]


def parse_arguments(raw: Any) -> Any:
    """Parse a tool call's ``arguments`` JSON string; raise ValueError when it is not valid JSON."""
    if isinstance(raw, (dict, list)):
        return raw
    if not isinstance(raw, str):
        raise ValueError("arguments are not a string")
    return loads_bounded(raw)


def last_index(messages: Sequence[Message], role: str, *, visible_text: bool = False) -> int:
    """Index of the last message with ``role`` (and visible text if asked), -1 when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == role and (not visible_text or has_visible_text(message)):
            return i
    return -1


def plain_text(message: Message) -> str:
    """A message as plain text, for search and for reading it back: its text, then each tool call as
    ``[call NAME]`` and one ``key: value`` line per argument, values unescaped (a command or a file body reads
    as typed, not as a JSON string); arguments that are not a JSON object are shown raw."""
    parts = [content_text(message)] if content_text(message) else []
    if has_image(message):
        parts.append("[image attached]")
    for call in tool_calls_of(message):
        fn = call.get("function") or {}
        raw = fn.get("arguments")
        try:
            args = parse_arguments(raw if raw is not None else "{}")
        except ValueError:
            args = None
        if isinstance(args, Mapping):
            lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}" for k, v in args.items()]
        else:
            lines = [str(raw)] if raw else []
        parts.append("\n".join([f"[call {fn.get('name') or 'tool'}]", *lines]))
    return "\n".join(parts)
