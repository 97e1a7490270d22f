"""Trigger thresholds and budgets (R-T4, R-T5, R-T6). Pure arithmetic, no I/O."""

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
    "summary_budget",
    "tail_token_budget",
]

# Below this a big model would compress at 50% of a huge window far too early.
MIN_THRESHOLD_TOKENS = 64_000
_SMALL_WINDOW_PERCENT = 0.85
SUMMARY_CEILING_TOKENS = 12_000
SUMMARY_FLOOR_TOKENS = 2_000
SUMMARY_WINDOW_SHARE = 0.05
SUMMARY_CONTENT_SHARE = 0.20
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
    """Upper bound of a summary: 5% of the main window, at most 12,000."""
    return min(int(context_length * SUMMARY_WINDOW_SHARE), SUMMARY_CEILING_TOKENS)


def summary_budget(content_tokens: int, context_length: int) -> int:
    """Summary length target: 20% of the summarized content, clamped to [2,000, max_summary_tokens]."""
    ceiling = max(max_summary_tokens(context_length), SUMMARY_FLOOR_TOKENS)
    return max(SUMMARY_FLOOR_TOKENS, min(int(content_tokens * SUMMARY_CONTENT_SHARE), ceiling))


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
