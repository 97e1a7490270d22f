"""When a compaction runs ahead of need (issue 25): the soft mark, and the turns kept between compactions.

The threshold (`agent.compression.threshold.compute_threshold_tokens`) is where a turn compacts before it
answers, and its user waits for the summary call. A compaction ahead of need runs after an answer was sent,
while nobody waits, once the conversation passed the **soft mark**: `SOFT_MARK_SHARE` of the threshold.

Why 85%: the soft mark must be low enough that the turns arriving while that compaction runs (its summary call
takes seconds on a hosted model, 20–35 s on a small local one) still fit the window as it stands — they are
answered from it — and high enough that compacting earlier does not make compactions much more frequent (each
frees the room between its result and the next soft mark). A compaction plans its result at most
`POST_COMPACTION_SHARE` (60%) of the threshold; from 85% the turns arriving meanwhile have the rest of the
threshold and the window's room above it: at 8,192 tokens, ~1,500 tokens (about ten chat turns of the LoCoMo
replay, or one 1,500-token answer) before a request would no longer fit; at 32K, ~6,000.

No compaction ahead of need within `min_turns_between` turns of the last one: a compaction that freed too
little (or a conversation growing fast) must not buy a summary call after every answer. Only the threshold
itself — where the window demands a compaction — overrides it. The number follows the window through the
threshold: half the turns of a typical size (`TYPICAL_TURN_TOKENS`) that fit between a compaction's planned
result and the soft mark — 4 at 8K, 8 at 16K, 17 at 32K, 53 at 131K, capped at 64 from 200K.
"""

from __future__ import annotations

from agent.compression.escalation import POST_COMPACTION_SHARE

__all__ = ["SOFT_MARK_SHARE", "TYPICAL_TURN_TOKENS", "ahead_due", "min_turns_between", "soft_mark"]

SOFT_MARK_SHARE = 0.85
# A user's line and its answer, in tokens: the mean growth per turn of the LoCoMo conversation replayed
# through the gateway (`bench.windows`, 150 at 8K, 169 at 32K; median 105).
TYPICAL_TURN_TOKENS = 150
MIN_TURNS_BETWEEN = 2
MAX_TURNS_BETWEEN = 64


def soft_mark(threshold_tokens: int) -> int:
    """Request tokens from which a conversation is compacted ahead of need."""
    return max(1, int(threshold_tokens * SOFT_MARK_SHARE))


def min_turns_between(threshold_tokens: int) -> int:
    """Turns after a compaction before the next one may run ahead of need (see the module docstring)."""
    room = threshold_tokens * (SOFT_MARK_SHARE - POST_COMPACTION_SHARE)
    return max(MIN_TURNS_BETWEEN, min(MAX_TURNS_BETWEEN, int(room / (2 * TYPICAL_TURN_TOKENS))))


def ahead_due(tokens: int, threshold_tokens: int, turns_since: int | None) -> bool:
    """Whether a conversation of ``tokens`` (its next request, as stored) is due a compaction ahead of need,
    ``turns_since`` turns after its last compaction (None: it has none, or it is not known)."""
    if threshold_tokens <= 0 or tokens < soft_mark(threshold_tokens):
        return False
    if tokens >= threshold_tokens:
        return True  # the next turn would compact before answering: the window demands it
    return turns_since is None or turns_since >= min_turns_between(threshold_tokens)
