"""A middle larger than the summary model's window is summarized in parts, never cut (R-C3).

The middle is serialized newest first (only as far as `MAX_PARTS` prompts can hold it: at 20K messages most of
a middle is never serialized at all) and grouped, oldest first, into parts that each fit one summary prompt.
The compressor summarizes the parts one after the other, each updating the summary of the ones before it (the
prompt's PREVIOUS SUMMARY), so the last call's summary covers them all. Messages older than the parts can hold
are covered by the deterministic static summary, which seeds the first part: every message is summarized,
at most `MAX_PARTS` calls are paid for (and serialized: a middle of 20K messages costs the serialization of three
summary windows, not of all of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.compression.blocks import summary_block
from agent.compression.clip import clip_text_counted
from agent.compression.messages import Message
from agent.tokens import TokenCounter

__all__ = ["MAX_PARTS", "SummaryParts", "serialize_parts"]

MAX_PARTS = 3
# What a block's "\n\n" separator is budgeted at.
BLOCK_SEPARATOR_TOKENS = 2


@dataclass(frozen=True, slots=True)
class SummaryParts:
    """The serialized middle in parts (oldest first), each part's size in tokens, and how many of the oldest
    messages no part holds."""

    parts: tuple[str, ...]
    tokens: tuple[int, ...]
    older: int

    @property
    def count(self) -> int:
        """How many summary calls the parts take."""
        return len(self.parts)


def serialize_parts(messages: Sequence[Message], part_limit: int, counter: TokenCounter,
                    max_parts: int = MAX_PARTS) -> SummaryParts:
    """``messages`` serialized for the summary model in parts of at most ``part_limit`` tokens each."""
    part_limit = max(part_limit, 1)
    blocks: list[tuple[str, int]] = []
    used = 0
    for message in reversed(messages):
        block, tokens = summary_block(message, counter)
        cost = tokens + BLOCK_SEPARATOR_TOKENS
        if cost > part_limit:  # one message larger than a whole prompt: its head and tail, with a note
            clipped = clip_text_counted(block, part_limit - BLOCK_SEPARATOR_TOKENS, counter, tokens=tokens)
            if clipped is not None:
                block, cost = clipped[0], clipped[1] + BLOCK_SEPARATOR_TOKENS
        if blocks and used + cost > part_limit * max_parts:
            break
        blocks.append((block, cost))
        used += cost
    older = len(messages) - len(blocks)
    parts: list[list[str]] = []
    sizes: list[int] = []
    for block, cost in reversed(blocks):
        if not parts or sizes[-1] + cost > part_limit:
            parts.append([])
            sizes.append(0)
        parts[-1].append(block)
        sizes[-1] += cost
    # Greedy grouping can leave more parts than allowed when blocks are uneven: the oldest go statically.
    while len(parts) > max_parts:
        older += len(parts.pop(0))
        sizes.pop(0)
    return SummaryParts(tuple("\n\n".join(p) for p in parts), tuple(sizes), older)
