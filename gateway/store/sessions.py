"""Session rows: the open session per chat, ending, activity, engine state, and the sweeps' queries."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Select, bindparam, insert, select, union, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import (
    engine_values,
    lock_session,
    new_session_id,
    new_session_values,
    session_record,
    utcnow,
)
from gateway.store.database import read, run_read, write
from gateway.store.errors import SessionNotFound
from gateway.store.inbox import settle
from gateway.store.models import SessionRow
from gateway.store.records import EngineState, Handled, SessionRecord

__all__ = ["SessionRepository", "active_session", "hygiene_query"]

_OPEN = SessionRow.ended_at.is_(None)


# Read before every message: built once, with its values bound at execution (building a statement costs
# several times what running it on SQLite does).
_ACTIVE = select(SessionRow).where(SessionRow.platform == bindparam("platform"),
                                   SessionRow.chat_key == bindparam("chat_key"), _OPEN)


def active_session(conn: Connection, platform: str, chat_key: str) -> SessionRecord | None:
    """The open session of a chat, or None, read on ``conn``."""
    row = conn.execute(_ACTIVE, {"platform": platform, "chat_key": chat_key}).first()
    return session_record(row) if row else None


class SessionRepository:
    """Queries and updates on sessions. At most one OPEN session per (platform, chat_key) — a unique index."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def get(self, session_id: str) -> SessionRecord | None:
        """The session, or None."""
        query = select(SessionRow).where(SessionRow.id == session_id)
        row = await run_read(self._engine, lambda conn: conn.execute(query).first())
        return session_record(row) if row else None

    async def require(self, session_id: str) -> SessionRecord:
        """The session; raises `SessionNotFound`."""
        record = await self.get(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def get_active(self, platform: str, chat_key: str) -> SessionRecord | None:
        """The open session of a chat, or None."""
        return await run_read(self._engine, lambda conn: active_session(conn, platform, chat_key))

    async def latest_ended(self, platform: str, chat_key: str) -> SessionRecord | None:
        """The chat's most recently ended session, or None."""
        async with read(self._engine) as conn:
            row = (await conn.execute(
                select(SessionRow)
                .where(SessionRow.platform == platform, SessionRow.chat_key == chat_key,
                       SessionRow.ended_at.is_not(None))
                .order_by(SessionRow.ended_at.desc()).limit(1))).first()
        return session_record(row) if row else None

    async def get_or_create_active(self, platform: str, chat_key: str, *, title: str | None = None,
                                   goal: str | None = None) -> SessionRecord:
        """The chat's open session, created when there is none (safe against concurrent workers)."""
        existing = await self.get_active(platform, chat_key)
        if existing is not None:
            return existing
        at = utcnow()
        values = new_session_values(new_session_id(at), platform, chat_key, at, title=title, goal=goal,
                                    parent_session_id=None, state=EngineState())
        try:
            async with write(self._engine) as conn:
                await conn.execute(insert(SessionRow), values)
        except IntegrityError:
            # Another worker created it between our read and write; the unique index chose the winner.
            winner = await self.get_active(platform, chat_key)
            if winner is None:
                raise
            return winner
        return await self.require(values["id"])

    async def end(self, session_id: str, reason: str) -> SessionRecord:
        """End the session (history kept). Ending an ended session changes nothing."""
        async with write(self._engine) as conn:
            await lock_session(conn, session_id, open_only=False)
            await conn.execute(update(SessionRow).where(SessionRow.id == session_id, _OPEN)
                               .values(ended_at=utcnow(), end_reason=reason))
        return await self.require(session_id)

    async def touch(self, session_id: str, at: datetime | None = None) -> None:
        """Record activity now (or at ``at``), which postpones idle expiry."""
        await self._update(session_id, last_active_at=at or utcnow())

    async def set_details(self, session_id: str, *, title: str | None = None, goal: str | None = None) -> None:
        """Set the title and/or goal (None leaves a field unchanged)."""
        values = {k: v for k, v in (("title", title), ("goal", goal)) if v is not None}
        if values:
            await self._update(session_id, **values)

    async def save_engine_state(self, session_id: str, state: EngineState, *, handled: Handled | None = None) -> None:
        """Persist the context engine's state so a restart keeps cooldowns and anti-thrash counters; ``handled``
        (a turn's inbound message and its answer) is settled in the same transaction."""
        await self._update(session_id, handled, **engine_values(state))

    async def _update(self, session_id: str, handled: Handled | None = None, **values: Any) -> None:
        async with write(self._engine) as conn:
            result = await conn.execute(update(SessionRow).where(SessionRow.id == session_id).values(**values))
            if result.rowcount == 0:
                raise SessionNotFound(session_id)
            if handled is not None:
                await conn.run_sync(settle, handled, utcnow())

    async def list(self, *, active_only: bool = False, platform: str | None = None, limit: int = 50,
                   offset: int = 0) -> list[SessionRecord]:
        """Sessions, most recently active first (for ``concord sessions list``)."""
        query = select(SessionRow)
        if active_only:
            query = query.where(_OPEN)
        if platform is not None:
            query = query.where(SessionRow.platform == platform)
        query = query.order_by(SessionRow.last_active_at.desc(), SessionRow.id).limit(limit).offset(offset)
        async with read(self._engine) as conn:
            return [session_record(r) for r in await conn.execute(query)]

    async def list_active(self) -> list[SessionRecord]:
        """Every open session."""
        async with read(self._engine) as conn:
            return [session_record(r) for r in await conn.execute(
                select(SessionRow).where(_OPEN).order_by(SessionRow.last_active_at))]

    async def list_idle(self, older_than: datetime) -> list[SessionRecord]:
        """Open sessions whose last activity is before ``older_than`` (idle expiry; indexed)."""
        async with read(self._engine) as conn:
            return [session_record(r) for r in await conn.execute(
                select(SessionRow).where(_OPEN, SessionRow.last_active_at < older_than)
                .order_by(SessionRow.last_active_at))]

    async def list_needing_hygiene(self, token_limit: int, message_limit: int) -> list[SessionRecord]:
        """Open sessions over ``token_limit`` (exact active tokens or last real prompt) or ``message_limit``."""
        async with read(self._engine) as conn:
            return [session_record(r) for r in await conn.execute(hygiene_query(token_limit, message_limit))]


def hygiene_query(token_limit: int, message_limit: int) -> Select[Any]:
    """The hygiene sweep's query: a union of three range queries, each answered by its own partial index
    over open sessions, so its cost follows the sessions that need work, not the number of sessions."""
    over = union(*(select(SessionRow.id).where(_OPEN, condition) for condition in (
        SessionRow.token_count > token_limit,
        SessionRow.last_prompt_tokens > token_limit,
        SessionRow.message_count > message_limit,
    ))).subquery()
    return select(SessionRow).where(SessionRow.id.in_(select(over.c.id))).order_by(SessionRow.id)
