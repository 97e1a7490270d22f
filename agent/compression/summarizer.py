"""The one paid step: calling the summary model, with the whole failure tree of R-C8.

    no summary provider ───────────────▶ cooldown 600 s, failure
    in cooldown (and not forced) ──────▶ failure without a call (abort while an auth/network flag stands)
    call the summary model
      401/403 ─▶ auth flag      connection/stream closed early ─▶ network flag
      any failure (incl. an empty summary):
        summary model ≠ main model, not yet retried ─▶ retry once on the main model
        otherwise ─▶ transient cooldown 30–60 s
    all attempts together past ``deadline_s`` ─▶ stopped, a transient failure like the others
    failure + (auth/network flag or abort_on_summary_failure) ─▶ ABORT (messages unchanged)
    any other failure ─▶ the caller inserts the static fallback summary
    an overflow error stating a smaller window ─▶ no cooldown: the caller learns the window and asks again,
                                                 in parts that fit it
A success on the main model makes the main model this session's summary model (no more doomed calls).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent.compression.state import CompressorState
from agent.compression.summary import SUMMARIZER_SYSTEM, EmptySummary, clean_summary_output
from agent.llm.base import Provider
from agent.llm.errors import AuthError, ContextOverflow, LLMError, NetworkError, RateLimited
from agent.storable import storable_text

__all__ = [
    "ABORT_WARNING",
    "NO_PROVIDER_COOLDOWN_S",
    "TRANSIENT_COOLDOWN_MAX_S",
    "TRANSIENT_COOLDOWN_MIN_S",
    "SummaryOutcome",
    "request_summary",
    "summary_call_allowed",
]

NO_PROVIDER_COOLDOWN_S = 600.0
TRANSIENT_COOLDOWN_MIN_S = 30.0
TRANSIENT_COOLDOWN_MAX_S = 60.0
ABORT_WARNING = "conversation frozen, run /compress to retry or /new"


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """A summary body, or why there is none and whether the compression must abort.

    ``cut_off``: the model stopped at ``max_tokens`` (its last line is partial). ``stated_window``: the
    summary model's server refused the prompt as too long for a window it named, smaller than assumed."""

    body: str | None
    abort: bool = False
    reason: str = ""
    cut_off: bool = False
    stated_window: int | None = None


def same_model(a: Provider, b: Provider) -> bool:
    """Whether two providers are the same model on the same backend (then retrying is pointless)."""
    if a is b:
        return True
    return (getattr(a, "name", None), getattr(a, "model", None)) == (getattr(b, "name", None), getattr(b, "model", None))


def _describe(error: Exception) -> str:
    if isinstance(error, AuthError):
        return f"auth failure{f' (HTTP {error.status})' if error.status else ''}"
    if isinstance(error, NetworkError):
        return "network failure (connection or stream closed early)"
    if isinstance(error, EmptySummary):
        return "empty summary"
    kind = type(error).__name__
    status = getattr(error, "status", None)
    return f"{kind}{f' (HTTP {status})' if status else ''}"


def _failure(state: CompressorState, reason: str, abort_on_failure: bool) -> SummaryOutcome:
    abort = state.auth_failure or state.network_failure or abort_on_failure
    return SummaryOutcome(None, abort, reason)


async def _call(provider: Provider, prompt: str, max_tokens: int) -> tuple[str, bool]:
    # No prompt-cache markers: no later request repeats a summary prompt — the next one summarizes other turns
    # beside another previous summary — and the part every summary prompt shares (the summarizer's system prompt
    # and the template, 450–540 tokens) is below the shortest prefix Anthropic caches (1,024 tokens on Sonnet,
    # 4,096 on Haiku 4.5). A marker would only bill the whole prompt as a cache write, at 1.25× the input price.
    completion = await provider.complete(
        [{"role": "user", "content": prompt}], system=SUMMARIZER_SYSTEM, max_tokens=max_tokens, cache=False
    )
    return storable_text(clean_summary_output(completion.text)), completion.finish_reason == "length"


def summary_call_allowed(state: CompressorState, summary_provider: Provider | None, *, now: float,
                         force: bool) -> bool:
    """Whether `request_summary` would call a model now: a summary provider, and no cooldown unless forced."""
    return summary_provider is not None and (force or now >= state.cooldown_until)


async def request_summary(
    state: CompressorState,
    *,
    summary_provider: Provider | None,
    main_provider: Provider | None,
    build_prompt: Callable[[], tuple[str, int]],
    now: float,
    force: bool,
    abort_on_failure: bool,
    deadline_s: float | None = None,
    window: int | None = None,
) -> SummaryOutcome:
    """Run the summary call through the failure tree, updating ``state``'s flags and cooldown.

    ``build_prompt`` returns (prompt, max_tokens); it runs only when a call is actually made, since
    serializing and redacting a long middle is the costliest non-LLM step. ``deadline_s`` bounds every
    attempt together (provider retries and the fallback to the main model), so one compaction never holds
    the chat longer than that. ``window``: the summary window the prompt was built for.
    """
    if summary_provider is None:
        state.cooldown_until = now + NO_PROVIDER_COOLDOWN_S
        return _failure(state, "no summary provider configured", abort_on_failure)
    if not summary_call_allowed(state, summary_provider, now=now, force=force):
        return _failure(state, f"summary model cooling down ({state.cooldown_until - now:.0f}s left)", abort_on_failure)

    state.auth_failure = state.network_failure = False
    prompt, max_tokens = build_prompt()
    primary = main_provider if state.fell_back_to_main and main_provider is not None else summary_provider
    attempts = [primary]
    if main_provider is not None and not same_model(primary, main_provider):
        attempts.append(main_provider)
    reasons: list[str] = []
    retry_after: float | None = None
    ends = None if deadline_s is None else time.monotonic() + deadline_s
    for provider in attempts:
        left = None if ends is None else ends - time.monotonic()
        if left is not None and left <= 0:
            reasons.append(f"{getattr(provider, 'model', '') or 'model'}: not tried, {deadline_s:g} s deadline spent")
            continue
        try:
            async with asyncio.timeout(left):
                body, cut_off = await _call(provider, prompt, max_tokens)
        except ContextOverflow as error:
            if error.limit and provider is summary_provider and (window is None or error.limit < window):
                return SummaryOutcome(None, reason=f"the summary model serves {error.limit:,} tokens",
                                      stated_window=error.limit)
            reasons.append(f"{getattr(provider, 'model', '') or 'model'}: {_describe(error)}")
            continue
        except TimeoutError:
            reasons.append(f"{getattr(provider, 'model', '') or 'model'}: stopped at the {deadline_s:g} s "
                           "compaction deadline")
            continue
        except (LLMError, EmptySummary) as error:
            state.auth_failure |= isinstance(error, AuthError)
            state.network_failure |= isinstance(error, NetworkError)
            if isinstance(error, RateLimited) and error.retry_after is not None:
                retry_after = error.retry_after
            reasons.append(f"{getattr(provider, 'model', '') or 'model'}: {_describe(error)}")
            continue
        state.auth_failure = state.network_failure = False
        state.cooldown_until = 0.0
        if provider is not summary_provider:
            state.fell_back_to_main = True
        return SummaryOutcome(body, cut_off=cut_off)
    wait = min(max(retry_after or TRANSIENT_COOLDOWN_MIN_S, TRANSIENT_COOLDOWN_MIN_S), TRANSIENT_COOLDOWN_MAX_S)
    state.cooldown_until = now + wait
    return _failure(state, "summary failed — " + "; ".join(reasons), abort_on_failure)
