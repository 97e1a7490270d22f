"""Continuity after idle expiry (R-G6): the next message opens a new session with a short note about the last.

The note is put in front of the new session's first user message, so it is stored with the conversation and
survives restarts, and the model knows earlier history exists (archived and searchable) without reloading it.
"""

from __future__ import annotations

from gateway.intake.keys import SessionKey
from gateway.store import SessionRecord, Store

__all__ = ["continuity_note", "previous_idle_session", "with_note"]

END_IDLE = "idle"


async def previous_idle_session(store: Store, key: SessionKey) -> SessionRecord | None:
    """The chat's most recently ended session if it ended by idle expiry, else None."""
    previous = await store.sessions.latest_ended(key.platform, key.chat_key)
    return previous if previous is not None and previous.end_reason == END_IDLE else None


def continuity_note(previous: SessionRecord) -> str:
    """A one-line note about the idle-ended session this chat had before."""
    when = previous.last_active_at.strftime("%Y-%m-%d %H:%M UTC")
    topic = f' about "{previous.title}"' if previous.title else ""
    return (f"[Continuity note: this chat's previous session{topic} ended after a period of inactivity "
            f"(last message {when}, {previous.message_count} messages). Its history is archived; "
            "the user may refer back to it.]")


def with_note(note: str | None, text: str) -> str:
    """``text`` with the continuity note in front of it (unchanged without a note)."""
    return f"{note}\n\n{text}" if note else text
