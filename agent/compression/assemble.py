"""Stage 4: head + summary + tail, then the repair passes that keep the list valid for any provider (R-C5).

The system prompt in the head is kept byte for byte: it is the prompt cache's stable prefix, so what the model
must know about the compaction travels in the summary message (its prefix, R-C4, and its coverage line).

Order matters and is fixed here:
  1. tool pairs are sanitized in head and tail (a result whose call was summarized away is dropped; a call
     whose result is gone gets a stub), and unparsable call arguments become a JSON stub — before the
     summary's role is chosen, because dropping a result can change the summary's neighbour;
  2. the summary role is chosen against its real neighbours, or the summary is merged into the first tail
     message when both roles clash;
  3. historical media is stripped (images before the newest user image become text placeholders).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.messages import (
    Message,
    has_image,
    is_image_part,
    parse_arguments,
    tool_call_ids,
)

__all__ = [
    "MEDIA_PLACEHOLDER",
    "STUB_RESULT",
    "AssemblyResult",
    "assemble",
    "choose_summary_role",
    "repair_arguments",
    "sanitize_tool_pairs",
    "strip_historical_media",
]

STUB_RESULT = "[Result from earlier conversation — see summary]"
MEDIA_PLACEHOLDER = "[image from an earlier turn removed]"
_ALTERNATING = ("user", "assistant")


@dataclass(frozen=True, slots=True)
class AssemblyResult:
    """The assembled list and what the repair passes did. ``summary_role`` is user, assistant or merged."""

    messages: list[dict[str, Any]]
    summary_role: str
    dropped_results: int = 0
    stubbed_results: int = 0
    repaired_arguments: int = 0
    media_stripped: int = 0


def repair_arguments(message: Message) -> dict[str, Any] | None:
    """A copy with every unparsable ``arguments`` replaced by a JSON stub; None when all of them parse."""
    calls = message.get("tool_calls")
    if not calls:
        return None
    fixed: list[Any] = []
    changed = False
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            try:
                parse_arguments(fn.get("arguments"))
            except ValueError:
                raw = fn.get("arguments")
                preview = raw[:300] if isinstance(raw, str) else ""
                stub = json.dumps({"_unparsable_arguments": preview}, ensure_ascii=False)
                call = {**call, "function": {**fn, "arguments": stub}}
                changed = True
        fixed.append(call)
    return {**message, "tool_calls": fixed} if changed else None


def sanitize_tool_pairs(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], int, int, int]:
    """Make every tool result directly follow its call and give every call a result.

    Returns (messages, dropped results, stubbed results, repaired arguments). A result is kept only inside
    the run of tool messages right after the assistant message that made the call (what providers require).
    """
    out: list[dict[str, Any]] = []
    dropped = stubbed = repaired = 0
    i, n = 0, len(messages)
    while i < n:
        message = messages[i]
        i += 1
        if message.get("role") == "tool":
            dropped += 1
            continue
        fixed = repair_arguments(message)
        if fixed is not None:
            repaired += 1
        out.append(fixed if fixed is not None else dict(message) if not isinstance(message, dict) else message)
        ids = list(dict.fromkeys(tool_call_ids(message)))
        if not ids:
            continue
        answered: set[str] = set()
        while i < n and messages[i].get("role") == "tool":
            result = messages[i]
            call_id = str(result.get("tool_call_id"))
            if call_id in ids and call_id not in answered:
                answered.add(call_id)
                out.append(result if isinstance(result, dict) else dict(result))
            else:
                dropped += 1
            i += 1
        for call_id in ids:
            if call_id not in answered:
                out.append({"role": "tool", "tool_call_id": call_id, "content": STUB_RESULT})
                stubbed += 1
    return out, dropped, stubbed, repaired


def choose_summary_role(previous: str | None, following: str | None) -> str | None:
    """user or assistant so the summary repeats neither neighbour's role; None when both would clash."""
    preferred = ("assistant", "user") if previous == "user" else ("user", "assistant")
    for role in preferred:
        if role != previous and role != following:
            return role
    return None


def _merge(summary: str, message: Message) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [{"type": "text", "text": summary}, *content]}
    text = content if isinstance(content, str) else ""
    return {**message, "content": f"{summary}\n\n{text}" if text else summary}


def strip_historical_media(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], int]:
    """Replace image parts that precede the newest user message with an image by text placeholders."""
    out = [m if isinstance(m, dict) else dict(m) for m in messages]
    newest = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user" and has_image(out[i])), -1)
    stripped = 0
    for i in range(max(newest, 0)):
        if has_image(out[i]):
            parts = out[i]["content"]
            out[i] = {**out[i], "content": [{"type": "text", "text": MEDIA_PLACEHOLDER} if is_image_part(p) else p for p in parts]}
            stripped += 1
    return out, stripped


def assemble(head: Sequence[Message], summary_text: str, tail: Sequence[Message]) -> AssemblyResult:
    """Build the compressed list from the kept head (its system prompt unchanged), the summary text and the
    verbatim tail."""
    head_ok, d1, s1, r1 = sanitize_tool_pairs(head)
    tail_ok, d2, s2, r2 = sanitize_tool_pairs(tail)
    previous = head_ok[-1].get("role") if head_ok else None
    following = tail_ok[0].get("role") if tail_ok else None
    role = choose_summary_role(
        previous if previous in _ALTERNATING else None, following if following in _ALTERNATING else None
    )
    if role is None:
        body = [*head_ok, _merge(summary_text, tail_ok[0]), *tail_ok[1:]]
        role = "merged"
    else:
        body = [*head_ok, {"role": role, "content": summary_text}, *tail_ok]
    final, media = strip_historical_media(body)
    return AssemblyResult(final, role, d1 + d2, s1 + s2, r1 + r2, media)
