"""Trigger thresholds and budgets (R-T4, R-T5, R-T6). Pure arithmetic, no I/O.

Every budget derives from the window the model is really served and the threshold computed from it, so that
a compaction at 4,096 tokens frees as much room, relatively, as one at 200,000: the output reserve (a quarter
of the window, at most 8,192), the threshold (85% of what the reserve leaves below 64K windows), the verbatim
tail (``target_ratio`` of the threshold), the summary (20% of what it replaces, between a floor of 10% of the
threshold — at most 2,000 — and 5% of the window — at most 12,000 —, and never more than 40% of what it
replaces), the summary call's ``max_tokens`` (the summary's target and a quarter more), the tool schemas and
the pinned rules (a tenth of the window each).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AUTORAISE_PERCENT",
    "DEFAULT_AUTORAISE_ROUTES",
    "MIN_THRESHOLD_TOKENS",
    "autoraised_threshold_percent",
    "compute_threshold_tokens",
    "max_summary_tokens",
    "output_reserve",
    "pin_budget",
    "request_room",
    "summary_budget",
    "summary_ceiling",
    "summary_floor",
    "summary_output_cap",
    "tail_token_budget",
    "tool_schema_budget",
    "window_margin",
]

# Below this a big model would compress at 50% of a huge window far too early.
MIN_THRESHOLD_TOKENS = 64_000
_SMALL_WINDOW_PERCENT = 0.85
SUMMARY_CEILING_TOKENS = 12_000
SUMMARY_FLOOR_TOKENS = 2_000
SUMMARY_WINDOW_SHARE = 0.05
SUMMARY_CONTENT_SHARE = 0.20
# The floor is at most this share of the threshold: 2,000 tokens are 38% of an 8K model's threshold.
SUMMARY_THRESHOLD_SHARE = 0.10
# A summary is never asked to be longer than this share of what it replaces, nor shorter than MIN_SUMMARY_TOKENS.
SUMMARY_MAX_CONTENT_SHARE = 0.40
MIN_SUMMARY_TOKENS = 128
# The summary call's max_tokens: the target it asks for, and this much more to finish a sentence or a section.
SUMMARY_OUTPUT_SLACK = 1.25
# Tool schemas and pinned rules ride along with every request: each may take this share of the window.
TOOL_SCHEMA_WINDOW_SHARE = 0.10
PIN_WINDOW_SHARE = 0.10
# Requests are kept this share of the window below it: the server counts with its own tokenizer and chat
# template, which Concord's exact count of the same request can miss by a little.
WINDOW_MARGIN_SHARE = 0.02
MIN_WINDOW_MARGIN = 16
AUTORAISE_PERCENT = 0.85
# Without llm.max_tokens an answer may take this share of the window, at most OUTPUT_CEILING_TOKENS.
OUTPUT_WINDOW_SHARE = 0.25
OUTPUT_CEILING_TOKENS = 8_192

# (provider, model) routes whose real window is capped below the model's nominal one, so 50% of the nominal
# window would fire far too late relative to the cap; they trigger at 85% instead.
DEFAULT_AUTORAISE_ROUTES: frozenset[tuple[str, str]] = frozenset({("codex-oauth", "gpt-5.5")})


def compute_threshold_tokens(context_length: int, threshold_percent: float, max_tokens: int | None = None) -> int:
    """Prompt-token count at which compression triggers.

    Output tokens are reserved first; a 64K floor keeps big models from compressing at 50%; when that floor
    would swallow the whole window (small models), 85% of the effective window is used instead.
    """
    effective = context_length - (max_tokens or 0)
    if effective <= 0:
        effective = context_length
    pct = int(effective * threshold_percent)
    floored = max(pct, MIN_THRESHOLD_TOKENS)
    if floored >= effective:
        return max(1, min(int(effective * _SMALL_WINDOW_PERCENT), effective - 1))
    return floored


def output_reserve(configured: int | None, context_length: int) -> int | None:
    """``max_tokens`` to send and to reserve (R-T4): the configured value, else a share of the window (None
    when the window is unknown).

    Without a cap a model may answer until the window is full (a local 4K model writing 3,600 tokens), and the
    next request cannot fit; with it, every answer leaves room for the conversation.
    """
    if configured:
        return configured
    if context_length <= 0:
        return None
    return max(1, min(int(context_length * OUTPUT_WINDOW_SHARE), OUTPUT_CEILING_TOKENS))


def tail_token_budget(threshold_tokens: int, target_ratio: float) -> int:
    """Tokens the verbatim tail may hold: threshold × target_ratio."""
    return int(threshold_tokens * target_ratio)


def max_summary_tokens(context_length: int) -> int:
    """5% of the main window, at most 12,000 (R-T5)."""
    return min(int(context_length * SUMMARY_WINDOW_SHARE), SUMMARY_CEILING_TOKENS)


def summary_floor(threshold_tokens: int) -> int:
    """The shortest summary target: 2,000 tokens (R-T5), but at most 10% of the threshold."""
    return max(MIN_SUMMARY_TOKENS, min(SUMMARY_FLOOR_TOKENS, int(threshold_tokens * SUMMARY_THRESHOLD_SHARE)))


def summary_ceiling(context_length: int, threshold_tokens: int) -> int:
    """The longest summary target: 5% of the window, at most 12,000, never below the floor."""
    return max(max_summary_tokens(context_length), summary_floor(threshold_tokens))


def summary_budget(content_tokens: int, context_length: int, threshold_tokens: int) -> int:
    """Summary length target: 20% of the summarized content, clamped to [floor, ceiling], and at most 40% of
    the content (a summary longer than what it replaces is no compression)."""
    budget = max(summary_floor(threshold_tokens),
                 min(int(content_tokens * SUMMARY_CONTENT_SHARE), summary_ceiling(context_length, threshold_tokens)))
    return max(MIN_SUMMARY_TOKENS, min(budget, int(content_tokens * SUMMARY_MAX_CONTENT_SHARE)))


def summary_output_cap(budget: int, room: int | None = None) -> int:
    """``max_tokens`` of the summary call for a target of ``budget`` tokens, within ``room`` when given."""
    cap = int(budget * SUMMARY_OUTPUT_SLACK)
    return max(1, min(cap, room)) if room is not None else cap


def window_margin(context_length: int) -> int:
    """Tokens every request stays below the window (see `WINDOW_MARGIN_SHARE`)."""
    return max(MIN_WINDOW_MARGIN, int(context_length * WINDOW_MARGIN_SHARE))


def request_room(context_length: int, prompt_tokens: int) -> int:
    """The guard every request passes: the largest ``max_tokens`` a prompt of ``prompt_tokens`` may ask for
    in a window of ``context_length`` (≤ 0: the prompt itself does not fit)."""
    return context_length - window_margin(context_length) - prompt_tokens


def tool_schema_budget(context_length: int) -> int:
    """Tokens the tool schemas sent with each request may take: a tenth of the window."""
    return int(context_length * TOOL_SCHEMA_WINDOW_SHARE)


def pin_budget(context_length: int) -> int:
    """Tokens a chat's pinned rules may take in each request: a tenth of the window."""
    return int(context_length * PIN_WINDOW_SHARE)


def autoraised_threshold_percent(
    provider: str,
    model: str,
    threshold_percent: float,
    *,
    enabled: bool = True,
    routes: Iterable[tuple[str, str]] = DEFAULT_AUTORAISE_ROUTES,
) -> float:
    """The trigger percentage after the per-route autoraise: capped routes trigger at 85%."""
    if enabled and (provider.lower(), model.lower()) in {(p.lower(), m.lower()) for p, m in routes}:
        return max(threshold_percent, AUTORAISE_PERCENT)
    return threshold_percent
