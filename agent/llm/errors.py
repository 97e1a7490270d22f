"""The one error tree of the LLM layer. Provider HTTP failures are translated into it where they enter.

    LLMError
    ├── ContextOverflow        prompt too long; .limit (stated window, if any), .output_tokens_variant
    ├── PayloadTooLarge        HTTP 413
    ├── LongContextTier        Anthropic 429 "Extra usage is required for long context requests"
    ├── ImageTooLarge          an image part exceeds the provider's size limit
    ├── RateLimited            429 / overloaded; .retry_after seconds when given     (retryable)
    ├── AuthError              401/403, missing key, quota or billing exhausted
    ├── ModelNotFound          unknown model / 404
    ├── LLMTimeout             request exceeded its timeout                          (retryable)
    │   └── DeadlineExceeded   the whole request ran past its overall deadline       (not retried)
    ├── NetworkError           connect failure, peer closed, stream ended early
    ├── ServerError            5xx                                                   (retryable)
    ├── BadResponse            invalid JSON, empty content, unexpected shape
    └── InvalidRequest         any other 4xx: the provider rejected the request as malformed

Messages never contain API keys: every text passes through `scrub_secrets` before it is stored.
"""

from __future__ import annotations

import re

__all__ = [
    "AuthError",
    "BadResponse",
    "ContextOverflow",
    "DeadlineExceeded",
    "ImageTooLarge",
    "InvalidRequest",
    "LLMError",
    "LLMTimeout",
    "LongContextTier",
    "ModelNotFound",
    "NetworkError",
    "PayloadTooLarge",
    "RateLimited",
    "ServerError",
    "scrub_secrets",
]

_SECRET_PATTERNS = [
    re.compile(r"\b(sk-(?:ant-|proj-|or-)?[A-Za-z0-9_\-]{8,})"),
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._\-]{8,}"),
    re.compile(r"(?i)\b(x-api-key|api[_-]?key|authorization)([\"':=\s]+)[^\s\"',}]{6,}"),
]


def scrub_secrets(text: str, extra: tuple[str, ...] = ()) -> str:
    """Replace anything that looks like an API key (and any literal in ``extra``) with ``[REDACTED]``."""
    for literal in extra:
        if literal and len(literal) >= 4:
            text = text.replace(literal, "[REDACTED]")
    text = _SECRET_PATTERNS[0].sub("[REDACTED]", text)
    text = _SECRET_PATTERNS[1].sub(r"\1[REDACTED]", text)
    return _SECRET_PATTERNS[2].sub(r"\1\2[REDACTED]", text)


class LLMError(Exception):
    """Root of every error raised by the LLM layer."""

    retryable: bool = False

    def __init__(self, message: str, *, status: int | None = None, provider: str | None = None) -> None:
        super().__init__(scrub_secrets(message))
        self.message = scrub_secrets(message)
        self.status = status
        self.provider = provider


class ContextOverflow(LLMError):
    """The prompt does not fit. ``limit`` is the window the provider stated, when it stated one.

    ``output_tokens_variant`` marks "prompt fits but max_tokens leaves no room": shrink max_tokens to
    ``available_output_tokens`` instead of compressing.
    """

    def __init__(
        self,
        message: str,
        *,
        limit: int | None = None,
        prompt_tokens: int | None = None,
        output_tokens_variant: bool = False,
        available_output_tokens: int | None = None,
        status: int | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message, status=status, provider=provider)
        self.limit = limit
        self.prompt_tokens = prompt_tokens
        self.output_tokens_variant = output_tokens_variant
        self.available_output_tokens = available_output_tokens


class PayloadTooLarge(LLMError):
    """HTTP 413: the request body is too big for the provider's front door."""


class LongContextTier(LLMError):
    """Anthropic's 429 for long-context requests without the extra-usage tier: drop to 200K and compress."""

    fallback_context_length = 200_000


class ImageTooLarge(LLMError):
    """An image part exceeds the provider's limit (Anthropic: 5 MB, 8000 px)."""


class RateLimited(LLMError):
    """Too many requests; wait ``retry_after`` seconds when the provider said how long."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = 429,
                 provider: str | None = None) -> None:
        super().__init__(message, status=status, provider=provider)
        self.retry_after = retry_after


class AuthError(LLMError):
    """401/403, a missing API key, or an exhausted quota / billing problem. Never retried."""


class ModelNotFound(LLMError):
    """The provider does not know the model name."""


class LLMTimeout(LLMError):
    """The request ran past its timeout."""

    retryable = True


class DeadlineExceeded(LLMTimeout):
    """The whole request (connect, first byte, body or stream) ran past its overall deadline.

    Not repeated: a server that trickled once would hold the chat as long again.
    """

    retryable = False


class NetworkError(LLMError):
    """Could not connect, or the connection / stream closed before the reply was complete."""


class ServerError(LLMError):
    """The provider failed (5xx)."""

    retryable = True


class BadResponse(LLMError):
    """The reply could not be used: invalid JSON, empty content, or an unexpected shape."""


class InvalidRequest(LLMError):
    """Any other 4xx: the provider refused the request itself (bad parameter, unsupported feature)."""
