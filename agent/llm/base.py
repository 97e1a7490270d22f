"""The provider seam: one small interface every LLM backend implements, and the records it returns."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # window.py builds on the providers, which build on this module
    from agent.llm.window import ServedWindow

__all__ = ["Completion", "ModelLimits", "Provider", "TextProgress", "Usage"]

# Called while a reply streams in, with its visible text so far (a retried request starts again from "").
TextProgress = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one call. ``prompt_tokens`` is the whole prompt, cached parts included.

    For Anthropic that is input + cache_read + cache_creation tokens; 0 means the provider reported nothing.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def reported(self) -> bool:
        """Whether the provider reported any usage at all."""
        return self.prompt_tokens > 0 or self.completion_tokens > 0


@dataclass(frozen=True, slots=True)
class Completion:
    """One model reply as an internal OpenAI-format assistant message plus its usage."""

    message: dict[str, Any]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str | None = None

    @property
    def text(self) -> str:
        """The reply's visible text ('' when it only called tools)."""
        content = self.message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
        return ""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls the model asked for (possibly empty)."""
        return list(self.message.get("tool_calls") or [])


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """The model a provider's next call goes to: its name, window and output reserve (None: not set)."""

    model: str
    context_length: int
    max_tokens: int | None = None
    # Where what its server states about the window is learned (shared by every session on the model).
    window: ServedWindow | None = None


class Provider(ABC):
    """An LLM backend speaking internal OpenAI-format messages.

    ``system`` is passed apart from ``messages`` so each backend places it its own way (Anthropic's top-level
    ``system``, OpenAI's first message). Failures raise `agent.llm.errors.LLMError` subclasses only.
    """

    name: str
    model: str

    @abstractmethod
    async def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        stream: bool = False,
        temperature: float | None = None,
        on_text: TextProgress | None = None,
        cache: bool = True,
    ) -> Completion:
        """Run one chat completion and return the reply; raise an LLMError on failure.

        With ``stream`` the reply arrives over SSE and ``on_text`` (if given) hears its text as it grows.
        ``cache=False``: a one-off prompt that no later request repeats (a summary call) — no prompt-cache
        markers, since writing a cache entry costs more than plain input and nothing would read it.
        """

    def planned(self) -> ModelLimits | None:
        """The limits of the model the next call goes to, for a provider that chooses among several models
        (failover); None: one model, whose window the caller configured."""
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional hook, default does nothing
        """Release connections the provider owns (idempotent)."""
