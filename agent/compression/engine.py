"""The pluggable context engine (R-E1): what every engine does, and what one compression returns.

How an engine is selected by name (R-E2) is `agent.compression.registry`'s business, so that this interface
never imports an implementation (the built-in compressor imports it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CompressionResult", "ContextEngine"]

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CompressionResult:
    """What one `compress` call did. ``messages`` is the new list (the input itself when nothing changed)."""

    messages: Messages
    compressed: bool
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summary_kind: str = "none"  # llm | static | none
    aborted: bool = False
    reason: str = ""
    head_end: int = 0
    tail_start: int = 0
    pruned: int = 0
    # Exact token count of each of ``messages``, when the engine knows them (the built-in one does): the
    # store keeps them per row, so persisting the result tokenizes nothing. Empty when unknown.
    token_counts: tuple[int, ...] = ()

    @property
    def savings_pct(self) -> float:
        """Fraction of tokens saved, 0.0 when nothing was."""
        if self.tokens_before <= 0:
            return 0.0
        return max(0.0, 1.0 - self.tokens_after / self.tokens_before)

    def stats(self) -> dict[str, Any]:
        """The figures of this result without the messages (JSON-serializable; for reports and persistence)."""
        return {
            "compressed": self.compressed,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "savings_pct": round(self.savings_pct * 100, 2),
            "head_end": self.head_end,
            "tail_start": self.tail_start,
            "pruned": self.pruned,
            "summary_kind": self.summary_kind,
            "aborted": self.aborted,
            "reason": self.reason,
        }


class ContextEngine(ABC):
    """Decides when to compress a conversation and does it; tracks token usage from real responses."""

    last_prompt_tokens: int = 0
    threshold_tokens: int = 0
    context_length: int = 0
    compression_count: int = 0
    # True when ``compress``, ``will_summarize`` and ``has_content_to_compress`` take ``token_counts=`` (one exact
    # count per message, which callers holding them pass so that nothing is re-tokenized); engines written before
    # it existed leave it False and are never passed any.
    accepts_token_counts: bool = False
    # True when the same three take ``prepared=`` (one record per message, as ``on_messages_stored`` returned it
    # when the message was stored), which a caller that kept them hands back after a restart.
    accepts_prepared: bool = False
    # True when ``compress`` takes ``ahead_of_need=True``: a compaction started below the threshold, while nobody
    # waits, which the engine may make cut as one at the threshold would (the next is then as far away).
    accepts_ahead_of_need: bool = False
    # Which summary template a summarizing engine writes: "task" (an agent at work) or "group" (a group chat's
    # participants, topics, decisions). Engines that write no summaries ignore it.
    summary_template: str = "task"

    @abstractmethod
    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        """Whether the conversation should be compressed now (False while anti-thrash blocks it)."""

    @abstractmethod
    async def compress(
        self,
        messages: Sequence[Mapping[str, Any]],
        current_tokens: int | None = None,
        focus_topic: str | None = None,
        force: bool = False,
    ) -> CompressionResult:
        """Return a compressed copy of ``messages`` (the input is never mutated)."""

    @abstractmethod
    def update_from_response(self, usage: Any) -> None:
        """Record the provider's real usage of the last call."""

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """False when everything is protected, so /compress can answer without an LLM call."""
        return len(messages) > 0

    def will_summarize(self, messages: Sequence[Mapping[str, Any]], *, force: bool = False) -> bool:
        """Whether ``compress(messages, force=force)`` would call a model now: the "compacting…" notice is
        shown only then. Default: whenever there is content to compress (an engine that cannot tell says so)."""
        return self.has_content_to_compress(messages)

    def on_session_start(self, session_id: str, messages: Sequence[Mapping[str, Any]] = ()) -> None:  # noqa: B027
        """A session (re)starts with these messages; rehydrate state from them."""

    def on_session_end(self, session_id: str) -> None:  # noqa: B027
        """The session ended for good."""

    def on_session_reset(self) -> None:  # noqa: B027
        """Forget per-session state (``/new``)."""

    def set_request_overhead(self, tokens: int) -> None:  # noqa: B027
        """Every request carries ``tokens`` besides its messages (the tool schemas the agent sends): an engine
        planning a compaction's result against the whole request uses it; others ignore it."""

    def number_messages(self, first_seq: int) -> None:  # noqa: B027
        """The next ``compress`` call's first non-system message is stored as message number ``first_seq``
        (the rest follow one by one), so a summary can cite the numbers ``read_history`` opens.
        Engines that cite nothing ignore it."""

    def on_messages_stored(self, messages: Sequence[Mapping[str, Any]]) -> list[str | None]:
        """``messages`` were just stored (a turn's, with its tool calls' results), off the answer's path: an
        engine may do now what a later compaction would otherwise do for them. Returns one text or None per
        message: what the caller may store with the message and hand back to ``compress(prepared=…)`` after a
        restart, where the engine `accepts_prepared`, so that what was done now need not be done again.
        Default: nothing done, nothing to keep."""
        return [None] * len(messages)

    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas (OpenAI function format) this engine offers the agent."""
        return []

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one of the engine's own tools."""
        raise KeyError(name)
