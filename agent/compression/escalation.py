"""Anti-thrashing by escalation (R-C6, as docs/rules.md states it): when compressing saved too little, the next
compression cuts harder instead of being switched off.

    level 0  the configured tail and summary
    level 1  half the tail (at least 2 messages), half the summary, old long messages clipped to fit the tail
    level 2  the tail is the live message alone (and what the model did since), half the summary
    level 3  the same with a quarter of the summary, written statically (no paid call)

A compression that saves less than 10%, or leaves the request above `STILL_FULL_SHARE` of the threshold,
raises the level of the next one; one that helps resets it to 0. The level is the persisted
``ineffective_count``: after a restart a conversation resumes at its level, never "off". A compaction also
starts at level 1 when the planned result would not leave room for new turns (`POST_COMPACTION_SHARE`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEVELS", "POST_COMPACTION_SHARE", "STILL_FULL_SHARE", "Escalation", "escalation"]

# After a compaction the request should take at most this share of the threshold: the rest is for new turns.
POST_COMPACTION_SHARE = 0.6
# A compaction leaving the request above this share of the threshold did not help (it would fire again at once).
STILL_FULL_SHARE = 0.9


@dataclass(frozen=True, slots=True)
class Escalation:
    """How hard one compaction cuts."""

    level: int
    tail_share: float  # of the tail budget
    min_tail: int | None  # messages the tail keeps at least (None: the configured minimum)
    summary_share: float  # of the summary budget
    static: bool = False  # the deterministic summary, no paid call
    keep_last_reply: bool = True  # the last visible reply before the live message stays verbatim


LEVELS = (
    Escalation(0, 1.0, None, 1.0),
    Escalation(1, 0.5, 2, 0.5),
    Escalation(2, 0.0, 1, 0.5, keep_last_reply=False),
    Escalation(3, 0.0, 1, 0.25, static=True, keep_last_reply=False),
)
# The highest level a plan may start at on its own: the last one that keeps both anchors of R-C2 (the live
# message and the last reply); the others are reached only through compressions that did not help.
PLANNED_MAX = 1


def escalation(level: int) -> Escalation:
    """The escalation of ``level`` (levels above the last stay at the last)."""
    return LEVELS[max(0, min(level, len(LEVELS) - 1))]
