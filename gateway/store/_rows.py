"""Row-level helpers shared by the repositories: encoding messages, mapping rows to records, writing rows."""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Row, Select, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from agent.compression.messages import plain_text
from agent.storable import storable_text
from gateway.store.errors import SessionEnded, SessionNotFound
from gateway.store.models import ACTIVE_ROW, MessageRow, SessionRow
from gateway.store.records import CompactionInfo, EngineState, MessageRecord, SessionRecord, origin_columns

Message = dict[str, Any]
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def utcnow() -> datetime:
    """Current time, aware UTC."""
    return datetime.now(UTC)


def new_session_id(at: datetime) -> str:
    """Sortable, readable and unique: ``20250101-120000-1a2b3c4d``."""
    return f"{at:%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"


def check_batch(messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int]) -> None:
    """Reject malformed input before any write, so a bad batch never half-lands."""
    if len(messages) != len(token_counts):
        raise ValueError(f"{len(messages)} messages but {len(token_counts)} token counts")
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") not in _ROLES:
            raise ValueError(f"not a chat message (role must be one of {sorted(_ROLES)}): {message!r:.200}")
    if any(count < 0 for count in token_counts):
        raise ValueError("token counts must be >= 0")


def payload_of(message: Mapping[str, Any]) -> str:
    """A message as its row's payload."""
    return json.dumps(message, ensure_ascii=False)


def decode(payload: str) -> Message:
    """A stored payload back into a fresh message dict."""
    return json.loads(payload)


@dataclass(frozen=True, slots=True)
class StoredRow:
    """What is needed to copy an existing row into a new active set."""

    role: str
    payload: str
    search_text: str
    tokens: int
    created_at: datetime
    compacted: bool
    origin: str | None = None
    author: str | None = None
    prepared: str | None = None


def message_text(message: Mapping[str, Any]) -> str:
    """A message as it is searched and read back: its plain text (`plain_text`: tool-call arguments unescaped,
    not the JSON envelope, so a command or a path is found as it was typed), after ``NAME: `` when a named
    person wrote it (a group chat's members), so "what did Alice say about…" finds what Alice said."""
    text = plain_text(dict(message))
    name = message.get("name")
    if message.get("role") == "user" and isinstance(name, str) and name:
        text = f"{name}: {text}"
    return storable_text(text)


def encoded_rows(messages: Sequence[Mapping[str, Any]], token_counts: Sequence[int],
                 at: datetime) -> list[StoredRow]:
    """New messages as rows, with their search text (`message_text`)."""
    return [
        StoredRow(role=str(m["role"]), payload=payload_of(m), search_text=message_text(m),
                  tokens=int(t), created_at=at, compacted=False, **origin_columns(m))
        for m, t in zip(messages, token_counts, strict=True)
    ]


def message_values(session_id: str, first_seq: int, rows: Sequence[StoredRow], *,
                   compacted: bool | None = None) -> list[dict[str, Any]]:
    """Column values of ``rows`` as active messages with sequences ``first_seq, first_seq + 1, …``."""
    return [
        {"session_id": session_id, "seq": first_seq + i, "role": r.role, "payload": r.payload,
         "search_text": r.search_text, "tokens": r.tokens, "created_at": r.created_at, "active": True,
         "archived_at": None, "archived_by": None, "compacted": r.compacted if compacted is None else compacted,
         "origin": r.origin, "author": r.author, "prepared": r.prepared}
        for i, r in enumerate(rows)
    ]


async def insert_rows(conn: AsyncConnection, session_id: str, first_seq: int, rows: Sequence[StoredRow],
                      *, compacted: bool | None = None) -> None:
    """Insert ``rows`` as active messages with sequences ``first_seq, first_seq + 1, …``."""
    if rows:
        await conn.execute(insert(MessageRow), message_values(session_id, first_seq, rows, compacted=compacted))


# The columns a row is copied with (`stored`).
STORED_COLUMNS = (MessageRow.seq, MessageRow.role, MessageRow.payload, MessageRow.search_text, MessageRow.tokens,
                  MessageRow.created_at, MessageRow.compacted, MessageRow.origin, MessageRow.author,
                  MessageRow.prepared)


def active_rows_query(session_id: str) -> Select[Any]:
    """The session's active rows in sequence order."""
    return (select(*STORED_COLUMNS)
            .where(MessageRow.session_id == session_id, ACTIVE_ROW)
            .order_by(MessageRow.seq))


async def active_rows(conn: AsyncConnection, session_id: str) -> list[Row[Any]]:
    """The session's active rows in sequence order."""
    return list(await conn.execute(active_rows_query(session_id)))


def stored(row: Row[Any]) -> StoredRow:
    """A selected message row as a copyable `StoredRow`."""
    return StoredRow(role=row.role, payload=row.payload, search_text=row.search_text, tokens=row.tokens,
                     created_at=row.created_at, compacted=row.compacted, origin=row.origin, author=row.author,
                     prepared=row.prepared)


async def archive_active(conn: AsyncConnection, session_id: str, number: int, at: datetime) -> None:
    """Mark every active row of the session archived by replacement ``number``."""
    await conn.execute(
        update(MessageRow)
        .where(MessageRow.session_id == session_id, ACTIVE_ROW)
        .values(active=False, archived_at=at, archived_by=number))


async def lock_session(conn: AsyncConnection, session_id: str, *, open_only: bool = True) -> Row[Any]:
    """Read the session row for update (row lock on PostgreSQL; SQLite's write transaction already locks)."""
    row = (await conn.execute(
        select(SessionRow).where(SessionRow.id == session_id).with_for_update())).first()
    if row is None:
        raise SessionNotFound(session_id)
    if open_only and row.ended_at is not None:
        raise SessionEnded(f"session {session_id} ended ({row.end_reason})")
    return row


def engine_values(state: EngineState) -> dict[str, Any]:
    """Column values for an `EngineState`."""
    return {
        "last_prompt_tokens": state.last_prompt_tokens, "previous_summary": state.previous_summary,
        "compression_count": state.compression_count, "ineffective_count": state.ineffective_count,
        "cooldown_until": state.cooldown_until, "context_length": state.context_length,
        "last_compaction": state.last_compaction.to_json() if state.last_compaction else None,
    }


def session_record(row: Row[Any] | Any) -> SessionRecord:
    """A sessions row as a `SessionRecord`."""
    return SessionRecord(
        id=row.id, platform=row.platform, chat_key=row.chat_key, title=row.title, goal=row.goal,
        parent_session_id=row.parent_session_id, started_at=row.started_at, last_active_at=row.last_active_at,
        ended_at=row.ended_at, end_reason=row.end_reason, message_count=row.message_count,
        token_count=row.token_count, compactions=row.compactions,
        engine=EngineState(
            last_prompt_tokens=row.last_prompt_tokens, previous_summary=row.previous_summary,
            compression_count=row.compression_count, ineffective_count=row.ineffective_count,
            cooldown_until=row.cooldown_until, context_length=row.context_length,
            last_compaction=CompactionInfo.from_json(row.last_compaction),
        ),
    )


# What `message_record` reads: every column but the search text (a second copy of a long message's text).
RECORD_COLUMNS = (MessageRow.session_id, MessageRow.seq, MessageRow.role, MessageRow.payload, MessageRow.tokens,
                  MessageRow.created_at, MessageRow.active, MessageRow.archived_at, MessageRow.archived_by,
                  MessageRow.compacted)


def message_record(row: Row[Any]) -> MessageRecord:
    """A messages row as a `MessageRecord`."""
    return MessageRecord(
        session_id=row.session_id, seq=row.seq, role=row.role, message=decode(row.payload), tokens=row.tokens,
        created_at=row.created_at, active=row.active, archived_at=row.archived_at,
        archived_by=row.archived_by, compacted=row.compacted)


def new_session_values(session_id: str, platform: str, chat_key: str, at: datetime, *, title: str | None,
                       goal: str | None, parent_session_id: str | None, state: EngineState) -> dict[str, Any]:
    """Every column of a fresh session row."""
    return {
        "id": session_id, "platform": platform, "chat_key": chat_key, "title": title, "goal": goal,
        "parent_session_id": parent_session_id, "started_at": at, "last_active_at": at, "ended_at": None,
        "end_reason": None, "last_seq": 0, "generation_seq": 0, "compactions": 0, "message_count": 0,
        "token_count": 0, **engine_values(state),
    }
