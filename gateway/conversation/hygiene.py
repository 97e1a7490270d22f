"""Session hygiene (R-G3): the gateway's own size check, before the agent sees a message.

The agent compresses at 50% of the window using the provider's real usage. If usage never arrives (a
provider that reports none, repeated failures) the agent may never trigger, and every failed turn makes the
session larger. Hygiene breaks that spiral from outside: at 85% of the window, or beyond a hard message
count whatever the estimate, the gateway compresses first. The decision is pure; running it is the
service's job (see `gateway.service`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tokens import TokenCounter

__all__ = ["HygieneCheck", "check_hygiene", "session_tokens"]

REASON_TOKENS = "hygiene: tokens"
REASON_MESSAGES = "hygiene: message count"


@dataclass(frozen=True, slots=True)
class HygieneCheck:
    """What hygiene found for one session. ``reason`` is empty when no compression is needed."""

    tokens: int
    token_source: str  # "usage" (provider's last real prompt tokens) or "count" (exact count of the store)
    messages: int
    token_limit: int
    message_limit: int
    reason: str = ""

    @property
    def needed(self) -> bool:
        """Whether the session must be compressed before the agent runs."""
        return bool(self.reason)


def session_tokens(
    last_prompt_tokens: int,
    messages: Sequence[Mapping[str, Any]],
    counter: TokenCounter,
    *,
    system: str | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    message_tokens: int | None = None,
) -> tuple[int, str]:
    """The session's size: the last real prompt tokens when known, else an exact count of the request the
    agent would send — stored messages, system prompt and tool schemas (R-T2: schemas alone can be 20-30K).

    ``last_prompt_tokens`` ≤ 0 means unknown (0: never reported, −1: just compressed, waiting for usage).
    ``message_tokens``: the stored messages' total, when the caller holds the store's counts.
    """
    if last_prompt_tokens > 0:
        return last_prompt_tokens, "usage"
    return counter.count_request(messages, system=system, tools=tools, message_tokens=message_tokens), "count"


def check_hygiene(
    *,
    tokens: int,
    token_source: str,
    message_count: int,
    context_length: int,
    threshold: float,
    hard_message_limit: int,
) -> HygieneCheck:
    """Decide whether a session needs compressing: ≥ ``threshold`` of the window, or > the message limit."""
    token_limit = max(1, int(context_length * threshold))
    if message_count > hard_message_limit:
        reason = REASON_MESSAGES
    elif tokens >= token_limit:
        reason = REASON_TOKENS
    else:
        reason = ""
    return HygieneCheck(tokens, token_source, message_count, token_limit, hard_message_limit, reason)
