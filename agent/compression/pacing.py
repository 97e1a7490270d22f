"""When a compaction runs ahead of need: the soft mark, and the turns kept between compactions.

The threshold (`agent.compression.threshold.compute_threshold_tokens`) is where a turn compacts before it
answers, and its user waits for the summary call. A compaction ahead of need runs after an answer was sent,
while nobody waits, once the conversation passed its **soft mark**: `SOFT_MARK_TURNS` of its own turns below the
threshold — kept between `SOFT_MARK_MIN_SHARE` (75%) and `SOFT_MARK_MAX_SHARE` (95%) of the threshold.

Why so: the soft mark must leave room for the turns that arrive while the summary is written — a summary call
takes seconds on a hosted model, 20–35 s on a small local one: at a message every 10 s, up to three turns —
and every turn arriving meanwhile is answered from the context as it stands, so it must still fit. Measured in
the conversation's own turns, a chat of short lines compacts close to the threshold and one of long pastes or
tool outputs earlier — and either as rarely as at the threshold: a compaction ahead of need keeps the tail the
threshold's would have kept (`agent.compression.plan`: its lead), so it frees the room the threshold's would.
The floor keeps room for a burst whatever the pace (at 8,192 tokens 75% of the threshold leaves ~2,000 tokens
before a request no longer fits), and the ceiling a margin above the last turn.

No compaction ahead of need within `min_turns_between` turns of the last one: one that freed too little (or a
conversation growing fast) must not buy a summary call after every answer. Only the threshold itself — where the
window demands a compaction — overrides it. The number follows the window through the threshold: the turns of a
typical size (`TYPICAL_TURN_TOKENS`) that fit between a compaction's planned result (`POST_COMPACTION_SHARE`,
60%) and the soft mark's floor — 5 at 8K, 10 at 16K, 20 at 32K, 64 from 131K.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.compression.escalation import POST_COMPACTION_SHARE

__all__ = ["SOFT_MARK_MIN_SHARE", "SOFT_MARK_TURNS", "TYPICAL_TURN_TOKENS", "ahead_due", "min_turns_between",
           "soft_mark", "turn_tokens"]

SOFT_MARK_TURNS = 3
SOFT_MARK_MIN_SHARE = 0.75
SOFT_MARK_MAX_SHARE = 0.95
# A user's line and its answer, in tokens: the mean growth per turn of the LoCoMo conversation replayed
# through the gateway (`bench.windows`: 150 at 8K, 169 at 32K; median 105). The pace of a conversation that
# has no turns of its own to measure yet.
TYPICAL_TURN_TOKENS = 150
MIN_TURNS_BETWEEN = 2
MAX_TURNS_BETWEEN = 64


def turn_tokens(counts: Sequence[int], turns: int) -> int:
    """A conversation's pace: the tokens of ``counts`` (the messages of its last ``turns`` turns) per turn."""
    return max(1, sum(counts) // turns) if turns > 0 else TYPICAL_TURN_TOKENS


def soft_mark(threshold_tokens: int, pace: int = TYPICAL_TURN_TOKENS) -> int:
    """Request tokens from which a conversation growing ``pace`` tokens a turn is compacted ahead of need."""
    mark = threshold_tokens - SOFT_MARK_TURNS * pace
    return max(1, int(min(max(mark, threshold_tokens * SOFT_MARK_MIN_SHARE), threshold_tokens * SOFT_MARK_MAX_SHARE)))


def min_turns_between(threshold_tokens: int) -> int:
    """Turns after a compaction before the next one may run ahead of need (see the module docstring)."""
    room = threshold_tokens * (SOFT_MARK_MIN_SHARE - POST_COMPACTION_SHARE)
    return max(MIN_TURNS_BETWEEN, min(MAX_TURNS_BETWEEN, int(room / TYPICAL_TURN_TOKENS)))


def ahead_due(tokens: int, threshold_tokens: int, turns_since: int | None, pace: int = TYPICAL_TURN_TOKENS) -> bool:
    """Whether a conversation of ``tokens`` (its next request, as stored), growing ``pace`` tokens a turn, is due a
    compaction ahead of need ``turns_since`` turns after its last one (None: it has none, or it is not known)."""
    if threshold_tokens <= 0 or tokens < soft_mark(threshold_tokens, pace):
        return False
    if tokens >= threshold_tokens:
        return True  # the next turn would compact before answering: the window demands it
    return turns_since is None or turns_since >= min_turns_between(threshold_tokens)
