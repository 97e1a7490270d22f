"""What leaves a turn besides its messages: user-visible notices and machine events (R-G7, R-S4).

The loop never talks to a chat platform. It hands `Notice`s (short status lines a gateway shows the user)
and `AgentEvent`s (facts a gateway persists or measures, such as ``session:compress``) to sinks it was
given. A sink that fails is logged and ignored: a broken status line must not break the conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from agent.compression.redact import redact_secrets

__all__ = [
    "EVENT_COMPRESS",
    "EVENT_LLM_RESPONSE",
    "EVENT_TOOL_RESULT",
    "AgentEvent",
    "EventSink",
    "Notice",
    "NoticeKind",
    "NoticeSink",
    "TurnStream",
    "aborted_notice",
    "compacting_notice",
    "compressed_many_times_notice",
    "compression_skipped_notice",
    "emit_event",
    "emit_notice",
    "emit_stream",
    "error_notice",
    "tool_status",
]

log = logging.getLogger(__name__)

EVENT_COMPRESS = "session:compress"
EVENT_LLM_RESPONSE = "llm:response"
EVENT_TOOL_RESULT = "tool:result"


class NoticeKind(StrEnum):
    """The kinds of status notice a turn can produce."""

    COMPACTING = "compacting"
    STILL_COMPACTING = "still_compacting"
    COMPRESSED_MANY_TIMES = "compressed_many_times"
    COMPRESSION_SKIPPED = "compression_skipped"
    COMPRESSION_ABORTED = "compression_aborted"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Notice:
    """A short status line for the user; ``data`` holds the figures it was built from."""

    kind: NoticeKind
    text: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """A fact about the turn for the gateway: ``kind`` is e.g. ``session:compress``."""

    kind: str
    session_id: str
    data: dict[str, Any] = field(default_factory=dict)


NoticeSink = Callable[[Notice], Awaitable[None]]
EventSink = Callable[[AgentEvent], Awaitable[None]]


class TurnStream(Protocol):
    """Where a streaming turn shows its progress (a chat message being edited, a terminal)."""

    async def text(self, text: str) -> None:
        """The answer of the current model call so far (the whole text, not a delta)."""

    async def status(self, text: str) -> None:
        """A short line for a tool round (``🔎 searching history…``), in place of the answer so far."""


# What a user is shown while tools run; unknown tools get the generic line.
_TOOL_STATUS = {"search_history": "🔎 searching history…", "memory": "🧠 updating memory…"}


def tool_status(names: list[str]) -> str:
    """The status line for a tool round calling ``names``."""
    lines = list(dict.fromkeys(_TOOL_STATUS.get(name, f"🛠️ using {name}…") for name in names))
    return " ".join(lines) or "🛠️ working…"


def compacting_notice() -> Notice:
    """Shown when a compression that needs a summary call is about to run."""
    return Notice(NoticeKind.COMPACTING, "🗜️ Compacting context…")


def still_compacting_notice(seconds: float) -> Notice:
    """Shown while a compaction runs long, so a slow summary model never looks like a dead bot."""
    return Notice(NoticeKind.STILL_COMPACTING,
                  f"⏳ Still compacting the conversation ({seconds:.0f} s so far); your message is next.",
                  {"seconds": seconds})


def compressed_many_times_notice(count: int) -> Notice:
    """Shown after the second and later compressions of one session."""
    return Notice(NoticeKind.COMPRESSED_MANY_TIMES,
                  f"Session compressed {count} times — accuracy may degrade. Consider /new",
                  {"count": count})


def compression_skipped_notice(ineffective: int) -> Notice:
    """Shown when anti-thrashing blocks compression although the context is over the threshold."""
    return Notice(NoticeKind.COMPRESSION_SKIPPED,
                  f"Compression skipped — last {ineffective} compressions saved <10% each. "
                  "Consider /new to start fresh.",
                  {"ineffective": ineffective})


def aborted_notice(reason: str) -> Notice:
    """Shown when a compression gave up and left the conversation unchanged."""
    reason = reason or "unknown reason"
    if reason.lower().startswith("context compression aborted"):
        text = f"⚠️ {reason}"  # the engine already wrote the whole warning
    else:
        text = (f"⚠️ Context compression aborted ({reason}). The conversation is frozen at its current size: "
                "run /compress to retry or /new to start fresh.")
    return Notice(NoticeKind.COMPRESSION_ABORTED, text, {"reason": reason})


def error_notice(text: str) -> Notice:
    """The turn stopped on an error; ``text`` is already user-facing."""
    return Notice(NoticeKind.ERROR, text)


async def emit_notice(sink: NoticeSink | None, notice: Notice) -> None:
    """Deliver ``notice`` with any secret in its text redacted (error texts quote providers and tools); a
    failing sink is logged, never raised."""
    clean = redact_secrets(notice.text)
    await _deliver(sink, notice if clean == notice.text else replace(notice, text=clean), f"notice {notice.kind}")


async def emit_stream(stream: TurnStream | None, text: str, *, status: bool = False) -> None:
    """Show ``text`` on ``stream`` (as a status line with ``status``); a failing stream is logged, never raised."""
    if stream is None:
        return
    try:
        await (stream.status(text) if status else stream.text(text))
    except Exception:
        log.warning("turn stream failed", exc_info=True)


async def emit_event(sink: EventSink | None, event: AgentEvent) -> None:
    """Deliver ``event``; a failing sink is logged, never raised."""
    await _deliver(sink, event, f"event {event.kind}")


async def _deliver(sink: Callable[[Any], Awaitable[None]] | None, item: object, what: str) -> None:
    # Listeners (chat, metrics) must never break the turn that reports to them.
    if sink is None:
        return
    try:
        await sink(item)
    except Exception:
        log.warning("sink failed for %s", what, exc_info=True)
