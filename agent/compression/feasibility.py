"""R-C9: can the summary model read what the compressor will send it?

A middle larger than the summary model's window is summarized in parts (`agent.compression.parts`), one
paid call each. To keep that the exception, at start-up the threshold is lowered until a compaction's middle
fits one call, and a model so small that the threshold would have to fall below a quarter of its normal value
(or below 8,000 tokens) is refused outright with `SummaryModelTooSmall`.
"""

from __future__ import annotations

from agent.compression.threshold import summary_ceiling, summary_output_cap

__all__ = [
    "MIN_FEASIBLE_THRESHOLD",
    "SUMMARY_PROMPT_OVERHEAD",
    "SummaryModelTooSmall",
    "feasible_threshold",
    "summary_output_reserve",
]

# Instructions, template, previous summary framing: what the prompt costs besides the serialized middle.
SUMMARY_PROMPT_OVERHEAD = 2_000
MIN_FEASIBLE_THRESHOLD = 8_000
_MIN_KEPT_FRACTION = 0.25


class SummaryModelTooSmall(ValueError):
    """The summary model's context window is far too small for this main model; configure a bigger one."""


def summary_output_reserve(context_length: int, threshold_tokens: int) -> int:
    """Window space kept for the summary's output: the ``max_tokens`` of the longest summary ever asked for."""
    return summary_output_cap(summary_ceiling(context_length, threshold_tokens))


def feasible_threshold(threshold_tokens: int, context_length: int, summary_context_length: int | None) -> int:
    """The threshold this session can use with the summary model; raise `SummaryModelTooSmall` if none works.

    ``summary_context_length=None`` means unknown: the configured threshold stands.
    """
    if summary_context_length is None or summary_context_length >= context_length:
        return threshold_tokens
    usable = summary_context_length - SUMMARY_PROMPT_OVERHEAD - summary_output_reserve(context_length,
                                                                                        threshold_tokens)
    if usable >= threshold_tokens:
        return threshold_tokens
    floor = max(MIN_FEASIBLE_THRESHOLD, int(threshold_tokens * _MIN_KEPT_FRACTION))
    if usable < floor:
        raise SummaryModelTooSmall(
            f"the summary model's window ({summary_context_length:,} tokens) is far too small for a main model "
            f"of {context_length:,} tokens: it can read about {max(usable, 0):,} tokens of conversation, but "
            f"compression needs at least {floor:,}. Configure a summary model with a window of at least "
            f"{context_length:,} tokens."
        )
    return usable
