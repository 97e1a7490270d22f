"""Stage 0: clipping single messages too large for the window, no LLM (runs before the guard, R-C0).

One message can be larger than any compression can help with: a pasted 445K-token diff in a 200K window, or
a 3,600-token answer of a local 4K model. Sitting in the verbatim tail (it is the last user or assistant
message), it would be kept by every compression and wedge the session. Such a message keeps its head and its
tail for the model, with a marker between them saying how much was cut and that the whole text is stored.
The gateway archives the unclipped original with the compaction, so nothing is lost; the history search tool
finds its exact text. A clipped message fits the limit, so clipping never repeats on it. The live message (the
one being answered) is clipped only when it cannot fit the window beside everything else a request carries
(`agent.compression.plan.live_limit`): a 38K-token paste reaches a 200K model whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.lru import LruCache
from agent.tokens import TokenCounter, text_key

__all__ = ["CLIP_THRESHOLD_SHARE", "TAIL_THRESHOLD_SHARE", "ClipResult", "clear_clip_cache", "clip_limit", "clip_marker",
           "clip_oversized", "clip_text", "clip_text_counted"]

# A message may hold this share of the compression threshold; the rest is for everything else in the request.
CLIP_THRESHOLD_SHARE = 0.30
# ...and the verbatim tail's minimum of messages must fit in this share of it together (small windows: a 4K
# model's tail of 8 messages of 1,000 tokens each could never fit, and every compression would be in vain).
TAIL_THRESHOLD_SHARE = 0.75
_MIN_CLIP_TOKENS = 64
_HEAD_SHARE = 2 / 3
# Characters per token vary; a few tries shrink the kept part until it really fits.
_MAX_TRIES = 4
# What clipping made of a text, as the characters of its head and tail kept, the clipped text's count (a head of
# -1: only the note) and the text's own count, by (encoding, `text_key` of the text, limit, its count where the
# caller gave it, marker). A message too large for the window is clipped again by every compaction that reads it,
# and tokenizing it and each try was a sixth of a warm compaction of the coding-agent transcripts; the clipped text
# is rebuilt from these numbers, so an entry pins neither text in memory.
CLIP_CACHE_ENTRIES = 10_000
_CLIPS: LruCache[tuple[Any, ...], tuple[int, int, int, int]] = LruCache(CLIP_CACHE_ENTRIES)

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ClipResult:
    """The messages with every oversized text clipped, and how many messages were."""

    messages: list[Message]
    clipped: int


def clip_limit(threshold_tokens: int, tail_messages: int = 1) -> int:
    """Largest size in tokens one message may keep for the model, when the tail keeps at least
    ``tail_messages`` messages verbatim."""
    share = min(threshold_tokens * CLIP_THRESHOLD_SHARE, threshold_tokens * TAIL_THRESHOLD_SHARE / max(tail_messages, 1))
    return max(_MIN_CLIP_TOKENS, int(share))


def clip_marker(cut_chars: int, cut_tokens: int) -> str:
    """The note that replaces the middle of a clipped text."""
    return (f"\n\n[… {cut_chars:,} characters (about {cut_tokens:,} tokens) of this message were cut here to fit "
            "the model's window. The whole message is stored; search the conversation history to read the part "
            "that was cut …]\n\n")


def clip_text(text: str, limit: int, counter: TokenCounter,
              marker: Callable[[int, int], str] = clip_marker) -> str | None:
    """``text`` clipped to about ``limit`` tokens (head and tail kept), or None when it already fits;
    ``marker(cut_chars, cut_tokens)`` says what was cut (by default: a stored message's middle)."""
    clipped = clip_text_counted(text, limit, counter, marker)
    return None if clipped is None else clipped[0]


def clip_text_counted(text: str, limit: int, counter: TokenCounter, marker: Callable[[int, int], str] = clip_marker,
                      *, tokens: int | None = None) -> tuple[str, int] | None:
    """`clip_text`, with the clipped text's token count (each try is counted to see that it fits, so the
    count comes free). ``tokens``: the count of ``text``, when the caller holds it (a message's count less its
    framing) — a long text is then never tokenized whole. A text clipped before to the same limit is not tokenized
    again: what the clipping kept is remembered (`CLIP_CACHE_ENTRIES`)."""
    if tokens is not None and tokens <= limit:
        return None
    key = (counter.encoding_name, text_key(text), limit, tokens, marker)
    shape = _CLIPS.get(key)
    if shape is None:
        if tokens is None:
            tokens = counter.count_text(text)
        if tokens <= limit:
            return None  # (only what clipping made is remembered)
        shape = (*_clip_shape(text, limit, tokens, counter, marker), tokens)
        _CLIPS.put(key, shape)
    head, tail, size, tokens = shape
    if head < 0:
        return marker(len(text), tokens).strip(), size
    return text[:head] + marker(len(text) - head - tail, max(tokens - limit, 1)) + (text[-tail:] if tail else ""), size


def _clip_shape(text: str, limit: int, tokens: int, counter: TokenCounter,
                marker: Callable[[int, int], str]) -> tuple[int, int, int]:
    """How ``text`` (``tokens`` long, over ``limit``) is clipped: the characters of its head and tail kept and the
    clipped text's count; a head of -1 when no head and tail fit beside the note, which then stands alone."""
    chars_per_token = len(text) / tokens
    keep = int(limit * chars_per_token * 0.9)
    for _ in range(_MAX_TRIES):
        head = int(keep * _HEAD_SHARE)
        tail = keep - head
        note = marker(len(text) - head - tail, max(tokens - limit, 1))
        size = counter.count_text(text[:head] + note + (text[-tail:] if tail else ""))
        if size <= limit:
            return head, tail, size
        keep = int(keep * 0.8)
    return -1, 0, counter.count_text(marker(len(text), tokens).strip())


def clear_clip_cache() -> None:
    """Forget what every clipping kept (what a restarted process knows)."""
    _CLIPS.clear()


def _clipped_content(content: Any, limit: int, counter: TokenCounter) -> Any | None:
    if not isinstance(content, list):
        return None
    changed = False
    parts: list[Any] = []
    for part in content:
        text = part.get("text") if isinstance(part, Mapping) and part.get("type") == "text" else None
        clipped = clip_text(text, limit, counter) if isinstance(text, str) else None
        if clipped is None:
            parts.append(part)
        else:
            parts.append({**part, "text": clipped})
            changed = True
    return parts if changed else None


def clip_oversized(messages: Sequence[Mapping[str, Any]], limit: int, counter: TokenCounter,
                   counts: Sequence[int] | None = None, *, live: int = -1, live_limit: int | None = None) -> ClipResult:
    """Every user, assistant or tool message over ``limit`` tokens clipped; system messages are left alone
    (the system prompt is the operator's). The live message (index ``live``, the one being answered) has a
    limit of its own, ``live_limit``: what the window leaves it beside everything a request must carry — it
    reaches the model whole whenever it fits there. ``counts`` (one per message, when the caller holds them)
    spare re-tokenizing. The input is never mutated."""
    out: list[Message] = []
    clipped = 0
    for i, message in enumerate(messages):
        copy = dict(message)
        if copy.get("role") == "system":
            out.append(copy)
            continue
        size = counts[i] if counts is not None else counter.count_message(copy)
        cap = live_limit if i == live and live_limit is not None else limit
        if size > cap:
            content = copy.get("content")
            if isinstance(content, str):
                # Without calls, its text is all its count holds besides the framing: neither the text nor the
                # clipped copy is tokenized again (the copy's count is remembered for the planning after it).
                plain = not copy.get("tool_calls")
                text = clip_text_counted(content, cap, counter, tokens=size - counter.framing(copy) if plain else None)
                if text is not None:
                    copy["content"] = text[0]
                    if plain:
                        counter.count_message_with_text(copy, text[1])
                    clipped += 1
            else:
                content = _clipped_content(content, cap, counter)
                if content is not None:
                    copy["content"] = content
                    clipped += 1
        out.append(copy)
    return ClipResult(out, clipped)
