"""How a turn answers a provider error (R-P3, R-C11): what to change before retrying, or what to tell the user.

`plan_recovery` is a pure decision from the error and the turn's remaining budgets; the loop carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent.llm.errors import (
    AuthError,
    ContextOverflow,
    DeadlineExceeded,
    ImageTooLarge,
    LLMError,
    LongContextTier,
    ModelNotFound,
    NetworkError,
    PayloadTooLarge,
    RateLimited,
)

__all__ = ["Action", "Recovery", "budget_spent_text", "cut_off_note", "plan_recovery", "still_too_large_text",
           "too_small_window_text", "user_error_text"]


class Action(StrEnum):
    """What to do before the next try."""

    # ``context_length``, when set, is the smaller window the provider stated: lower the engine's first.
    COMPRESS = "compress"  # force a compression
    SHRINK_OUTPUT = "shrink_output"  # retry with ``max_tokens`` lowered
    SHRINK_IMAGES = "shrink_images"  # re-encode oversized data-URL images
    STOP = "stop"  # give up; ``text`` says why


@dataclass(frozen=True, slots=True)
class Recovery:
    """The plan for one error."""

    action: Action
    context_length: int | None = None
    max_tokens: int | None = None
    text: str = ""
    # STOP because the turn's compression budget is spent, or because the prompt leaves no room for an answer
    # (the loop words the advice: /compress only when it has something to compress).
    budget_spent: bool = False
    no_output_room: bool = False


def budget_spent_text(attempts: int, *, can_compress: bool = True) -> str:
    """What the user reads when the per-turn compression budget is used up; /compress is suggested only
    when it has something to do."""
    return (f"⚠️ The conversation is still too large for the model after {attempts} compression attempts. "
            f"{_advice(can_compress)}")


def no_output_room_text(*, can_compress: bool = True) -> str:
    """What the user reads when the prompt leaves the model no room to answer; /compress is suggested only
    when it has something to do."""
    return f"⚠️ The conversation leaves the model no room to answer. {_advice(can_compress)}"


def _advice(can_compress: bool) -> str:
    return ("Run /compress to compact it, or /new to start a fresh session." if can_compress else
            "Use /new to start a fresh session; the history stays stored and searchable.")


def cut_off_note(max_tokens: int | None) -> str:
    """What ends an answer the model stopped at its length limit (``finish_reason: length``)."""
    limit = f" of {max_tokens:,} tokens" if max_tokens else ""
    return f"[… the answer was cut off at its length limit{limit} — ask me to continue.]"


def too_small_window_text(window: int) -> str:
    """What the user reads when the system prompt (with pins and tools) leaves the window no room at all."""
    return (f"⚠️ The model's window of {window:,} tokens has no room for a message and its answer beside the "
            "system prompt, the pinned rules and the tools, so nothing was sent. Use /new to start over, or serve "
            "the model with a larger window.")


def still_too_large_text() -> str:
    """What the user reads when earlier overflow recoveries did not help, so none is tried again."""
    return ("⚠️ The conversation is still too large for the model, and compressing it again has not helped. "
            "Use /new to start a fresh session; the history stays stored and searchable.")


def user_error_text(error: LLMError) -> str:
    """A short, secret-free explanation of a provider failure for the chat."""
    detail = error.message[:300]
    if isinstance(error, AuthError):
        return f"⚠️ The model provider refused the credentials or the account has no quota left ({detail})."
    if isinstance(error, ModelNotFound):
        return f"⚠️ The configured model is not available at the provider ({detail})."
    if isinstance(error, RateLimited):
        return "⚠️ The model provider is rate-limiting requests right now. Please try again in a moment."
    if isinstance(error, DeadlineExceeded):
        return ("⚠️ The model did not finish its answer in time, so the request was stopped. Please try again, "
                "or ask for a shorter answer.")
    if isinstance(error, NetworkError):
        return "⚠️ Could not reach the model provider (network problem). Please try again."
    return f"⚠️ The model call failed: {type(error).__name__}: {detail}"


def plan_recovery(error: LLMError, *, context_length: int, max_tokens: int | None,
                  compressions_used: int, max_compressions: int, output_shrinks_left: int,
                  images_shrunk: bool) -> Recovery:
    """Decide how to react to ``error`` given what the turn may still spend."""
    if isinstance(error, ContextOverflow) and error.output_tokens_variant:
        plan = _shrink_output(error, max_tokens, output_shrinks_left)
        if plan.action is Action.SHRINK_OUTPUT and error.limit and error.limit < context_length:
            return Recovery(Action.SHRINK_OUTPUT, context_length=error.limit, max_tokens=plan.max_tokens)
        return plan
    if isinstance(error, ImageTooLarge):
        if images_shrunk:
            return Recovery(Action.STOP, text=("⚠️ An image is still too large for the model after re-encoding. "
                                               "Send a smaller image, or /new to start without it."))
        return Recovery(Action.SHRINK_IMAGES)
    if isinstance(error, ContextOverflow | PayloadTooLarge | LongContextTier):
        if compressions_used >= max_compressions:
            return Recovery(Action.STOP, text=budget_spent_text(compressions_used), budget_spent=True)
        lowered: int | None = None
        if isinstance(error, ContextOverflow) and error.limit and 0 < error.limit < context_length:
            lowered = error.limit
        elif isinstance(error, LongContextTier) and error.fallback_context_length < context_length:
            lowered = error.fallback_context_length
        return Recovery(Action.COMPRESS, context_length=lowered)
    return Recovery(Action.STOP, text=user_error_text(error))


def _shrink_output(error: ContextOverflow, max_tokens: int | None, shrinks_left: int) -> Recovery:
    """The prompt fits but the requested output does not: ask for less output instead of compressing."""
    available = error.available_output_tokens
    if available is None and max_tokens:
        available = max_tokens // 2
    if shrinks_left <= 0 or not available or available <= 0 or (max_tokens is not None and available >= max_tokens):
        return Recovery(Action.STOP, text=no_output_room_text(), no_output_room=True)
    return Recovery(Action.SHRINK_OUTPUT, max_tokens=available)
