"""Summaries written again without a model, from what they covered (a deleted message must leave the summary
that paraphrased it, and no model is asked to forget).

`rebuilt_summary` is what a compaction of those messages writes when its summary model fails (the static summary
and the evidence ledger, R-C8), with the original coverage line; `withdrawn_summary` keeps only the coverage line
and a note, for a summary no longer in view.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from agent.compression.fallback import build_static_summary
from agent.compression.ledger import build_ledger, coverage_line, ledger_cap, with_ledger
from agent.compression.messages import Message
from agent.compression.summary import format_summary
from agent.compression.threshold import summary_budget
from agent.tokens import TokenCounter

__all__ = ["rebuilt_summary", "withdrawn_summary"]


def rebuilt_summary(middle: Sequence[Message], numbers: Sequence[int], *, coverage: tuple[int, int], note: str,
                    context_length: int, threshold_tokens: int, counter: TokenCounter, today: datetime.date) -> str:
    """The handoff text of a static summary of ``middle`` (``numbers[i]`` numbering ``middle[i]``) with its
    evidence ledger, bounded as a compaction's for a ``context_length`` window compressed at
    ``threshold_tokens``, saying it covers ``coverage`` and, first thing after that, ``note``."""
    budget = summary_budget(counter.count_messages(middle), context_length, threshold_tokens)
    ledger = build_ledger(middle, numbers, previous_summary=None, cap_tokens=ledger_cap(budget),
                          cost=counter.count_text)
    body = f"{note}\n\n{build_static_summary(middle, today=today)}"
    return format_summary(with_ledger(body, ledger.facts, coverage))


def withdrawn_summary(coverage: tuple[int, int] | None, note: str) -> str:
    """The handoff text of a summary whose content was withdrawn: its coverage line, if any, and ``note``."""
    body = f"{coverage_line(*coverage)}\n\n{note}" if coverage is not None else note
    return format_summary(body)
