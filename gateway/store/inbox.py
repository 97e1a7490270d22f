"""The inbox's rows (`gateway.intake.inbox`): messages kept from receipt until handled, and the store's record of how
far each message's handling got.

`keep` writes a fetched batch in one transaction (a key already there, a message delivered twice, is left as it
is). `settle` marks a message handled inside the transaction that stores what handling it produced
(`MessageRepository.append`, `CompactionRepository.replace_active`, `SessionRepository.save_engine_state`, or
`mark_handled` alone): the row is created when the message was never kept (its platform redelivers by itself),
and the answer of that handling is written to the delivery ledger in the same transaction, its id kept on the
row. A mark is written once: a transaction that finds the message marked already rolls back with
`AlreadyStored` — the retry of a COMMIT whose answer was lost learns that it did commit, and stores nothing
twice. `advance` does the same for the steps a handling stores before its mark (``progress``: a turn's
messages a compaction stored mid-turn, a command that began changing something), each one a compare-and-set
from the progress its attempt read. `claim_stale` hands each row a dead worker left unhandled to one worker
only: one UPDATE over a sub-select that PostgreSQL locks with ``FOR UPDATE SKIP LOCKED`` (on SQLite the
database's write lock serializes the claimers).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import utcnow
from gateway.store.database import read, run_read, run_write
from gateway.store.deliveries import insert_answer
from gateway.store.errors import AlreadyStored
from gateway.store.models import InboxRow
from gateway.store.records import Handled, Handling, InboxEntry, InboxRecord, Progress

__all__ = ["InboxRepository", "advance", "handling", "settle", "settle_lines"]

# Bound parameters per statement stay far below every driver's limit.
_KEYS_PER_STATEMENT = 500


# Statements of every message's path, built once with their values bound at execution.
_HANDLING = select(InboxRow.handled_at, InboxRow.progress, InboxRow.answer_id).where(InboxRow.key == bindparam("key"))


def handling(conn: Connection, key: str) -> Handling:
    """How far the handling of message ``key`` got (nothing stored, or pruned: a fresh `Handling`), read on
    ``conn``."""
    row = conn.execute(_HANDLING, {"key": key}).first()
    if row is None:
        return Handling()
    return Handling(handled=row.handled_at is not None, progress=row.progress, answer_id=row.answer_id)


@functools.cache
def _settle_statement(dialect: str) -> Any:
    """Insert the handled mark, or set it on a row not marked yet; the row's key when it was marked now (an
    earlier mark stands, and then nothing comes back)."""
    insert = _insert(dialect)
    return insert.on_conflict_do_update(
        index_elements=["key"], set_={"handled_at": insert.excluded.handled_at, "answer_id": insert.excluded.answer_id},
        where=InboxRow.handled_at.is_(None)).returning(InboxRow.key)


@functools.cache
def _advance_statement(dialect: str) -> Any:
    """Insert the row at a progress, or move an unhandled row's progress on from the one its step read."""
    insert = _insert(dialect)
    return insert.on_conflict_do_update(
        index_elements=["key"], set_={"progress": insert.excluded.progress},
        where=and_(InboxRow.handled_at.is_(None), InboxRow.progress == bindparam("start"))).returning(InboxRow.id)


def _record(row: Any) -> InboxRecord:
    return InboxRecord(id=row.id, key=row.key, platform=row.platform, session_key=row.session_key,
                       payload=row.payload, received_at=row.received_at, claimed_by=row.claimed_by,
                       claimed_at=row.claimed_at, handled_at=row.handled_at)


def _insert(dialect: str) -> Any:
    """An INSERT into the inbox that can say what to do on a key already there (dialect-specific)."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(InboxRow)


def _mark_values(handled: Handled, at: datetime, answer_id: int | None) -> dict[str, Any]:
    return {"key": handled.key, "platform": handled.platform, "session_key": handled.session_key, "payload": None,
            "received_at": at, "handled_at": at, "progress": 0, "answer_id": answer_id}


def settle(conn: Connection, handled: Handled, at: datetime) -> None:
    """Inside a write transaction: mark ``handled`` handled as of ``at`` and store its answer, pending.

    Raises `AlreadyStored` when the message was marked handled already: the caller's transaction then rolls
    back, so what it was about to store with the mark (a turn, an answer) is not stored a second time.
    """
    answer_id = insert_answer(conn, handled.answer, at) if handled.answer is not None else None
    if conn.execute(_settle_statement(conn.dialect.name), _mark_values(handled, at, answer_id)).first() is None:
        raise AlreadyStored(handled.key, handling(conn, handled.key))


def settle_lines(conn: Connection, lines: Sequence[Handled], at: datetime) -> set[str]:
    """Inside a write transaction: mark every one of ``lines`` handled that is not marked yet; their keys (the
    others were stored by an earlier write: the caller leaves them out)."""
    ordered = sorted(lines, key=lambda line: line.key)  # one lock order for every writer of these rows
    statement = _settle_statement(conn.dialect.name)
    return {key for line in ordered
            if (key := conn.execute(statement, _mark_values(line, at, None)).scalar_one_or_none()) is not None}


def advance(conn: Connection, step: Progress, at: datetime) -> None:
    """Inside a write transaction: move the message's progress from ``step.start`` to ``step.to``. Raises
    `AlreadyStored` (the caller's transaction rolls back) when the stored progress is not ``step.start`` or
    the message is marked handled: an earlier attempt stored this step, or the whole handling."""
    values = {"key": step.key, "platform": step.platform, "session_key": step.session_key, "payload": None,
              "received_at": at, "progress": step.to, "start": step.start}
    if conn.execute(_advance_statement(conn.dialect.name), values).first() is None:
        raise AlreadyStored(step.key, handling(conn, step.key))


class InboxRepository:
    """Kept messages, their claims by workers, and their handled marks."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def keep(self, entries: Sequence[InboxEntry], claimed_by: str, at: datetime | None = None, *,
                   unclaimed: Sequence[InboxEntry] = ()) -> int:
        """Store a fetched batch, claimed by ``claimed_by``, in one transaction — with ``unclaimed``, rows no
        worker holds (the next recovery claims them); how many rows were new."""
        if not entries and not unclaimed:
            return 0
        at = at or utcnow()
        rows = [{"key": e.key, "platform": e.platform, "session_key": e.session_key, "payload": e.payload,
                 "received_at": e.received_at, "claimed_by": claimer, "claimed_at": claimed_at}
                for group, claimer, claimed_at in ((entries, claimed_by, at), (unclaimed, None, None))
                for e in group]

        def transaction(conn: Connection) -> int:
            return int(conn.execute(_insert(conn.dialect.name).values(rows).on_conflict_do_nothing(index_elements=["key"]))
                       .rowcount or 0)

        return await run_write(self._engine, transaction)

    async def handling(self, key: str) -> Handling:
        """How far the handling of message ``key`` got (see `Handling`)."""
        return await run_read(self._engine, lambda conn: handling(conn, key))

    async def mark_handled(self, handled: Handled) -> None:
        """Mark a message handled, with its answer, in a transaction of its own; raises `AlreadyStored` (and
        stores no answer) when it was marked already."""
        await run_write(self._engine, lambda conn: settle(conn, handled, utcnow()))

    async def advance(self, step: Progress) -> None:
        """Store a progress step of its own (`advance`); raises `AlreadyStored` as that does."""
        await run_write(self._engine, lambda conn: advance(conn, step, utcnow()))

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
        """Forget messages handled before ``handled_before``, and the progress rows of messages never kept that
        no retry finished by then (their platform gave up redelivering); how many."""
        query = delete(InboxRow).where(or_(
            InboxRow.handled_at < handled_before,
            and_(InboxRow.handled_at.is_(None), InboxRow.payload.is_(None), InboxRow.received_at < handled_before)))
        return await run_write(self._engine, lambda conn: int(conn.execute(query).rowcount or 0))

    async def get(self, key: str) -> InboxRecord | None:
        """One row by its message key, or None."""
        async with read(self._engine) as conn:
            row = (await conn.execute(select(InboxRow).where(InboxRow.key == key))).first()
        return _record(row) if row else None
