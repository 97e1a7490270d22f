"""Message rows: appending, the active set with its watermark, export."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import (
    active_rows,
    check_batch,
    decode,
    encoded_rows,
    engine_values,
    insert_rows,
    message_record,
    utcnow,
)
from gateway.store.database import read, write
from gateway.store.errors import SessionEnded, SessionNotFound
from gateway.store.models import MessageRow, SessionRow
from gateway.store.records import ActiveSet, EngineState, MessageRecord

__all__ = ["MessageRepository"]


class MessageRepository:
    """Appends and reads of a session's messages. Sequences only grow; rows are never deleted."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def append(self, session_id: str, messages: Sequence[Mapping[str, Any]],
                     token_counts: Sequence[int], *, engine_state: EngineState | None = None,
                     state_watermark: int | None = None) -> int:
        """Append messages (with their exact token counts) to the active set; return the last sequence.

        The counter update comes first: it takes the session's row lock, so appends and compactions of one
        session are strictly ordered, and the session's counters never drift from its rows. ``engine_state``,
        when given, is saved in the same transaction (one round trip per turn instead of two) — with
        ``state_watermark``, only if the active set was not replaced after that watermark was read (another
        process's compaction then wrote the state that goes with its summary; an older one must not replace it).
        """
        check_batch(messages, token_counts)
        at = utcnow()
        rows = encoded_rows(messages, token_counts, at)
        async with write(self._engine) as conn:
            last = (await conn.execute(
                update(SessionRow).where(SessionRow.id == session_id, SessionRow.ended_at.is_(None))
                .values(last_seq=SessionRow.last_seq + len(rows),
                        message_count=SessionRow.message_count + len(rows),
                        token_count=SessionRow.token_count + sum(r.tokens for r in rows),
                        last_active_at=at,
                        **(engine_values(engine_state) if engine_state is not None and state_watermark is None
                           else {}))
                .returning(SessionRow.last_seq))).scalar_one_or_none()
            if last is None:
                exists = (await conn.execute(
                    select(SessionRow.end_reason).where(SessionRow.id == session_id))).first()
                if exists is None:
                    raise SessionNotFound(session_id)
                raise SessionEnded(f"session {session_id} ended ({exists.end_reason})")
            if engine_state is not None and state_watermark is not None:
                await conn.execute(update(SessionRow).where(SessionRow.id == session_id,
                                                            SessionRow.generation_seq <= state_watermark)
                                   .values(engine_values(engine_state)))
            await insert_rows(conn, session_id, last - len(rows) + 1, rows)
        return int(last)

    async def load_active(self, session_id: str) -> ActiveSet:
        """The active messages in order, read in one snapshot with the watermark (the last sequence)."""
        async with read(self._engine) as conn:
            watermark = (await conn.execute(
                select(SessionRow.last_seq).where(SessionRow.id == session_id))).scalar_one_or_none()
            if watermark is None:
                raise SessionNotFound(session_id)
            rows = await active_rows(conn, session_id)
        return ActiveSet(session_id=session_id, messages=[decode(r.payload) for r in rows],
                         token_counts=[r.tokens for r in rows], watermark=int(watermark))

    async def count_active(self, session_id: str) -> int:
        """Number of active messages (from the session's counter)."""
        async with read(self._engine) as conn:
            count = (await conn.execute(
                select(SessionRow.message_count).where(SessionRow.id == session_id))).scalar_one_or_none()
        if count is None:
            raise SessionNotFound(session_id)
        return int(count)

    async def export(self, session_id: str, *, include_archived: bool = False) -> list[MessageRecord]:
        """Messages in sequence order: the active set, or every row ever stored for the session."""
        query = select(MessageRow).where(MessageRow.session_id == session_id)
        if not include_archived:
            query = query.where(MessageRow.active.is_(True))
        async with read(self._engine) as conn:
            if (await conn.execute(select(SessionRow.id).where(SessionRow.id == session_id))).first() is None:
                raise SessionNotFound(session_id)
            return [message_record(r) for r in await conn.execute(query.order_by(MessageRow.seq))]
