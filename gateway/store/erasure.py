"""Erasing what people wrote: the store side of a platform delete and of ``/forget``.

`gateway.conversation.erasure` decides what each row becomes (a tombstone, a text with quotes cut out, a rebuilt summary);
this module finds the rows it needs and writes the result in one transaction. Rows are rewritten in place —
active and archived alike, so neither a restore (`CompactionRepository.restore`) nor an export brings the text
back — and an open session whose active set changed is then replaced as a whole (`replace_set`, reason
``erasure``): the replacement moves its generation on, so every worker holding the old set reloads it and no
compaction computed from the old set can be stored. The messages' kept inbox payloads lose their text, and so do
the delivery ledger's answers that quoted them.

Search never finds an erased text: the full-text indexes follow every row (SQLite's triggers, PostgreSQL's
generated column). SQLite's FTS5 before 3.42 still keeps a replaced row's words in its older pages until those
are merged; rewriting the two indexes takes seconds on a large database, holding the write lock, so it is not
done per erasure: the erasure marks it due (in the same transaction), and the next hygiene sweep does it
(`purge_if_due`). From SQLite 3.42 FTS5's 'secure-delete' removes the words at once and nothing is marked.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Select, delete, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from agent.compression.summary import SUMMARY_PREFIX
from gateway.store._rows import (
    active_rows,
    lock_session,
    message_text,
    payload_of,
    session_record,
    stored,
    utcnow,
)
from gateway.store.compaction import replace_set
from gateway.store.database import read, write
from gateway.store.models import ACTIVE_ROW, ChatSettingRow, DeliveryRow, InboxRow, MessageRow, SessionRow

__all__ = ["ERASURE_REASON", "FTS_SECURE_DELETE", "ChatSession", "ErasableRow", "Erasure", "ErasureRepository", "QuotingAnswer",
           "RowRewrite"]

log = logging.getLogger(__name__)

ERASURE_REASON = "erasure"
# Bound parameters per statement stay far below every driver's limit.
_PER_STATEMENT = 400
_FTS_TABLES = ("messages_fts", "messages_trigram")
# FTS5 removes a deleted row's words from its pages at once from SQLite 3.42 on ('secure-delete').
FTS_SECURE_DELETE = sqlite3.sqlite_version_info >= (3, 42)
# The mark that an erasure left words in SQLite's full-text pages (a `ChatSettingRow`).
_PURGE_DUE = (ChatSettingRow.scope == "store", ChatSettingRow.name == "fts-purge-due")


@dataclass(frozen=True, slots=True)
class ChatSession:
    """One session of the chat being erased in: its place in the conversation's lineage and its summary state."""

    id: str
    chat_key: str
    parent_session_id: str | None
    open: bool
    previous_summary: str | None


@dataclass(frozen=True, slots=True)
class ErasableRow:
    """A stored message as an erasure reads it."""

    id: int
    session_id: str
    seq: int
    role: str
    message: dict[str, Any]
    active: bool
    created_at: datetime
    origin: str | None
    author: str | None


@dataclass(frozen=True, slots=True)
class RowRewrite:
    """What row ``id`` holds from now on (its search text is derived from it) and its token count."""

    id: int
    message: dict[str, Any]
    tokens: int


@dataclass(frozen=True, slots=True)
class QuotingAnswer:
    """A delivery-ledger answer whose text holds an erased text."""

    id: int
    text: str


@dataclass
class Erasure:
    """Everything one erasure writes: the rows' new contents, the sessions' new previous summaries (the engine
    state a compaction continues from), the message keys whose kept inbox payloads go (with those of their edits
    and deletion), and the ledger answers' new texts."""

    rows: list[RowRewrite] = field(default_factory=list)
    summaries: dict[str, str] = field(default_factory=dict)
    inbox_keys: list[str] = field(default_factory=list)
    answers: list[QuotingAnswer] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to write."""
        return not (self.rows or self.summaries or self.inbox_keys or self.answers)


def _escaped(fragment: str) -> str:
    return fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _like(fragment: str) -> str:
    """A LIKE pattern (escape ``\\``) for text containing ``fragment``."""
    return f"%{_escaped(fragment)}%"


def _prefix(start: str) -> str:
    """A LIKE pattern (escape ``\\``) for text starting with ``start``."""
    return f"{_escaped(start)}%"


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), _PER_STATEMENT):
        yield items[start:start + _PER_STATEMENT]


def _row_columns() -> Select[Any]:
    return select(MessageRow.id, MessageRow.session_id, MessageRow.seq, MessageRow.role, MessageRow.payload,
                  MessageRow.active, MessageRow.created_at, MessageRow.origin, MessageRow.author)


def _erasable(row: Any) -> ErasableRow:
    return ErasableRow(row.id, row.session_id, row.seq, row.role, json.loads(row.payload), row.active,
                       row.created_at, row.origin, row.author)


class ErasureRepository:
    """Reads and the one write of erasures."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def locate(self, origin: str) -> str | None:
        """The session key (``platform:chat key``) of the newest session holding a row of message ``origin``, or
        of the session its inbox row was kept for; None when the store has neither."""
        query = (select(SessionRow.platform, SessionRow.chat_key).join(MessageRow, MessageRow.session_id == SessionRow.id)
                 .where(MessageRow.origin == origin).order_by(MessageRow.id.desc()).limit(1))
        async with read(self._engine) as conn:
            row = (await conn.execute(query)).first()
            if row is not None:
                return f"{row.platform}:{row.chat_key}"
            kept = (await conn.execute(select(InboxRow.session_key).where(InboxRow.key == origin))).first()
        return kept.session_key if kept is not None else None

    async def sessions(self, platform: str, shared_chat_key: str) -> list[ChatSession]:
        """Every session of the chat ``shared_chat_key`` (its per-user sessions too), oldest first."""
        query = (select(SessionRow.id, SessionRow.chat_key, SessionRow.parent_session_id, SessionRow.ended_at,
                        SessionRow.previous_summary)
                 .where(SessionRow.platform == platform,
                        or_(SessionRow.chat_key == shared_chat_key,
                            SessionRow.chat_key.like(_prefix(f"{shared_chat_key}:user:"), escape="\\")))
                 .order_by(SessionRow.started_at, SessionRow.id))
        async with read(self._engine) as conn:
            return [ChatSession(r.id, r.chat_key, r.parent_session_id, r.ended_at is None, r.previous_summary)
                    for r in await conn.execute(query)]

    async def rows_of(self, session_ids: Sequence[str], *, origins: Sequence[str] = (),
                      author: str | None = None) -> list[ErasableRow]:
        """The rows of ``session_ids`` holding one of the messages ``origins``, or written by ``author``."""
        found: dict[int, ErasableRow] = {}
        async with read(self._engine) as conn:
            for ids in _chunks(list(session_ids)):
                scoped = _row_columns().where(MessageRow.session_id.in_(ids))
                if author is not None:
                    for r in await conn.execute(scoped.where(MessageRow.author == author)):
                        found[r.id] = _erasable(r)
                for keys in _chunks(list(origins)):
                    for r in await conn.execute(scoped.where(MessageRow.origin.in_(keys))):
                        found[r.id] = _erasable(r)
        return sorted(found.values(), key=lambda r: r.id)

    async def quoting(self, session_ids: Sequence[str], fragments: Sequence[str]) -> list[ErasableRow]:
        """The rows of ``session_ids`` whose text may hold one of ``fragments`` (a superset: SQLite's LIKE ignores
        case), and every handoff summary among them."""
        found: dict[int, ErasableRow] = {}
        summaries = MessageRow.search_text.like(_prefix(SUMMARY_PREFIX[:20]), escape="\\")
        async with read(self._engine) as conn:
            for ids in _chunks(list(session_ids)):
                scoped = _row_columns().where(MessageRow.session_id.in_(ids))
                for r in await conn.execute(scoped.where(summaries)):
                    found[r.id] = _erasable(r)
                for group in _chunks(list(fragments)):
                    condition = or_(*(MessageRow.search_text.like(_like(f), escape="\\") for f in group))
                    for r in await conn.execute(scoped.where(condition)):
                        found[r.id] = _erasable(r)
        return sorted(found.values(), key=lambda r: r.id)

    async def between(self, session_ids: Sequence[str], first: int, last: int, limit: int) -> list[ErasableRow]:
        """The newest ``limit`` rows numbered ``first``…``last`` in ``session_ids`` (one conversation's lineage,
        where numbers are unique), oldest first; handoff summaries left out."""
        not_summary = ~MessageRow.search_text.like(_prefix(SUMMARY_PREFIX[:20]), escape="\\")
        query = (_row_columns().where(MessageRow.session_id.in_(list(session_ids)), MessageRow.seq >= first,
                                      MessageRow.seq <= last, not_summary)
                 .order_by(MessageRow.seq.desc()).limit(limit))
        async with read(self._engine) as conn:
            rows = [_erasable(r) for r in await conn.execute(query)]
        return rows[::-1]

    async def kept(self, keys: Sequence[str]) -> list[tuple[str, str]]:
        """(key, payload) of every inbox row still keeping the messages ``keys``, their edits or their deletion."""
        async with read(self._engine) as conn:
            return [(r.key, r.payload) for group in _chunks(list(keys)) for r in await conn.execute(
                select(InboxRow.key, InboxRow.payload).where(_inbox_rows(group), InboxRow.payload.is_not(None)))]

    async def kept_in_chat(self, platform: str, shared_chat_key: str) -> list[tuple[str, str]]:
        """(key, payload) of every inbox row still keeping a handled message of the chat ``shared_chat_key`` (its
        per-user sessions too); messages still to be handled are left alone (they come after the erasure)."""
        chat = f"{platform}:{shared_chat_key}"
        query = select(InboxRow.key, InboxRow.payload).where(
            InboxRow.payload.is_not(None), InboxRow.handled_at.is_not(None),
            or_(InboxRow.session_key == chat, InboxRow.session_key.like(_prefix(f"{chat}:user:"), escape="\\")))
        async with read(self._engine) as conn:
            return [(r.key, r.payload) for r in await conn.execute(query)]

    async def quoting_answers(self, platform: str, chat_id: str, fragments: Sequence[str]) -> list[QuotingAnswer]:
        """The ledger answers to the chat ``chat_id`` whose text may hold one of ``fragments``."""
        found: dict[int, QuotingAnswer] = {}
        async with read(self._engine) as conn:
            for group in _chunks(list(fragments)):
                query = select(DeliveryRow.id, DeliveryRow.text).where(
                    DeliveryRow.platform == platform, DeliveryRow.chat_id == chat_id,
                    or_(*(DeliveryRow.text.like(_like(f), escape="\\") for f in group)))
                for r in await conn.execute(query):
                    found[r.id] = QuotingAnswer(r.id, r.text)
        return sorted(found.values(), key=lambda a: a.id)

    async def apply(self, erasure: Erasure) -> list[str]:
        """Write ``erasure`` in one transaction; the ids of the open sessions whose active set was replaced."""
        if erasure.empty:
            return []
        at = utcnow()
        rewritten: dict[str, set[int]] = {}
        async with write(self._engine) as conn:
            if conn.dialect.name == "sqlite" and FTS_SECURE_DELETE:
                for table in _FTS_TABLES:  # stored in the index's config: set once, kept
                    await conn.exec_driver_sql(f"INSERT INTO {table}({table}, rank) VALUES('secure-delete', 1)")
            for rewrite in erasure.rows:
                owner = await conn.execute(update(MessageRow).where(MessageRow.id == rewrite.id).values(
                    payload=payload_of(rewrite.message),
                    search_text=message_text(rewrite.message), tokens=rewrite.tokens, prepared=None)
                    .returning(MessageRow.session_id))
                for (session_id,) in owner:
                    rewritten.setdefault(session_id, set()).add(rewrite.id)
            replaced = [sid for sid in sorted(set(rewritten) | set(erasure.summaries))
                        if await _settle_session(conn, sid, rewritten.get(sid, set()), erasure.summaries.get(sid))]
            for group in _chunks(erasure.inbox_keys):
                await conn.execute(update(InboxRow).where(_inbox_rows(group)).values(
                    payload=None, handled_at=func.coalesce(InboxRow.handled_at, at)))
            for answer in erasure.answers:
                await conn.execute(update(DeliveryRow).where(DeliveryRow.id == answer.id).values(text=answer.text))
            if conn.dialect.name == "sqlite" and not FTS_SECURE_DELETE and erasure.rows:
                await conn.execute(delete(ChatSettingRow).where(*_PURGE_DUE))
                await conn.execute(insert(ChatSettingRow).values(scope="store", name="fts-purge-due", value="1",
                                                                 updated_at=at))
        return replaced

    async def purge_if_due(self) -> bool:
        """On SQLite, after an erasure marked it due: rewrite both full-text indexes (FTS5 'optimize'), which
        drops the erased rows' words from their pages. Whether it ran."""
        if self._engine.dialect.name != "sqlite":
            return False
        async with write(self._engine) as conn:
            if (await conn.execute(select(ChatSettingRow.value).where(*_PURGE_DUE))).first() is None:
                return False
            for table in _FTS_TABLES:
                await conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES('optimize')")
            await conn.execute(delete(ChatSettingRow).where(*_PURGE_DUE))
        return True


def _inbox_rows(keys: Sequence[str]) -> Any:
    """The inbox rows of messages ``keys`` and of their edits and deletion (keys that extend them)."""
    return or_(*(or_(InboxRow.key == key, InboxRow.key.like(_prefix(f"{key}:"), escape="\\")) for key in keys))


async def _settle_session(conn: AsyncConnection, session_id: str, rewritten: set[int],
                          summary: str | None) -> bool:
    """Bring session ``session_id`` in line with its rewritten rows: an open session whose active set changed is
    replaced (True); otherwise its counters (and previous summary) are updated in place."""
    session = await lock_session(conn, session_id, open_only=False)
    active = await active_rows(conn, session_id)
    active_ids = set((await conn.execute(select(MessageRow.id).where(
        MessageRow.session_id == session_id, ACTIVE_ROW))).scalars())
    if session.ended_at is None and active_ids & rewritten:
        state = session_record(session).engine
        if summary is not None:
            state = replace(state, previous_summary=summary)
        await replace_set(conn, session, [stored(r) for r in active], reason=ERASURE_REASON,
                          watermark=session.last_seq, engine_state=state, record_info=False)
        return True
    values: dict[str, Any] = {"token_count": sum(r.tokens for r in active)}
    if summary is not None:
        values["previous_summary"] = summary
    await conn.execute(update(SessionRow).where(SessionRow.id == session_id).values(values))
    return False

