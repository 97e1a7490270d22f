"""Stage 2: where the protected head ends and the verbatim tail starts (R-C2).

The head is the system prompt plus ``protect_first_n`` messages, decaying to the system prompt alone after
the first compression (otherwise the first turns are copied into every compaction forever). The tail is cut
by tokens from the end, then moved — only ever earlier — so that no assistant+tool-results group is split and
the live request (last user message) and the last visible reply stay verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.compression.messages import Message, last_index, tool_calls_of
from agent.tokens import TokenCounter

__all__ = [
    "SOFT_CEILING_FACTOR",
    "Boundaries",
    "align_backward",
    "align_forward",
    "anchor_indices",
    "find_boundaries",
    "find_tail_cut",
    "head_size",
    "min_tail_count",
    "protect_anchors",
    "walk_tail",
]

SOFT_CEILING_FACTOR = 1.5
_MIN_TAIL_FLOOR = 3
_MIN_TAIL_CAP = 8


@dataclass(frozen=True, slots=True)
class Boundaries:
    """``messages[:head_end]`` is kept, ``messages[head_end:tail_start]`` is summarized, the rest is kept."""

    head_end: int
    tail_start: int

    @property
    def empty(self) -> bool:
        """True when there is no middle to summarize."""
        return self.head_end >= self.tail_start


def anchor_indices(messages: Sequence[Message], keep_last_reply: bool = True) -> frozenset[int]:
    """Indices that must survive verbatim: the last user message (the live one) and, unless an escalated
    compression needs the room, the last assistant message with text."""
    found = (last_index(messages, "user"),
             last_index(messages, "assistant", visible_text=True) if keep_last_reply else -1)
    return frozenset(i for i in found if i >= 0)


def min_tail_count(n: int, head_end: int, protect_last_n: int) -> int:
    """Messages the tail keeps at least: max(3, min(protect_last_n, 8)), bounded by what follows the head.

    Bounded at 8 so a run of huge tool outputs at the end cannot force an oversized tail.
    """
    return max(0, min(max(_MIN_TAIL_FLOOR, min(protect_last_n, _MIN_TAIL_CAP)), n - head_end))


def head_size(messages: Sequence[Message], protect_first_n: int, decayed: bool) -> int:
    """Length of the protected head before alignment: (1 if a system prompt) + effective protect_first_n."""
    system = 1 if messages and messages[0].get("role") == "system" else 0
    return min(len(messages), system + (0 if decayed else max(0, protect_first_n)))


def align_forward(messages: Sequence[Message], start: int) -> int:
    """Move the head end past tool results so results never get separated from a call kept in the head."""
    while start < len(messages) and messages[start].get("role") == "tool":
        start += 1
    return start


def walk_tail(messages: Sequence[Message], head_end: int, ceiling: int, min_tail: int, counter: TokenCounter,
              counts: Sequence[int] | None = None) -> int:
    """Walk back from the end, taking messages while they fit ``ceiling`` tokens (but at least ``min_tail``),
    never into the head; return the first index taken. ``counts`` (one per message), when the caller has
    them, replace counting."""
    n = len(messages)
    accumulated = 0
    cut = n
    for i in range(n - 1, head_end - 1, -1):
        tokens = counts[i] if counts is not None else counter.count_message(messages[i])
        if n - cut >= min_tail and accumulated + tokens > ceiling:
            break
        accumulated += tokens
        cut = i
    return cut


def find_tail_cut(
    messages: Sequence[Message], head_end: int, tail_budget: int, min_tail: int, counter: TokenCounter,
    counts: Sequence[int] | None = None,
) -> int:
    """Token-budget tail cut: fill up to 1.5× the budget (never cutting a big message in half too eagerly).

    If everything after the head fits under the soft ceiling, walk again with the plain budget so that a
    transcript just over the threshold still has a middle to compress.
    """
    cut = walk_tail(messages, head_end, int(tail_budget * SOFT_CEILING_FACTOR), min_tail, counter, counts)
    if cut <= head_end:
        cut = walk_tail(messages, head_end, tail_budget, min_tail, counter, counts)
    return cut


def align_backward(messages: Sequence[Message], cut: int, head_end: int) -> int:
    """Move a cut that lands inside tool results before their parent assistant message."""
    if cut >= len(messages):
        return cut
    i = cut
    while i > head_end and messages[i].get("role") == "tool":
        i -= 1
    if i == cut:
        return cut
    return i if tool_calls_of(messages[i]) else i + 1


def protect_anchors(messages: Sequence[Message], cut: int, head_end: int, keep_last_reply: bool = True) -> int:
    """Move the cut earlier so the last user message and last assistant text are in the tail."""
    for index in anchor_indices(messages, keep_last_reply):
        if head_end <= index < cut:
            cut = index
    return cut


def find_boundaries(
    messages: Sequence[Message],
    *,
    protect_first_n: int,
    decayed: bool,
    protect_last_n: int,
    tail_budget: int,
    counter: TokenCounter,
    counts: Sequence[int] | None = None,
    min_tail: int | None = None,
    keep_last_reply: bool = True,
) -> Boundaries:
    """Head end and tail start for ``messages``; ``Boundaries.empty`` means there is nothing to compress.

    ``counts`` are the messages' token counts when the caller already has them. ``min_tail`` and
    ``keep_last_reply`` are an escalated compression's (`agent.compression.escalation`): fewer messages kept
    at least, and the reply before the live message no longer protected."""
    head_end = align_forward(messages, head_size(messages, protect_first_n, decayed))
    floor = min_tail_count(len(messages), head_end, protect_last_n) if min_tail is None else \
        max(0, min(min_tail, len(messages) - head_end))
    cut = find_tail_cut(messages, head_end, tail_budget, floor, counter, counts)
    cut = align_backward(messages, cut, head_end)
    cut = protect_anchors(messages, cut, head_end, keep_last_reply)
    return Boundaries(head_end, max(cut, head_end))
