"""The arithmetic behind the loop's compression triggers (R-P1, R-P2), free of I/O so each rule is testable.

Preflight runs before every LLM call: a cheap gate decides whether an exact count is worth it, the exact
count includes the system prompt and tool schemas, and once the provider has reported real prompt tokens
for an earlier request of the same (uncompacted) list, the estimate is anchored on that real figure plus the
exact size of what was appended since — so a tokenizer that over-counts schemas cannot make the loop
compress again and again a conversation the provider has proven fits.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tokens import TokenCounter

__all__ = [
    "CountRatio",
    "FitAnchor",
    "cheap_gate",
    "made_progress",
    "post_response_tokens",
]


def cheap_gate(message_count: int, rough_tokens: int, threshold: int, protect_first_n: int,
               protect_last_n: int) -> bool:
    """Whether the exact preflight count is worth running.

    More messages than the protected head and tail could hold, or — for few but huge messages — a rough
    estimate already at the threshold.
    """
    return message_count > protect_first_n + protect_last_n + 1 or rough_tokens >= threshold


def made_progress(before_messages: int, before_tokens: int, after_messages: int, after_tokens: int,
                  min_ratio: float = 0.05) -> bool:
    """A compression pass made progress if it removed messages or at least ``min_ratio`` of the tokens."""
    if after_messages < before_messages:
        return True
    return before_tokens > 0 and after_tokens <= before_tokens * (1.0 - min_ratio)


def post_response_tokens(last_prompt_tokens: int) -> int | None:
    """The figure the post-response check decides on, or None when it must fall back to an estimate.

    Only real prompt tokens count (never completion or reasoning tokens); -1 is the "just compressed,
    waiting for real usage" sentinel and reads as 0; 0 means no usage was reported.
    """
    if last_prompt_tokens > 0:
        return last_prompt_tokens
    if last_prompt_tokens == -1:
        return 0
    return None


def _fingerprint(message: Mapping[str, Any]) -> str:
    return hashlib.md5(json.dumps(message, sort_keys=True, default=str).encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class FitAnchor:
    """A request the provider measured: its first ``message_count`` messages cost ``prompt_tokens``."""

    prompt_tokens: int
    message_count: int
    last_fingerprint: str
    system_prompt: str

    @classmethod
    def of(cls, prompt_tokens: int, messages: Sequence[Mapping[str, Any]], system_prompt: str) -> FitAnchor:
        """Anchor the request that sent ``messages`` with ``system_prompt``."""
        last = _fingerprint(messages[-1]) if messages else ""
        return cls(prompt_tokens, len(messages), last, system_prompt)

    def appended(self, messages: Sequence[Mapping[str, Any]], system_prompt: str,
                 counter: TokenCounter) -> int | None:
        """Our exact count of what ``messages`` added to the anchored request, or None when they no longer
        extend it (a compaction or edit replaced it)."""
        n = self.message_count
        if system_prompt != self.system_prompt or len(messages) < n:
            return None
        if n and _fingerprint(messages[n - 1]) != self.last_fingerprint:
            return None
        return counter.count_messages(messages[n:])

    def estimate(self, messages: Sequence[Mapping[str, Any]], system_prompt: str, counter: TokenCounter,
                 ratio: float = 1.0) -> int | None:
        """Real tokens of the anchored prefix plus the exact count of what came after (scaled by the server's
        ``ratio`` of tokens to ours), or None when ``messages`` no longer extends the anchored request."""
        added = self.appended(messages, system_prompt, counter)
        return None if added is None else self.prompt_tokens + math.ceil(added * ratio)


# What a server's tokenizer and chat template count for one of our tokens is learned from what it reports for
# the growth between two requests: only over enough growth to mean something, only ever as "more" (a server
# counting less leaves our count as the safe one), and at most half again.
_RATIO_MIN_GROWTH = 200
_RATIO_CEILING = 1.5
_RATIO_WEIGHT = 0.3


@dataclass
class CountRatio:
    """The server's tokens per token of ours, so a request near the window's edge is judged in its units."""

    value: float = 1.0

    def observe(self, server_growth: int, our_growth: int) -> None:
        """A request grew by ``our_growth`` tokens as we count, ``server_growth`` as the server does."""
        if our_growth < _RATIO_MIN_GROWTH or server_growth <= 0:
            return
        sample = min(max(server_growth / our_growth, 1.0), _RATIO_CEILING)
        self.value += _RATIO_WEIGHT * (sample - self.value)
