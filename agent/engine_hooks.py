"""What the agent loop asks of a context engine that only some engines answer, as plain functions.

The `ContextEngine` contract is small; the built-in `ContextCompressor` offers more (its protected head and tail,
its anti-thrashing streak, whether real usage proved the list fits, a window that can change). Each function
asks for one of these where the engine has it and falls back to what an engine without it means.
"""

from __future__ import annotations

from agent.compression.engine import ContextEngine

__all__ = [
    "defers_to_real_usage",
    "ineffective_streak",
    "lower_context_length",
    "protected_counts",
    "record_ineffective",
    "use_window",
]

DEFAULT_PROTECT_FIRST_N = 3
DEFAULT_PROTECT_LAST_N = 20


def protected_counts(engine: ContextEngine) -> tuple[int, int]:
    """The engine's protected head and tail sizes for the preflight gate (spec defaults when it has none)."""
    first = getattr(engine, "protect_first_n", DEFAULT_PROTECT_FIRST_N)
    last = getattr(engine, "protect_last_n", DEFAULT_PROTECT_LAST_N)
    return int(first), int(last)


def ineffective_streak(engine: ContextEngine) -> int:
    """Ineffective compressions in a row the engine reports (`ContextCompressor.ineffective_count`)."""
    return int(getattr(engine, "ineffective_count", 0) or 0)


def defers_to_real_usage(engine: ContextEngine) -> bool:
    """Whether the engine says real usage already proved the list fits (`ContextCompressor.deferred_to_real_usage`)."""
    return bool(getattr(engine, "deferred_to_real_usage", False))


def record_ineffective(engine: ContextEngine) -> None:
    """Count a recovery compression that did not help toward the engine's anti-thrashing, where it has one."""
    record = getattr(engine, "record_ineffective", None)
    if callable(record):
        record()


def use_window(engine: ContextEngine, context_length: int, max_tokens: int | None) -> None:
    """Give the engine the window of the model now answering, where it can change windows
    (`ContextCompressor.use_window`); an engine without it keeps its own."""
    use = getattr(engine, "use_window", None)
    if callable(use):
        use(context_length, max_tokens)


def lower_context_length(engine: ContextEngine, context_length: int) -> None:
    """Shrink the engine's window to what the provider stated; the threshold follows."""
    lower = getattr(engine, "lower_context_length", None)
    if callable(lower):
        lower(context_length)
    elif context_length < engine.context_length:
        engine.context_length = context_length
