"""The records of one agent turn: its settings, what it compacted, and what it returns.

Kept apart from the loop so the gateway can build and read them without importing the loop's machinery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.compression.engine import CompressionResult
from agent.llm.base import Usage

__all__ = [
    "CANCELLED_TOOL_TEXT",
    "INTERRUPTED_MARK",
    "Compaction",
    "LoopConfig",
    "StopReason",
    "TurnResult",
    "close_open_tool_calls",
    "user_message",
]

CANCELLED_TOOL_TEXT = "[Cancelled: the turn was stopped before this tool finished]"
# Ends the partial answer a stopped streaming turn keeps, so the model (and a reader) sees it was cut off.
INTERRUPTED_MARK = "[interrupted]"


class StopReason(StrEnum):
    """Why a turn ended."""

    FINAL = "final"
    MAX_ITERATIONS = "max_iterations"
    CANCELLED = "cancelled"
    ERROR = "error"


# A compaction running longer than this posts a progress line in the chat, and again after each further period.
PROGRESS_EVERY_S = 20.0


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """Bounds of a turn. Defaults follow the spec (R-P1, R-P3)."""

    max_iterations: int = 25
    # One budget shared by every error-recovery compression of a turn (overflow, 413, long-context tier).
    max_compression_attempts: int = 3
    preflight_passes: int = 3
    # A preflight pass that leaves ≥ 95% of the tokens and as many messages made no progress.
    min_progress_ratio: float = 0.05
    max_output_shrinks: int = 3
    # False: never compress on the loop's own initiative (preflight, post-response); recovery from a provider's
    # context-overflow error still compresses, since the alternative is a conversation that cannot continue.
    auto_compress: bool = True
    # A compaction running longer than this posts a "still compacting" line in the chat (and again after each).
    progress_every_s: float = PROGRESS_EVERY_S


@dataclass(frozen=True, slots=True)
class Compaction:
    """One successful compaction inside a turn: what the gateway must persist (R-S4)."""

    trigger: str  # preflight | post_response | recovery
    result: CompressionResult
    system_prompt: str
    old_session_id: str
    session_id: str
    # How many of the turn's appended messages (from the user's on) the compacted list was computed from: the
    # ones a persisted compaction already holds, verbatim or summarized.
    appended: int = 0
    # The messages it compressed (system prompt excluded), some added by this turn and not stored yet: the
    # gateway stores those first, so what the compaction clipped or summarized is archived, never lost.
    replaced: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class TurnResult:
    """What a turn produced.

    ``messages`` is the session's whole list afterwards (system prompt excluded). ``appended`` is every
    message the turn added, in order, starting with the user's; after a compaction some of them may only
    survive inside the summary, so a gateway that sees ``compacted`` replaces the active list with
    ``messages`` and archives the rest (the same holds for ``history_replaced``, which also covers images
    re-encoded to fit a provider's limit). ``context_length`` is the window after any lowering an error forced;
    persist it for the session.
    """

    messages: list[dict[str, Any]]
    appended: list[dict[str, Any]]
    system_prompt: str
    session_id: str
    stop_reason: StopReason
    text: str = ""
    error_text: str = ""
    compactions: list[Compaction] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)
    context_length: int | None = None
    images_reencoded: int = 0

    @property
    def compacted(self) -> bool:
        """Whether at least one compaction replaced the message list during the turn."""
        return bool(self.compactions)

    @property
    def history_replaced(self) -> bool:
        """Whether earlier messages changed (compaction or image re-encoding), not just new ones appended."""
        return self.compacted or self.images_reencoded > 0

    @property
    def prompt_tokens(self) -> int:
        """Real prompt tokens of the turn's last call (0 when the provider reported none)."""
        return self.usage[-1].prompt_tokens if self.usage else 0


def user_message(message: str | Mapping[str, Any]) -> dict[str, Any]:
    """The user's input as a chat message (a copy; the caller's dict is never touched)."""
    if isinstance(message, str):
        return {"role": "user", "content": message}
    if message.get("role") != "user":
        raise ValueError("the turn's input must be a user message")
    return dict(message)


def close_open_tool_calls(messages: Sequence[dict[str, Any]], text: str = CANCELLED_TOOL_TEXT) -> list[dict[str, Any]]:
    """A new list of ``messages`` (the same dicts) where every tool call without a result gets a stub
    result after its group.

    Providers reject an assistant tool call without a matching result; a cancelled turn must not leave one.
    """
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for message in messages:
        if pending and message.get("role") != "tool":
            out.extend({"role": "tool", "tool_call_id": call_id, "content": text} for call_id in pending)
            pending = []
        out.append(message)
        if message.get("role") == "assistant":
            pending = [str(call.get("id")) for call in message.get("tool_calls") or ()]
        elif message.get("role") == "tool" and message.get("tool_call_id") in pending:
            pending.remove(str(message.get("tool_call_id")))
    out.extend({"role": "tool", "tool_call_id": call_id, "content": text} for call_id in pending)
    return out
