"""Replacing a session's active set in one transaction: compaction (R-S2), restore, and rotation (R-S3).

Nothing is ever deleted. A replacement numbered N marks every active row ``archived_by = N`` and inserts the
new active set with fresh, higher sequences; so the rows archived by N are exactly the active set that N
replaced, which is what ``restore(before_compaction=N)`` brings back. Rows appended after the caller's
watermark (while its summary was being written) are copied after the new set, their originals archived
with the rest — the order of the conversation is kept and no message is lost.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Row, Select, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gateway.store._rows import (
    STORED_COLUMNS,
    StoredRow,
    active_rows,
    archive_active,
    check_batch,
    encoded_rows,
    engine_values,
    insert_rows,
    lock_session,
    new_session_id,
    new_session_values,
    session_record,
    stored,
    utcnow,
)
from gateway.store.database import read, write
from gateway.store.errors import CompactionNotFound, StaleWatermark
from gateway.store.inbox import settle
from gateway.store.models import CompactionRow, MessageRow, SessionRow
from gateway.store.records import CompactionInfo, CompactionRecord, EngineState, Handled, SessionRecord

__all__ = ["CompactionRepository", "replace_set"]


def _check_watermark(session: Row[Any], watermark_seq: int) -> None:
    if watermark_seq > session.last_seq:
        raise ValueError(f"watermark {watermark_seq} is beyond the session's last sequence {session.last_seq}")
    if watermark_seq < session.generation_seq:
        raise StaleWatermark(f"session {session.id}: the active set was replaced after sequence "
                             f"{watermark_seq} was read; reload and retry")


def _info(reason: str, before: Sequence[Row[Any]], after: Sequence[StoredRow], number: int | None,
          state: EngineState | None) -> CompactionInfo:
    if state is not None and state.last_compaction is not None:
        return dataclasses.replace(state.last_compaction, number=number, active_after=len(after))
    return CompactionInfo(at=utcnow(), reason=reason, tokens_before=sum(r.tokens for r in before),
                          tokens_after=sum(r.tokens for r in after), messages_before=len(before),
                          messages_after=len(after), number=number, active_after=len(after))


def _row_columns() -> Select[Any]:
    return select(*STORED_COLUMNS)


async def _later_turns(conn: AsyncConnection, session_id: str, number: int) -> list[Row[Any]]:
    """The rows appended to the conversation after replacement ``number`` committed, oldest first.

    Only originals: the copies a later replacement K inserted are skipped. K burned the sequence just above
    the newest row it archived and inserted its ``messages_after`` rows right above that, so its copies are
    the sequences in (top_K + 1, top_K + 1 + messages_after_K].
    """
    tops = dict((await conn.execute(
        select(MessageRow.archived_by, func.max(MessageRow.seq))
        .where(MessageRow.session_id == session_id, MessageRow.archived_by >= number)
        .group_by(MessageRow.archived_by))).all())
    sizes = dict((await conn.execute(
        select(CompactionRow.number, CompactionRow.messages_after)
        .where(CompactionRow.session_id == session_id, CompactionRow.number >= number))).all())
    if number not in tops:
        return []  # compaction N replaced an empty set: there is no boundary to count from
    copies = [range(tops[k] + 2, tops[k] + 2 + sizes[k]) for k in sizes if k > number and k in tops]
    rows = await conn.execute(_row_columns()
                              .where(MessageRow.session_id == session_id,
                                     MessageRow.seq > tops[number] + 1 + sizes[number])
                              .order_by(MessageRow.seq))
    return [r for r in rows if not any(r.seq in span for span in copies)]


def _keeping_preparations(new_rows: list[StoredRow], before: Sequence[Row[Any]]) -> list[StoredRow]:
    """``new_rows``, each that holds a message of ``before`` (a compaction's verbatim tail, a rebuilt set)
    keeping what the context engine prepared for that message, so it is not prepared again after a restart."""
    kept = {r.payload: r.prepared for r in before if r.prepared is not None}
    if not kept:
        return new_rows
    return [dataclasses.replace(r, prepared=kept[r.payload]) if r.prepared is None and r.payload in kept else r
            for r in new_rows]


async def replace_set(conn: AsyncConnection, session: Row[Any], new_rows: list[StoredRow], *, reason: str,
                      watermark: int, engine_state: EngineState | None, record_info: bool = True) -> int:
    """Inside a write transaction holding ``session``'s row: archive its active set as replacement N and make
    ``new_rows`` (then the rows appended after ``watermark``) the active set, with fresh sequences above a burned
    generation marker; return N. ``record_info=False`` leaves the session's last compaction as it was (a
    replacement that compacted nothing)."""
    before = await active_rows(conn, session.id)
    carried = [stored(r) for r in before if r.seq > watermark]
    after = _keeping_preparations(new_rows, before) + carried
    number = session.compactions + 1
    at = utcnow()
    await archive_active(conn, session.id, number, at)
    # One sequence is burned as the generation marker: any watermark read before this commit is below it.
    generation = session.last_seq + 1
    await insert_rows(conn, session.id, generation + 1, after)
    state_values = engine_values(engine_state) if engine_state is not None else {}
    if record_info:
        state_values["last_compaction"] = _info(reason, before, after, number, engine_state).to_json()
    else:
        state_values.pop("last_compaction", None)
    await conn.execute(update(SessionRow).where(SessionRow.id == session.id).values({
        **state_values, "last_seq": generation + len(after), "generation_seq": generation,
        "compactions": number, "message_count": len(after), "token_count": sum(r.tokens for r in after)}))
    await conn.execute(insert(CompactionRow).values(
        session_id=session.id, number=number, at=at, reason=reason, watermark=watermark,
        messages_before=len(before), messages_after=len(after), tokens_before=sum(r.tokens for r in before),
        tokens_after=sum(r.tokens for r in after), carried=len(carried)))
    return number


class CompactionRepository:
    """Atomic replacements of active sets, their history, and rotation to a child session."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def replace_active(self, session_id: str, new_messages: Sequence[Mapping[str, Any]],
                             token_counts: Sequence[int], watermark_seq: int, *, reason: str = "compression",
                             engine_state: EngineState | None = None, handled: Handled | None = None) -> int:
        """Atomically make ``new_messages`` the active set; return the compaction number.

        ``watermark_seq`` is `ActiveSet.watermark` from the read the new set was computed from; rows appended
        after it are carried over after the new set. Raises `StaleWatermark` if another replacement committed
        since that read. ``engine_state``, when given, is saved in the same transaction, and so is ``handled``
        (a turn's inbound message and its answer).
        """
        check_batch(new_messages, token_counts)
        at = utcnow()
        new_rows = [dataclasses.replace(r, compacted=True) for r in encoded_rows(new_messages, token_counts, at)]
        async with write(self._engine) as conn:
            session = await lock_session(conn, session_id)
            _check_watermark(session, watermark_seq)
            number = await replace_set(conn, session, new_rows, reason=reason, watermark=watermark_seq,
                                         engine_state=engine_state)
            if handled is not None:
                await conn.run_sync(settle, handled, at)
            return number

    async def restore(self, session_id: str, before_compaction: int) -> int:
        """Make the active set that compaction N replaced active again, followed by every turn added to the
        conversation after N (the current active set is archived; nothing said since N disappears from view).

        Returns the number of this restore, itself a replacement that can be undone the same way.
        """
        async with write(self._engine) as conn:
            session = await lock_session(conn, session_id, open_only=False)
            known = (await conn.execute(select(CompactionRow.number).where(
                CompactionRow.session_id == session_id, CompactionRow.number == before_compaction))).first()
            if known is None:
                raise CompactionNotFound(f"session {session_id} has no compaction {before_compaction}")
            old = await conn.execute(_row_columns()
                                     .where(MessageRow.session_id == session_id,
                                            MessageRow.archived_by == before_compaction)
                                     .order_by(MessageRow.seq))
            restored = [stored(r) for r in old] + [stored(r) for r in await _later_turns(conn, session_id,
                                                                                         before_compaction)]
            return await replace_set(conn, session, restored, reason="restore",
                                       watermark=session.last_seq, engine_state=None)

    async def rotate(self, session_id: str, new_messages: Sequence[Mapping[str, Any]],
                     token_counts: Sequence[int], watermark_seq: int | None = None, *,
                     reason: str = "compression", engine_state: EngineState | None = None) -> SessionRecord:
        """End the session and open its child holding ``new_messages``, in one transaction (R-S3).

        The child gets ``parent_session_id``, the title and goal, and ``engine_state`` (default: the
        parent's); its sequences continue after the parent's. With ``watermark_seq``, rows appended after it are carried into the child too.
        """
        check_batch(new_messages, token_counts)
        at = utcnow()
        new_rows = [dataclasses.replace(r, compacted=True) for r in encoded_rows(new_messages, token_counts, at)]
        async with write(self._engine) as conn:
            parent = await lock_session(conn, session_id)
            carried: list[StoredRow] = []
            before = await active_rows(conn, session_id)
            if watermark_seq is not None:
                _check_watermark(parent, watermark_seq)
                carried = [stored(r) for r in before if r.seq > watermark_seq]
            after = _keeping_preparations(new_rows, before) + carried
            state = engine_state if engine_state is not None else session_record(parent).engine
            info = _info("rotation", before, after, None, engine_state)
            await conn.execute(update(SessionRow).where(SessionRow.id == session_id)
                               .values(ended_at=at, end_reason=reason))
            child_id = new_session_id(at)
            # The child numbers on from its parent, so a message number means one message in the whole
            # conversation (summaries and read_history cite numbers across rotations).
            generation = parent.last_seq + 1
            await conn.execute(insert(SessionRow).values(**{
                **new_session_values(child_id, parent.platform, parent.chat_key, at, title=parent.title,
                                     goal=parent.goal, parent_session_id=session_id,
                                     state=dataclasses.replace(state, last_compaction=info)),
                "last_seq": generation + len(after), "generation_seq": generation, "message_count": len(after),
                "token_count": sum(r.tokens for r in after)}))
            await insert_rows(conn, child_id, generation + 1, after)
            child = (await conn.execute(select(SessionRow).where(SessionRow.id == child_id))).one()
        return session_record(child)

    async def history(self, session_id: str) -> list[CompactionRecord]:
        """Every replacement of the session's active set, oldest first."""
        async with read(self._engine) as conn:
            rows = await conn.execute(select(CompactionRow).where(CompactionRow.session_id == session_id)
                                      .order_by(CompactionRow.number))
            return [CompactionRecord(
                session_id=r.session_id, number=r.number, at=r.at, reason=r.reason, watermark=r.watermark,
                messages_before=r.messages_before, messages_after=r.messages_after,
                tokens_before=r.tokens_before, tokens_after=r.tokens_after, carried=r.carried) for r in rows]
