"""The inbox's rows (`gateway.inbox`): messages kept from receipt until handled, and the store's record that a
message was handled.

`keep` writes a fetched batch in one transaction (a key already there, a message delivered twice, is left as it
is). `settle` marks a message handled inside the transaction that stores what handling it produced
(`MessageRepository.append`, `CompactionRepository.replace_active`, `SessionRepository.save_engine_state`, or
`mark_handled` alone): the row is created when the message was never kept (its platform redelivers by itself),
and the answer of that handling is written to the delivery ledger in the same transaction. `claim_stale` hands
each row a dead worker left unhandled to one worker only: one UPDATE over a sub-select that PostgreSQL locks
with ``FOR UPDATE SKIP LOCKED`` (on SQLite the database's write lock serializes the claimers).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import utcnow
from gateway.store.database import read, run_read, run_write
from gateway.store.deliveries import insert_answer
from gateway.store.models import InboxRow
from gateway.store.records import Handled, InboxEntry, InboxRecord

__all__ = ["InboxRepository", "is_handled", "settle"]

# Bound parameters per statement stay far below every driver's limit.
_KEYS_PER_STATEMENT = 500


# Statements of every message's path, built once with their values bound at execution.
_HANDLED = select(InboxRow.id).where(InboxRow.key == bindparam("key"), InboxRow.handled_at.is_not(None))


def is_handled(conn: Connection, key: str) -> bool:
    """Whether the message ``key`` was marked handled (and not pruned yet), read on ``conn``."""
    return conn.execute(_HANDLED, {"key": key}).first() is not None


@functools.cache
def _settle_statement(dialect: str) -> Any:
    """Insert the handled mark, or set it on a kept row not marked yet (an earlier mark stands)."""
    insert = _insert(dialect)
    return insert.on_conflict_do_update(index_elements=["key"], set_={"handled_at": insert.excluded.handled_at},
                                        where=InboxRow.handled_at.is_(None))


def _record(row: Any) -> InboxRecord:
    return InboxRecord(id=row.id, key=row.key, platform=row.platform, session_key=row.session_key,
                       payload=row.payload, received_at=row.received_at, claimed_by=row.claimed_by,
                       claimed_at=row.claimed_at, handled_at=row.handled_at)


def _insert(dialect: str) -> Any:
    """An INSERT into the inbox that can say what to do on a key already there (dialect-specific)."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(InboxRow)


def settle(conn: Connection, handled: Handled, at: datetime) -> None:
    """Inside a write transaction: mark ``handled`` handled as of ``at`` (an earlier mark stands) and store its
    answer, pending."""
    conn.execute(_settle_statement(conn.dialect.name), {
        "key": handled.key, "platform": handled.platform, "session_key": handled.session_key, "payload": None,
        "received_at": at, "handled_at": at})
    if handled.answer is not None:
        insert_answer(conn, handled.answer, at)


class InboxRepository:
    """Kept messages, their claims by workers, and their handled marks."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def keep(self, entries: Sequence[InboxEntry], claimed_by: str, at: datetime | None = None) -> int:
        """Store a fetched batch, claimed by ``claimed_by``, in one transaction; how many rows were new."""
        if not entries:
            return 0
        at = at or utcnow()

        def transaction(conn: Connection) -> int:
            rows = [{"key": e.key, "platform": e.platform, "session_key": e.session_key, "payload": e.payload,
                     "received_at": e.received_at, "claimed_by": claimed_by, "claimed_at": at} for e in entries]
            return int(conn.execute(_insert(conn.dialect.name).values(rows).on_conflict_do_nothing(index_elements=["key"]))
                       .rowcount or 0)

        return await run_write(self._engine, transaction)

    async def handled(self, key: str) -> bool:
        """Whether the message ``key`` was marked handled (and not pruned yet)."""
        return await run_read(self._engine, lambda conn: is_handled(conn, key))

    async def mark_handled(self, handled: Handled) -> None:
        """Mark a message handled in a transaction of its own."""
        await run_write(self._engine, lambda conn: settle(conn, handled, utcnow()))

    async def renew(self, claimed_by: str, keys: Sequence[str], at: datetime | None = None) -> int:
        """``claimed_by`` still holds the messages ``keys``: those of them unhandled and claimed by it are
        claimed as of ``at``; how many."""
        at = at or utcnow()
        keys = list(keys)

        def transaction(conn: Connection) -> int:
            renewed = 0
            for start in range(0, len(keys), _KEYS_PER_STATEMENT):
                renewed += int(conn.execute(update(InboxRow).where(
                    InboxRow.claimed_by == claimed_by, InboxRow.handled_at.is_(None),
                    InboxRow.key.in_(keys[start:start + _KEYS_PER_STATEMENT])).values(claimed_at=at)).rowcount or 0)
            return renewed

        return await run_write(self._engine, transaction)

    async def claim_stale(self, older_than: datetime, claimed_by: str, *, platforms: Sequence[str],
                          limit: int = 100, at: datetime | None = None) -> list[InboxRecord]:
        """Unhandled kept messages on ``platforms`` whose claim was last renewed before ``older_than``, oldest
        first, each now claimed by ``claimed_by`` alone."""
        stale = (InboxRow.handled_at.is_(None), InboxRow.payload.is_not(None), InboxRow.platform.in_(platforms),
                 or_(InboxRow.claimed_at.is_(None), InboxRow.claimed_at < older_than))
        pick = select(InboxRow.id).where(*stale).order_by(InboxRow.received_at, InboxRow.id).limit(limit) \
            .with_for_update(skip_locked=True)
        # The outer conditions again: PostgreSQL re-checks them on a row another claimer changed meanwhile.
        query = update(InboxRow).where(InboxRow.id.in_(pick), *stale) \
            .values(claimed_by=claimed_by, claimed_at=at or utcnow()).returning(*InboxRow.__table__.c)
        rows = await run_write(self._engine, lambda conn: list(conn.execute(query)))
        return sorted((_record(r) for r in rows), key=lambda r: (r.received_at, r.id))

    async def prune(self, handled_before: datetime) -> int:
        """Forget messages handled before ``handled_before``; how many."""
        query = delete(InboxRow).where(InboxRow.handled_at < handled_before)
        return await run_write(self._engine, lambda conn: int(conn.execute(query).rowcount or 0))

    async def get(self, key: str) -> InboxRecord | None:
        """One row by its message key, or None."""
        async with read(self._engine) as conn:
            row = (await conn.execute(select(InboxRow).where(InboxRow.key == key))).first()
        return _record(row) if row else None
