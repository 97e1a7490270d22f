"""What an erased message leaves behind, and how its text is found where it was quoted (`gateway.conversation.erasure`).

A stored message that held the erased message becomes a tombstone: who wrote it, when, and that it is gone — a
handoff summary a compaction merged in front of it stays. Elsewhere the text is cut out wherever it was quoted:
the sender's whole text, each of its lines, and each of its distinctive tokens (`fragments`), replaced by
``[deleted]`` in every string of a message (its text, its parts, a tool call's arguments, a tool's output).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from agent.compression.messages import content_text
from agent.compression.summary import SUMMARY_END_MARKER, is_summary_text

__all__ = ["CUT", "MIN_QUOTE_CHARS", "cut", "fragments", "is_tombstone", "quotes", "scrubbed", "split_summary", "stamp", "tombstoned",
           "with_summary"]

CUT = "[deleted]"
# A quote shorter than this is not looked for outside the message itself: "ok" or "thanks" would be cut out of
# everyone's messages.
MIN_QUOTE_CHARS = 8
# A token that is more than a word: it holds a digit (a key, a code, an id, a number) or is a URL or an address.
_DISTINCTIVE = re.compile(r"\d|://|@")
_TOKEN_EDGES = ".,;:!?()[]{}<>\"'`*"

Message = dict[str, Any]


def fragments(texts: Iterable[str]) -> list[str]:
    """What to look for where ``texts`` may have been quoted, longest first: each text, each of its lines and
    each distinctive token of at least `MIN_QUOTE_CHARS` characters."""
    found: set[str] = set()
    for text in texts:
        candidates = [text.strip(), *(line.strip() for line in text.splitlines())]
        candidates += [token for raw in text.split() if _DISTINCTIVE.search(token := raw.strip(_TOKEN_EDGES))]
        found.update(c for c in candidates if len(c) >= MIN_QUOTE_CHARS)
    return sorted(found, key=lambda f: (-len(f), f))


def quotes(text: str, cuts: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``cuts``."""
    return any(cut in text for cut in cuts)


def cut(text: str, cuts: Sequence[str]) -> str:
    """``text`` with every quote of ``cuts`` replaced by `CUT`."""
    for fragment in cuts:  # longest first: a line goes whole before its tokens are looked for
        if fragment in text:
            text = text.replace(fragment, CUT)
    return text


def scrubbed(message: Mapping[str, Any], cuts: Sequence[str]) -> Message | None:
    """``message`` with every quote of ``cuts`` replaced by `CUT`, or None when it quotes none of them."""
    changed = False

    def clean(value: Any) -> Any:
        nonlocal changed
        if not isinstance(value, str) or not quotes(value, cuts):
            return value
        changed = True
        return cut(value, cuts)

    out = dict(message)
    content = message.get("content")
    if isinstance(content, list):
        out["content"] = [{**part, "text": clean(part.get("text"))} if isinstance(part, Mapping) else part
                          for part in content]
    else:
        out["content"] = clean(content)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": clean(call["function"].get("arguments"))}}
            if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping) else call
            for call in calls]
    return out if changed else None


def split_summary(text: str) -> tuple[str, str]:
    """(the handoff summary ``text`` starts with, or '' — and the rest of it)."""
    if not is_summary_text(text):
        return "", text
    end = text.find(SUMMARY_END_MARKER)
    if end < 0:
        return text, ""
    cut = end + len(SUMMARY_END_MARKER)
    return text[:cut], text[cut:].lstrip("\n")


def _leading_summary(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        first = next((p for p in content if isinstance(p, Mapping) and p.get("type") == "text"), None)
        return split_summary(str(first.get("text") or ""))[0] if first is not None else ""
    return split_summary(content_text(message))[0]


def tombstoned(message: Mapping[str, Any], tombstone: str) -> Message:
    """``message`` reduced to ``tombstone`` (its origin kept, marked erased, for later erasures; its images and
    every other part gone), after the handoff summary it starts with, if any."""
    summary = _leading_summary(message)
    out: Message = {"role": message.get("role", "user"), "content": f"{summary}\n\n{tombstone}" if summary else tombstone}
    origin = message.get("origin")
    if isinstance(origin, Mapping):
        out["origin"] = {**origin, "span": None, "erased": True}
    return out


def is_tombstone(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is what an erasure left of a message (`tombstoned`)."""
    origin = message.get("origin")
    return isinstance(origin, Mapping) and origin.get("erased") is True


def with_summary(message: Mapping[str, Any], summary: str) -> Message:
    """``message`` with the handoff summary it starts with replaced by ``summary``."""
    content = message.get("content")
    if isinstance(content, list):
        parts, done = [], False
        for part in content:
            if not done and isinstance(part, Mapping) and part.get("type") == "text":
                part, done = {**part, "text": _replace_leading(str(part.get("text") or ""), summary)}, True
            parts.append(part)
        return {**message, "content": parts}
    return {**message, "content": _replace_leading(content_text(message), summary)}


def _replace_leading(text: str, summary: str) -> str:
    _, rest = split_summary(text)
    return f"{summary}\n\n{rest}" if rest else summary


def stamp(at: datetime) -> str:
    """A time as tombstones and notes say it."""
    return at.strftime("%Y-%m-%d %H:%M UTC")

