"""SQLAlchemy 2 models for sessions, messages and compactions (R-S1).

The Alembic migrations in ``migrations/versions`` create exactly these tables plus the dialect-specific
full-text machinery (FTS5 tables and triggers on SQLite; a tsvector column and GIN indexes on PostgreSQL),
which the ORM never touches directly.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    literal_column,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

__all__ = ["ACTIVE_ROW", "Base", "ChatSettingRow", "CompactionRow", "DeliveryRow", "InboxRow", "MessageRow", "PinRow",
           "SessionRow", "UTCDateTime"]

# SQLite only auto-increments an INTEGER PRIMARY KEY (the rowid alias), which FTS5 also keys on.
_BigId = BigInteger().with_variant(Integer(), "sqlite")
_OPEN = text("ended_at IS NULL")
_PENDING = text("status = 'pending'")
_SETTLED = text("status <> 'pending'")
_UNHANDLED = text("handled_at IS NULL")
_HAS_ORIGIN = text("origin IS NOT NULL")
_HAS_AUTHOR = text("author IS NOT NULL")
# "The row is active", written as the partial index ix_messages_active's predicate. SQLite uses a partial index
# only for a query whose WHERE holds that predicate as written; SQLAlchemy writes the Boolean column as
# `active IS 1` / `active = 1`, which SQLite does not prove, and then reads every row the session ever had
# (archived ones too) through (session_id, archived_by) and sorts them.
ACTIVE_ROW = literal_column("messages.active")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both databases (SQLite drops the zone; we put it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of the store's tables."""


class SessionRow(Base):
    """A conversation; counters describe its active message set and are kept in step in each write."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    chat_key: Mapped[str] = mapped_column(String(255))
    title: Mapped[str | None] = mapped_column(Text)
    goal: Mapped[str | None] = mapped_column(Text)
    parent_session_id: Mapped[str | None] = mapped_column(ForeignKey("sessions.id"))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_active_at: Mapped[datetime] = mapped_column(UTCDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    end_reason: Mapped[str | None] = mapped_column(String(32))
    # Sequence bookkeeping: last_seq is the highest sequence handed out; generation_seq is the reserved
    # sequence just below the current active set, so a watermark older than it is provably stale.
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    generation_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    compactions: Mapped[int] = mapped_column(Integer, default=0)
    message_count: Mapped[int] = mapped_column(Integer, default=0)
    token_count: Mapped[int] = mapped_column(BigInteger, default=0)
    # Engine state (durable anti-thrash).
    last_prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    previous_summary: Mapped[str | None] = mapped_column(Text)
    compression_count: Mapped[int] = mapped_column(Integer, default=0)
    ineffective_count: Mapped[int] = mapped_column(Integer, default=0)
    cooldown_until: Mapped[datetime | None] = mapped_column(UTCDateTime())
    context_length: Mapped[int | None] = mapped_column(Integer)
    last_compaction: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index("uq_sessions_open_chat", "platform", "chat_key", unique=True,
              sqlite_where=_OPEN, postgresql_where=_OPEN),
        Index("ix_sessions_open_tokens", "token_count", sqlite_where=_OPEN, postgresql_where=_OPEN),
        Index("ix_sessions_open_messages", "message_count", sqlite_where=_OPEN, postgresql_where=_OPEN),
        Index("ix_sessions_open_prompt", "last_prompt_tokens", sqlite_where=_OPEN, postgresql_where=_OPEN),
        Index("ix_sessions_open_last_active", "last_active_at", sqlite_where=_OPEN, postgresql_where=_OPEN),
        Index("ix_sessions_started", "started_at"),
        Index("ix_sessions_parent", "parent_session_id"),
    )


class MessageRow(Base):
    """One chat message. Archived rows (active = False) are kept forever: searchable and restorable — until the
    platform message a row holds is deleted, or its author asks to be forgotten: then its text is erased in
    place, leaving a tombstone (`gateway.conversation.erasure`).

    ``origin`` is the key of the platform message the row holds (`gateway.intake.inbox.message_key`; copies made by
    compactions and rotations keep it) and ``author`` who wrote it (``platform:user id``); both are NULL for
    what no platform message became (the bot's answers, tool calls, summaries).

    ``prepared`` is what the context engine prepared for the row's message once it was stored (`PreparedRecord`),
    handed back to it after a restart; NULL until then, and again when the row's text is erased.
    """

    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(String(16))
    payload: Mapped[str] = mapped_column(Text)
    search_text: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    active: Mapped[bool] = mapped_column(Boolean)
    archived_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    archived_by: Mapped[int | None] = mapped_column(Integer)
    compacted: Mapped[bool] = mapped_column(Boolean, default=False)
    origin: Mapped[str | None] = mapped_column(String(1024))
    author: Mapped[str | None] = mapped_column(String(160))
    prepared: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),
        Index("ix_messages_active", "session_id", "seq", sqlite_where=text("active"),
              postgresql_where=text("active")),
        Index("ix_messages_archived_by", "session_id", "archived_by"),
        Index("ix_messages_origin", "origin", sqlite_where=_HAS_ORIGIN, postgresql_where=_HAS_ORIGIN),
        Index("ix_messages_author", "author", "session_id", sqlite_where=_HAS_AUTHOR, postgresql_where=_HAS_AUTHOR),
    )


class CompactionRow(Base):
    """History of active-set replacements; ``number`` N archived the rows with ``archived_by = N``."""

    __tablename__ = "compactions"

    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    reason: Mapped[str] = mapped_column(String(32))
    watermark: Mapped[int] = mapped_column(BigInteger)
    messages_before: Mapped[int] = mapped_column(Integer)
    messages_after: Mapped[int] = mapped_column(Integer)
    tokens_before: Mapped[int] = mapped_column(BigInteger)
    tokens_after: Mapped[int] = mapped_column(BigInteger)
    carried: Mapped[int] = mapped_column(Integer)


class DeliveryRow(Base):
    """The delivery ledger: one answer, stored before it is sent and marked sent once the platform confirmed.

    ``status``: pending (stored, not confirmed) → sent; or pending → resending (claimed by one worker for its
    one resend after a crash) → sent / failed; or pending → expired (too old to be worth sending). A turn's
    answer is written by the transaction that stores the turn. (Earlier versions wrote it as a draft first;
    a draft left over is never sent.) Rows no longer pending are deleted ``delivery.keep_seconds`` after they
    were stored: the history keeps every answer, the ledger only has to outlive its resend window.
    """

    __tablename__ = "deliveries"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    session_id: Mapped[str | None] = mapped_column(String(40))
    platform: Mapped[str] = mapped_column(String(32))
    chat_id: Mapped[str] = mapped_column(String(255))
    thread_id: Mapped[str | None] = mapped_column(String(255))
    reply_to: Mapped[str | None] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    worker: Mapped[str] = mapped_column(String(128))
    recovered_by: Mapped[str | None] = mapped_column(String(128))

    __table_args__ = (
        Index("ix_deliveries_pending", "created_at", sqlite_where=_PENDING, postgresql_where=_PENDING),
        Index("ix_deliveries_settled", "created_at", sqlite_where=_SETTLED, postgresql_where=_SETTLED),
    )


class InboxRow(Base):
    """An inbound message kept from receipt until handled (`gateway.intake.inbox`), and afterwards the store's record
    that it was handled (until pruned).

    ``payload`` is the serialized Inbound (None for a message recorded only once handled: its platform
    delivers it again by itself); ``claimed_by`` names the worker process that will handle it, which renews
    ``claimed_at`` while it lives. ``progress`` says how far its handling got before it was marked handled (see
    `gateway.store.inbox`), ``answer_id`` is the ledger row of the answer stored with the handled mark.
    """

    __tablename__ = "inbox"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(1024))
    platform: Mapped[str] = mapped_column(String(32))
    session_key: Mapped[str] = mapped_column(String(1024))
    payload: Mapped[str | None] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(UTCDateTime())
    claimed_by: Mapped[str | None] = mapped_column(String(160))
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    handled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    progress: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    answer_id: Mapped[int | None] = mapped_column(_BigId)

    __table_args__ = (
        UniqueConstraint("key", name="uq_inbox_key"),
        Index("ix_inbox_unhandled", "received_at", sqlite_where=_UNHANDLED, postgresql_where=_UNHANDLED),
        Index("ix_inbox_handled", "handled_at"),
    )


class ChatSettingRow(Base):
    """A value set through a chat command that must outlive the process: a chat's persona, a paired user."""

    __tablename__ = "chat_settings"

    scope: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())


class PinRow(Base):
    """A pinned rule of one chat (platform + chat key, so it outlives any one session); shown in pin order."""

    __tablename__ = "pins"

    id: Mapped[int] = mapped_column(_BigId, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(32))
    chat_key: Mapped[str] = mapped_column(String(255))
    text: Mapped[str] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_by: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (Index("ix_pins_chat", "platform", "chat_key", "id"),)
