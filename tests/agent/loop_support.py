"""Helpers for the loop tests: a small deterministic context engine and recording sinks.

`KeepTailEngine` implements the `ContextEngine` contract the simple way (keep the system message and the
newest ``keep`` messages, drop the rest) so loop tests can check the triggers without summary calls. The
end-to-end tests use the real `ContextCompressor` instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compression.engine import CompressionResult, ContextEngine
from agent.compression.threshold import compute_threshold_tokens
from agent.events import AgentEvent, Notice
from agent.llm.base import Usage
from agent.tokens import get_counter

NOTE = "\n\n[Note: earlier turns were compacted into a handoff summary.]"


@dataclass
class CompressCall:
    tokens: int | None
    force: bool
    message_count: int


class KeepTailEngine(ContextEngine):
    """Drops everything but the system message and the last ``keep`` messages (whole tool groups kept)."""

    def __init__(self, *, context_length: int, threshold: float = 0.5, keep: int = 4,
                 protect_first_n: int = 1, protect_last_n: int = 2, keep_sentinel_on_missing_usage: bool = False,
                 abort_reason: str = "", blocked_streak: int = 0, threshold_tokens: int | None = None) -> None:
        self.context_length = context_length
        self.threshold = threshold
        self.threshold_tokens = threshold_tokens or compute_threshold_tokens(context_length, threshold)
        self.keep = keep
        self.protect_first_n = protect_first_n
        self.protect_last_n = protect_last_n
        self.keep_sentinel = keep_sentinel_on_missing_usage
        self.abort_reason = abort_reason
        self.ineffective_count = blocked_streak
        self.last_prompt_tokens = 0
        self.compression_count = 0
        self.calls: list[CompressCall] = []
        self.usages: list[Usage] = []
        self.session_starts: list[tuple[str, int]] = []

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        tokens = self.last_prompt_tokens if prompt_tokens is None else prompt_tokens
        return self.ineffective_count < 2 and tokens >= self.threshold_tokens

    def lower_context_length(self, context_length: int) -> None:
        self.context_length = min(self.context_length, context_length)
        self.threshold_tokens = compute_threshold_tokens(self.context_length, self.threshold)

    def update_from_response(self, usage: Any) -> None:
        self.usages.append(usage)
        if usage.prompt_tokens or not self.keep_sentinel:
            self.last_prompt_tokens = usage.prompt_tokens

    def has_content_to_compress(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        return len(messages) > 1 + self.keep

    async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, force: bool = False) -> CompressionResult:
        self.calls.append(CompressCall(current_tokens, force, len(messages)))
        counter = get_counter()
        before = counter.count_messages(messages)
        if self.abort_reason:
            return CompressionResult(list(messages), False, len(messages), len(messages), before, before,
                                     aborted=True, reason=self.abort_reason)
        system, rest = dict(messages[0]), list(messages[1:])
        cut = max(0, len(rest) - self.keep)
        while cut > 0 and rest[cut].get("role") == "tool":  # never orphan a tool result
            cut -= 1
        if cut == 0:
            return CompressionResult(list(messages), False, len(messages), len(messages), before, before)
        if self.compression_count == 0:
            system["content"] = str(system["content"]) + NOTE
        summary = {"role": "user", "content": f"[summary of {cut} earlier messages]"}
        new = [system, summary, *rest[cut:]]
        self.compression_count += 1
        self.last_prompt_tokens = -1
        return CompressionResult(new, True, len(messages), len(new), before, counter.count_messages(new),
                                 summary_kind="static")

    def on_session_start(self, session_id: str, messages: Sequence[Mapping[str, Any]] = ()) -> None:
        self.session_starts.append((session_id, len(messages)))


@dataclass
class Sinks:
    """Collects notices and events."""

    notices: list[Notice] = field(default_factory=list)
    events: list[AgentEvent] = field(default_factory=list)

    async def notice(self, notice: Notice) -> None:
        self.notices.append(notice)

    async def event(self, event: AgentEvent) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [str(n.kind) for n in self.notices]


def filler(n_words: int, seed: int = 0) -> str:
    """Deterministic prose-like text of about ``n_words`` tokens."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    return " ".join(f"{words[(i + seed) % 10]}{(i * 7 + seed) % 97}" for i in range(n_words))


def history(pairs: int, words: int = 50) -> list[dict[str, Any]]:
    """``pairs`` user/assistant exchanges of about ``words`` words each."""
    out: list[dict[str, Any]] = []
    for i in range(pairs):
        out.append({"role": "user", "content": f"question {i}: " + filler(words, i)})
        out.append({"role": "assistant", "content": f"answer {i}: " + filler(words, i + 1)})
    return out


def assert_tool_pairs_consistent(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every tool call has exactly one result right after its assistant message, and no result is orphaned."""
    i = 0
    while i < len(messages):
        message = messages[i]
        if message.get("role") == "tool":
            raise AssertionError(f"orphan tool result at {i}: {message}")
        ids = [c["id"] for c in message.get("tool_calls") or ()]
        i += 1
        results = []
        while i < len(messages) and messages[i].get("role") == "tool":
            results.append(messages[i]["tool_call_id"])
            i += 1
        assert sorted(results) == sorted(ids), f"calls {ids} answered by {results}"


def make_provider(server: Any, **kwargs: Any) -> Any:
    """A real OpenAI-compatible provider talking HTTP to the fake server (no retries unless asked)."""
    from agent.llm.openai_compat import OpenAICompatProvider

    kwargs.setdefault("max_retries", 0)
    return OpenAICompatProvider(server.openai_base_url, "sk-test-secret-key-0123456789", "fake-model", **kwargs)
