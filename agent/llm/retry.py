"""Bounded retries with exponential backoff for the retryable LLM errors, honouring Retry-After."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from agent.llm.errors import LLMError, RateLimited

__all__ = ["RetryPolicy"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait before repeating a failed call.

    Only errors whose class is ``retryable`` (rate limits, timeouts, 5xx) are repeated; auth failures and
    context overflows are surfaced at once because repeating them cannot help. A provider's Retry-After is
    obeyed but capped at ``max_retry_after`` so one reply cannot park a turn for an hour. ``sleep`` is
    injectable so tests can record the waits instead of sleeping.
    """

    max_retries: int = 2
    base_delay: float = 1.0
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    sleep: Sleep = field(default=asyncio.sleep, compare=False)

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.base_delay < 0 or self.max_delay < 0 or self.max_retry_after < 0:
            raise ValueError("retry settings must be non-negative")

    def delay_for(self, attempt: int, error: LLMError) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based) after ``error``."""
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return min(error.retry_after, self.max_retry_after)
        return min(self.max_delay, self.base_delay * (2**attempt))

    async def run(self, call: Callable[[], Awaitable[T]], *, label: str = "LLM call") -> T:
        """Await ``call()``, repeating it on retryable LLMErrors at most ``max_retries`` times."""
        attempt = 0
        while True:
            try:
                return await call()
            except LLMError as error:
                if not error.retryable or attempt >= self.max_retries:
                    raise
                delay = self.delay_for(attempt, error)
                log.warning("%s failed (%s: %s); retry %d/%d in %.1fs", label, type(error).__name__,
                            error.message, attempt + 1, self.max_retries, delay)
                await self.sleep(delay)
                attempt += 1
