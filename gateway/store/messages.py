"""Message rows: appending, the active set with its watermark, export."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import (
    RECORD_COLUMNS,
    check_batch,
    decode,
    encoded_rows,
    engine_values,
    message_record,
    message_values,
    utcnow,
)
from gateway.store.database import read, run_read, run_write
from gateway.store.errors import SessionEnded, SessionNotFound
from gateway.store.inbox import advance, settle, settle_lines
from gateway.store.models import ACTIVE_ROW, MessageRow, SessionRow
from gateway.store.records import ActiveSet, EngineState, Handled, MessageRecord, PreparedRecord, Progress

__all__ = ["MessageRepository"]

_SESSIONS = SessionRow.__table__.c
_STATE_COLUMNS = tuple(engine_values(EngineState()))


def _state_params(state: EngineState) -> dict[str, Any]:
    return {f"state_{column}": value for column, value in engine_values(state).items()}


def _state_binds() -> dict[str, Any]:
    """The engine-state columns set from the parameters `_state_params` names."""
    return {c: bindparam(f"state_{c}", type_=_SESSIONS[c].type) for c in _STATE_COLUMNS}


def _bump(with_state: bool) -> Any:
    """The counter update that opens every append (with the engine state saved in it, or not): built once,
    values bound at execution (building it costs several times what running it on SQLite does)."""
    added, at = bindparam("added"), bindparam("at", type_=_SESSIONS.last_active_at.type)
    values: dict[str, Any] = {"last_seq": SessionRow.last_seq + added,
                              "message_count": SessionRow.message_count + added,
                              "token_count": SessionRow.token_count + bindparam("tokens"), "last_active_at": at}
    if with_state:
        values.update(_state_binds())
    return (update(SessionRow).where(SessionRow.id == bindparam("session_id"), SessionRow.ended_at.is_(None))
            .values(**values).returning(SessionRow.last_seq))


_BUMP, _BUMP_WITH_STATE = _bump(False), _bump(True)
# The engine state of a turn whose read watermark is still current (no compaction replaced the set since).
_STATE_IF_CURRENT = (update(SessionRow)
                     .where(SessionRow.id == bindparam("session_id"),
                            SessionRow.generation_seq <= bindparam("watermark"))
                     .values(_state_binds()))
_INSERT_MESSAGES = insert(MessageRow)
_ACTIVE_MESSAGES = (select(MessageRow.payload, MessageRow.tokens)
                    .where(MessageRow.session_id == bindparam("owner"), ACTIVE_ROW).order_by(MessageRow.seq))
_ACTIVE_PREPARED = (select(MessageRow.prepared)
                    .where(MessageRow.session_id == bindparam("owner"), ACTIVE_ROW,
                           MessageRow.seq <= bindparam("watermark"))
                    .order_by(MessageRow.seq))
# A prepared record is kept only with the message it was made from (an erasure may have rewritten the row since).
_KEEP_PREPARED = (update(MessageRow)
                  .where(MessageRow.session_id == bindparam("owner"), MessageRow.seq == bindparam("number"),
                         MessageRow.payload == bindparam("made_from"))
                  .values(prepared=bindparam("record")))


def _closed(conn: Connection, session_id: str) -> NoReturn:
    """Raise why an append found no open session ``session_id``: it ended, or never existed."""
    exists = conn.execute(select(SessionRow.end_reason).where(SessionRow.id == session_id)).first()
    if exists is None:
        raise SessionNotFound(session_id)
    raise SessionEnded(f"session {session_id} ended ({exists.end_reason})")


class MessageRepository:
    """Appends and reads of a session's messages. Sequences only grow; rows are never deleted."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def append(self, session_id: str, messages: Sequence[Mapping[str, Any]],
                     token_counts: Sequence[int], *, engine_state: EngineState | None = None,
                     state_watermark: int | None = None, handled: Handled | None = None,
                     progress: Progress | None = None, prepared: Sequence[PreparedRecord] = ()) -> int:
        """Append messages (with their exact token counts) to the active set; return the last sequence.

        The counter update comes first: it takes the session's row lock, so appends and compactions of one
        session are strictly ordered, and the session's counters never drift from its rows. ``engine_state``,
        when given, is saved in the same transaction (one round trip per turn instead of two) — with
        ``state_watermark``, only if the active set was not replaced after that watermark was read (another
        process's compaction then wrote the state that goes with its summary; an older one must not replace it).
        ``handled`` (a turn's inbound message and its answer) is settled in the same transaction, and so is
        ``progress`` (the turn's messages stored ahead of its end); either raises `AlreadyStored` when an
        earlier attempt stored it, and then nothing is appended. ``prepared`` (what the context engine prepared
        for messages stored earlier) is kept with those rows in the same transaction: no write of its own.
        """
        check_batch(messages, token_counts)
        at = utcnow()
        rows = encoded_rows(messages, token_counts, at)
        with_state = engine_state is not None and state_watermark is None
        bump = _BUMP_WITH_STATE if with_state else _BUMP
        params = {"session_id": session_id, "added": len(rows), "tokens": sum(r.tokens for r in rows), "at": at,
                  **(_state_params(engine_state) if engine_state is not None else {})}

        def transaction(conn: Connection) -> int:
            last = conn.execute(bump, params).scalar_one_or_none()
            if last is None:
                _closed(conn, session_id)
            if engine_state is not None and state_watermark is not None:
                conn.execute(_STATE_IF_CURRENT, {**params, "watermark": state_watermark})
            if rows:
                conn.execute(_INSERT_MESSAGES, message_values(session_id, last - len(rows) + 1, rows))
            if handled is not None:
                settle(conn, handled, at)
            if progress is not None:
                advance(conn, progress, at)
            if prepared:
                conn.execute(_KEEP_PREPARED, [{"owner": session_id, "number": p.seq, "made_from": p.payload,
                                               "record": p.record} for p in prepared])
            return int(last)

        return await run_write(self._engine, transaction)

    async def append_lines(self, session_id: str, lines: Sequence[tuple[Handled, Mapping[str, Any]]],
                           token_counts: Sequence[int]) -> tuple[int, set[str]]:
        """Append inbound messages that need no answer (observed group lines), each marked handled in the same
        transaction; one an earlier write stored already (its mark is there) is left out. Returns the last
        sequence and the keys of the lines appended now."""
        check_batch([message for _, message in lines], token_counts)
        at = utcnow()
        rows = encoded_rows([message for _, message in lines], token_counts, at)

        def transaction(conn: Connection) -> tuple[int, set[str]]:
            marked = settle_lines(conn, [mark for mark, _ in lines], at)
            fresh, new = set(marked), []
            for (mark, _), row in zip(lines, rows, strict=True):
                if mark.key in fresh:  # a line the batch holds twice is appended once
                    fresh.remove(mark.key)
                    new.append(row)
            last = conn.execute(_BUMP, {"session_id": session_id, "added": len(new),
                                        "tokens": sum(r.tokens for r in new), "at": at}).scalar_one_or_none()
            if last is None:
                _closed(conn, session_id)
            if new:
                conn.execute(_INSERT_MESSAGES, message_values(session_id, last - len(new) + 1, new))
            return int(last), marked

        return await run_write(self._engine, transaction)

    async def load_active(self, session_id: str) -> ActiveSet:
        """The active messages in order, read in one snapshot with the watermark (the last sequence)."""

        def transaction(conn: Connection) -> tuple[int | None, list[Any]]:
            watermark = conn.execute(select(SessionRow.last_seq).where(SessionRow.id == session_id)).scalar_one_or_none()
            return watermark, [] if watermark is None else list(conn.execute(_ACTIVE_MESSAGES, {"owner": session_id}))

        watermark, rows = await run_read(self._engine, transaction)
        if watermark is None:
            raise SessionNotFound(session_id)
        return ActiveSet(session_id=session_id, messages=[decode(r.payload) for r in rows],
                         token_counts=[r.tokens for r in rows], watermark=int(watermark))

    async def prepared_of_active(self, session_id: str, watermark: int) -> list[str | None]:
        """What the context engine prepared for each active message up to sequence ``watermark`` (an
        `ActiveSet`'s), in order; None for a message nothing was kept for."""
        async with read(self._engine) as conn:
            return list((await conn.execute(_ACTIVE_PREPARED, {"owner": session_id, "watermark": watermark}))
                        .scalars())

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
            query = query.where(ACTIVE_ROW)
        async with read(self._engine) as conn:
            if (await conn.execute(select(SessionRow.id).where(SessionRow.id == session_id))).first() is None:
                raise SessionNotFound(session_id)
            return [message_record(r) for r in await conn.execute(query.order_by(MessageRow.seq))]

    async def around(self, session_ids: Sequence[str], seq: int, *, before: int = 0,
                     after: int = 0) -> list[MessageRecord]:
        """Message ``seq`` of the first of ``session_ids`` that has it, with up to ``before`` / ``after`` of
        that session's stored rows on either side (archived or active), in sequence order; [] if none has it.

        Rows are never looked up outside ``session_ids``: the caller decides what a conversation may read.
        """
        ids = list(session_ids)
        if not ids:
            return []
        async with read(self._engine) as conn:
            owners = {r.session_id for r in await conn.execute(
                select(MessageRow.session_id).where(MessageRow.session_id.in_(ids), MessageRow.seq == seq))}
            owner = next((i for i in ids if i in owners), None)
            if owner is None:
                return []
            mine = select(*RECORD_COLUMNS).where(MessageRow.session_id == owner)
            earlier = list(await conn.execute(
                mine.where(MessageRow.seq < seq).order_by(MessageRow.seq.desc()).limit(before))) if before else []
            rest = list(await conn.execute(
                mine.where(MessageRow.seq >= seq).order_by(MessageRow.seq).limit(after + 1)))
        return [message_record(r) for r in (*reversed(earlier), *rest)]

    async def number_of(self, origin: str) -> int | None:
        """The number the store gave message ``origin`` (`MessageOrigin`): that of the first row holding it (later
        ones are copies, or corrections of it); None when no row does."""
        query = select(MessageRow.seq).where(MessageRow.origin == origin).order_by(MessageRow.id).limit(1)
        async with read(self._engine) as conn:
            return (await conn.execute(query)).scalar_one_or_none()
