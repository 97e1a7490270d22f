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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.tokens import TokenCounter

__all__ = [
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

    def estimate(self, messages: Sequence[Mapping[str, Any]], system_prompt: str,
                 counter: TokenCounter) -> int | None:
        """Real tokens of the anchored prefix plus the exact count of what came after, or None when
        ``messages`` no longer extends the anchored request (a compaction or edit replaced it)."""
        n = self.message_count
        if system_prompt != self.system_prompt or len(messages) < n:
            return None
        if n and _fingerprint(messages[n - 1]) != self.last_fingerprint:
            return None
        return self.prompt_tokens + counter.count_messages(messages[n:])
