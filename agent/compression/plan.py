"""Where one compaction cuts, planned before anything is paid for: clip, prune, boundaries, summary budget.

A plan is made at the conversation's escalation level (`agent.compression.escalation`), and at the next
levels while its predicted result — head, tail, the summary at its budget, the evidence ledger at its cap,
the handoff's frame and the tool schemas every request carries — would leave less than
`POST_COMPACTION_SHARE` of the threshold free for new turns: at 4,096 tokens the configured tail alone can
be a fifth of the threshold, and a compaction that frees room for one turn is paid for again at the next.

The live message (the last user message) is clipped only when it cannot fit the window beside the system
prompt, the tool schemas, the room the summary may take and the output reserve; other messages are clipped
as before, at the share of the threshold that lets the tail's minimum of messages fit.

A compaction ahead of need starts below the threshold, by its **lead** (the tokens the request has left below
it). Cut with the threshold's tail budget, it would summarize that much less and leave the same result, and
the next compaction would come the lead's worth of turns sooner — more compactions, each a paid summary call
and a rewritten prompt cache. So its tail keeps the lead less (down to the tail's minimum of messages) and its
result must leave the lead more room: it keeps what the threshold's compaction would have kept of the
messages there are now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.boundaries import (
    SOFT_CEILING_FACTOR,
    Boundaries,
    find_boundaries,
    head_size,
    min_tail_count,
)
from agent.compression.clip import ClipResult, clip_limit, clip_oversized
from agent.compression.escalation import PLANNED_MAX, POST_COMPACTION_SHARE, Escalation, escalation
from agent.compression.ledger import ledger_cap
from agent.compression.messages import last_index
from agent.compression.prune import PruneResult, find_prune_boundary, prune_messages
from agent.compression.threshold import (
    MIN_SUMMARY_TOKENS,
    summary_budget,
    summary_ceiling,
    summary_output_cap,
    window_margin,
)
from agent.tokens import TokenCounter

__all__ = ["CompactionPlan", "PlanSettings", "live_limit", "make_plan", "select_plan"]

MIN_GUARD_MESSAGES = 4


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """The figures a plan is made with (the compressor's, for its current window)."""

    context_length: int
    threshold_tokens: int
    tail_budget: int
    protect_first_n: int
    protect_last_n: int
    output_reserve: int
    # Tokens every request carries besides its messages (the tool schemas), as the agent last said.
    overhead: int
    # The handoff message's own text (prefix and end marker), in tokens.
    summary_frame: int
    # Tokens the request has left below the threshold when it is compacted ahead of need (0: at the threshold).
    lead: int = 0


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """One planned compaction. ``pruned`` is None when the guard (R-C0) applies; ``bounds`` None when there is
    no middle to summarize. ``counts`` are those of ``clip.messages``, ``work_counts`` those of the pruned."""

    escalation: Escalation
    clip: ClipResult
    counts: list[int]
    pruned: PruneResult | None
    bounds: Boundaries | None
    work_counts: list[int]
    summary_budget: int = 0

    @property
    def middle_tokens(self) -> int:
        """Tokens of what the summary replaces."""
        return 0 if self.bounds is None else sum(self.work_counts[self.bounds.head_end:self.bounds.tail_start])

    def predicted_request(self, settings: PlanSettings) -> int:
        """The request after this compaction, at most: kept messages, summary, ledger, frame, tool schemas."""
        if self.bounds is None:
            return sum(self.counts) + settings.overhead
        kept = sum(self.work_counts[: self.bounds.head_end]) + sum(self.work_counts[self.bounds.tail_start:])
        return (kept + self.summary_budget + ledger_cap(self.summary_budget) + settings.summary_frame
                + settings.overhead)


def live_limit(settings: PlanSettings, system_tokens: int) -> int:
    """The largest the live message may stay: the window less the output reserve, the system prompt, the tool
    schemas, the most a summary and its ledger may take, and the safety margin."""
    ceiling = summary_ceiling(settings.context_length, settings.threshold_tokens)
    room = (settings.context_length - settings.output_reserve - window_margin(settings.context_length)
            - system_tokens - settings.overhead - summary_output_cap(ceiling) - ledger_cap(ceiling)
            - settings.summary_frame)
    return max(room, clip_limit(settings.threshold_tokens))


def _clip(messages: Sequence[Mapping[str, Any]], counts: Sequence[int], settings: PlanSettings,
          esc: Escalation, counter: TokenCounter) -> ClipResult:
    tail = esc.min_tail or min_tail_count(len(messages), 0, settings.protect_last_n)
    system = counts[0] if messages and messages[0].get("role") == "system" else 0
    return clip_oversized(messages, clip_limit(settings.threshold_tokens, tail), counter, counts,
                          live=last_index(messages, "user"), live_limit=live_limit(settings, system))


def _recounted(before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]], counts: Sequence[int],
               counter: TokenCounter) -> list[int]:
    """Counts of ``after`` (a copy of ``before`` with some messages replaced): recounted only where replaced."""
    return [c if a is b or (a.get("content") is b.get("content") and a.get("tool_calls") is b.get("tool_calls"))
            else counter.count_message(a) for a, b, c in zip(after, before, counts, strict=True)]


def make_plan(messages: Sequence[Mapping[str, Any]], counts: Sequence[int], settings: PlanSettings,
              esc: Escalation, *, decayed: bool, counter: TokenCounter) -> CompactionPlan:
    """The plan at escalation ``esc``; ``decayed``: the protected head has decayed (R-C2)."""
    clip = _clip(messages, counts, settings, esc, counter)
    clipped = _recounted(messages, clip.messages, counts, counter) if clip.clipped else list(counts)
    head = head_size(clip.messages, settings.protect_first_n, decayed)
    if len(clip.messages) <= head + MIN_GUARD_MESSAGES:
        return CompactionPlan(esc, clip, clipped, None, None, [])
    # The tail walk fills up to SOFT_CEILING_FACTOR × its budget: the lead comes off what it keeps.
    tail_budget = max(0, int(settings.tail_budget * esc.tail_share - settings.lead / SOFT_CEILING_FACTOR))
    min_tail = esc.min_tail or min_tail_count(len(clip.messages), head, settings.protect_last_n)
    protect_from = find_prune_boundary(clip.messages, tail_budget, min_tail, counter, clipped)
    # What the model did since the live message (its tool results) is never pruned, however small the tail.
    live = last_index(clip.messages, "user")
    pruned = prune_messages(clip.messages, protect_from if live < 0 else min(protect_from, live))
    work_counts = _recounted(clip.messages, pruned.messages, clipped, counter)
    bounds = find_boundaries(pruned.messages, protect_first_n=settings.protect_first_n, decayed=decayed,
                             protect_last_n=settings.protect_last_n, tail_budget=tail_budget, counter=counter,
                             counts=work_counts, min_tail=esc.min_tail, keep_last_reply=esc.keep_last_reply)
    if bounds.empty:
        return CompactionPlan(esc, clip, clipped, pruned, None, work_counts)
    middle = sum(work_counts[bounds.head_end:bounds.tail_start])
    budget = summary_budget(middle, settings.context_length, settings.threshold_tokens)
    budget = max(min(MIN_SUMMARY_TOKENS, budget), int(budget * esc.summary_share))
    return CompactionPlan(esc, clip, clipped, pruned, bounds, work_counts, budget)


def select_plan(messages: Sequence[Mapping[str, Any]], counts: Sequence[int], settings: PlanSettings, level: int,
                *, decayed: bool, counter: TokenCounter) -> CompactionPlan:
    """The plan at ``level``, or at a higher one (up to the last paid level) when its result would leave too
    little of the threshold for new turns (the lead more, ahead of need)."""
    plan = make_plan(messages, counts, settings, escalation(level), decayed=decayed, counter=counter)
    target = settings.threshold_tokens * POST_COMPACTION_SHARE - settings.lead
    while (plan.bounds is not None and plan.escalation.level < PLANNED_MAX
           and plan.predicted_request(settings) > target):
        plan = make_plan(messages, counts, settings, escalation(plan.escalation.level + 1), decayed=decayed,
                         counter=counter)
    return plan
