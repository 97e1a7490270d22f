"""Convert internal OpenAI-format messages to Anthropic Messages API blocks and replies back.

Pure functions, no I/O. Anthropic differs in four ways that matter here: the system prompt is a top-level
field; tool calls are ``tool_use`` blocks in the assistant turn and results are ``tool_result`` blocks in a
user turn; images are base64 ``source`` blocks; consecutive turns of one role must be merged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.jsonlimits import loads_bounded

__all__ = [
    "STOP_REASONS",
    "blocks_to_message",
    "image_block",
    "to_anthropic_messages",
    "tools_to_anthropic",
]

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_DATA_URL = re.compile(r"^data:(image/[\w.+-]+);base64,(.*)$", re.DOTALL)


def image_block(url: str) -> dict[str, Any]:
    """An Anthropic image block for an OpenAI ``image_url`` (data URLs become base64 sources)."""
    match = _DATA_URL.match(url)
    if match:
        return {"type": "image", "source": {"type": "base64", "media_type": match.group(1), "data": match.group(2)}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _part_block(part: Any) -> dict[str, Any] | None:
    if isinstance(part, str):
        return {"type": "text", "text": part} if part else None
    if not isinstance(part, Mapping):
        return None
    kind = part.get("type")
    if kind == "text":
        if not part.get("text"):
            return None
        block: dict[str, Any] = {"type": "text", "text": str(part["text"])}
    elif kind == "image_url":
        ref = part.get("image_url")
        url = ref.get("url") if isinstance(ref, Mapping) else ref
        if not isinstance(url, str) or not url:
            return None
        block = image_block(url)
    elif kind in ("image", "tool_use", "tool_result", "document"):
        block = {k: v for k, v in part.items() if k != "cache_control"}
    else:
        return None
    if "cache_control" in part:
        block["cache_control"] = part["cache_control"]
    return block


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, Sequence):
        return [b for b in (_part_block(p) for p in content) if b is not None]
    return []


def _tool_use_block(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = call.get("function") or {}
    raw = fn.get("arguments") or "{}"
    try:
        arguments = loads_bounded(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = None
    if not isinstance(arguments, Mapping):
        # The Messages API needs an object; keep unparseable arguments visible instead of dropping them.
        arguments = {"_raw_arguments": raw}
    return {"type": "tool_use", "id": str(call.get("id") or ""), "name": str(fn.get("name") or ""),
            "input": dict(arguments)}


def _convert(message: Mapping[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    role = message.get("role")
    if role == "tool":
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or "")}
        blocks = _content_blocks(message.get("content"))
        result["content"] = blocks or "(no output)"
        if message.get("is_error"):
            result["is_error"] = True
        return "user", [result]
    blocks = _content_blocks(message.get("content"))
    if role == "assistant":
        blocks.extend(_tool_use_block(c) for c in message.get("tool_calls") or () if isinstance(c, Mapping))
        return "assistant", blocks
    return ("system" if role == "system" else "user"), blocks


def to_anthropic_messages(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Split internal messages into (system blocks, Anthropic messages).

    Every system message, wherever it sits, is merged into the top-level system blocks in order. A
    message-level ``cache_control`` (set on empty-content or tool messages) moves to its last block.
    """
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role, blocks = _convert(message)
        if not blocks:
            continue
        if "cache_control" in message:
            blocks[-1] = {**blocks[-1], "cache_control": message["cache_control"]}
        if role == "system":
            system.extend(blocks)
        elif out and out[-1]["role"] == role:
            out[-1] = {"role": role, "content": [*out[-1]["content"], *blocks]}
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def tools_to_anthropic(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI function tools → Anthropic tools (``input_schema``); Anthropic-shaped tools pass through."""
    converted: list[dict[str, Any]] = []
    for tool in tools:
        if "input_schema" in tool:
            converted.append(dict(tool))
            continue
        fn = tool.get("function") or tool
        entry: dict[str, Any] = {
            "name": fn.get("name"),
            "input_schema": fn.get("parameters") or {"type": "object", "properties": {}},
        }
        if fn.get("description"):
            entry["description"] = fn["description"]
        converted.append(entry)
    return converted


def blocks_to_message(blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """An internal assistant message from Anthropic reply blocks (text joined, tool_use → tool_calls)."""
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": str(b.get("id") or ""),
            "type": "function",
            "function": {"name": str(b.get("name") or ""),
                         "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False)},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message
