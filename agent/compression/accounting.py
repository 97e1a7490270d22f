"""A compaction's bookkeeping as plain functions: the per-message token counts that go in and come out, the
evidence ledger of the middle, and whether the result helped (R-C6).

Each message is counted once per compaction: the input's counts (given or computed) serve planning and the
totals, the head and tail keep theirs by identity, and only what assembly created or changed is counted anew.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.assemble import AssemblyResult, assemble
from agent.compression.boundaries import Boundaries
from agent.compression.escalation import STILL_FULL_SHARE
from agent.compression.evidence import fact_tokens
from agent.compression.ledger import Ledger, build_ledger, ledger_cap
from agent.compression.summary import format_summary
from agent.tokens import TokenCounter

__all__ = ["INEFFECTIVE_SAVINGS", "assemble_counted", "helped", "input_counts", "kept_counts", "middle_ledger"]

INEFFECTIVE_SAVINGS = 0.10

Messages = list[dict[str, Any]]


def middle_ledger(original: Messages, bounds: Boundaries, budget: int, *, first_seq: int,
                  previous_summary: str | None, counter: TokenCounter) -> Ledger:
    """The evidence ledger of the middle, taken from the unpruned messages (pruning drops error lines)."""
    middle = original[bounds.head_end : bounds.tail_start]
    offset = 1 if original and original[0].get("role") == "system" else 0
    numbers = [first_seq + i - offset for i in range(bounds.head_end, bounds.tail_start)]
    return build_ledger(middle, numbers, previous_summary=previous_summary, cap_tokens=ledger_cap(budget),
                        cost=counter.count_text, text_cost=lambda text: fact_tokens(text, counter))


def input_counts(messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int] | None,
                 counter: TokenCounter) -> list[int]:
    """One exact count per message: ``token_counts`` when the caller holds them (checked), else counted."""
    if token_counts is None:
        return counter.count_each(messages)
    if len(token_counts) != len(messages):
        raise ValueError(f"{len(messages)} messages but {len(token_counts)} token counts")
    return [int(c) for c in token_counts]


def kept_counts(work: Messages, counts: Sequence[int], bounds: Boundaries) -> dict[int, int]:
    """Counts of the head and tail messages by identity, for those assembly keeps as they are (identity is
    safe: every one of them stays alive in ``work`` while the map is used)."""
    head = zip(work[: bounds.head_end], counts[: bounds.head_end], strict=True)
    tail = zip(work[bounds.tail_start :], counts[bounds.tail_start :], strict=True)
    return {id(m): c for m, c in (*head, *tail)}


def helped(before: int, after: int, overhead: int, threshold_tokens: int) -> bool:
    """Whether a compression helped: it saved 10% (R-C6) and left room below the threshold for new turns."""
    saved = 1.0 - after / before if before > 0 else 0.0
    return saved >= INEFFECTIVE_SAVINGS and after + overhead < threshold_tokens * STILL_FULL_SHARE


def assemble_counted(work: Messages, kept: Mapping[int, int], bounds: Boundaries, body: str,
                     counter: TokenCounter) -> tuple[AssemblyResult, list[int]]:
    """The assembled list and its per-message counts: only what assembly created or changed is counted."""
    assembled = assemble(work[: bounds.head_end], format_summary(body), work[bounds.tail_start :])
    counts = [kept.get(id(m)) for m in assembled.messages]
    return assembled, [counter.count_message(m) if c is None else c
                       for m, c in zip(assembled.messages, counts, strict=True)]
