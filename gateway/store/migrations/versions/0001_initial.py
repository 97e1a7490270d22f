"""Sessions, messages, compactions, and full-text search (FTS5 on SQLite, tsvector + pg_trgm on PostgreSQL).

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_OPEN = sa.text("ended_at IS NULL")
_ACTIVE = sa.text("active")

# SQLite: two external-content FTS5 indexes over messages.search_text — words (unicode61) for ranked word
# queries, trigram for substrings, JSON fragments and CJK text that has no spaces — kept by triggers.
_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE messages_fts USING fts5(search_text, content='messages', content_rowid='id', "
    "tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE messages_trigram USING fts5(search_text, content='messages', content_rowid='id', "
    "tokenize='trigram')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts(rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO messages_trigram(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO messages_trigram(messages_trigram, rowid, search_text)
            VALUES ('delete', old.id, old.search_text);
    END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF search_text ON messages BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, search_text) VALUES ('delete', old.id, old.search_text);
        INSERT INTO messages_trigram(messages_trigram, rowid, search_text)
            VALUES ('delete', old.id, old.search_text);
        INSERT INTO messages_fts(rowid, search_text) VALUES (new.id, new.search_text);
        INSERT INTO messages_trigram(rowid, search_text) VALUES (new.id, new.search_text);
    END""",
]

# PostgreSQL: to_tsvector refuses inputs whose vector exceeds 1 MB, and a failed insert would lose the
# message, so the word index covers the first 200,000 characters; the trigram index covers all of it.
_PG_FTS = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "ALTER TABLE messages ADD COLUMN search_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('simple', left(search_text, 200000))) STORED",
    "CREATE INDEX ix_messages_search_tsv ON messages USING gin (search_tsv)",
    "CREATE INDEX ix_messages_search_trgm ON messages USING gin (search_text gin_trgm_ops)",
]



def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_key", sa.String(255), nullable=False),
        sa.Column("title", sa.Text()),
        sa.Column("goal", sa.Text()),
        sa.Column("parent_session_id", sa.String(40), sa.ForeignKey("sessions.id")),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_active_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("end_reason", sa.String(32)),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("generation_seq", sa.BigInteger(), nullable=False),
        sa.Column("compactions", sa.Integer(), nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("token_count", sa.BigInteger(), nullable=False),
        sa.Column("last_prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("previous_summary", sa.Text()),
        sa.Column("compression_count", sa.Integer(), nullable=False),
        sa.Column("ineffective_count", sa.Integer(), nullable=False),
        sa.Column("cooldown_until", sa.DateTime(timezone=True)),
        sa.Column("context_length", sa.Integer()),
        sa.Column("last_compaction", sa.Text()),
    )
    opened = {"sqlite_where": _OPEN, "postgresql_where": _OPEN}
    op.create_index("uq_sessions_open_chat", "sessions", ["platform", "chat_key"], unique=True, **opened)
    op.create_index("ix_sessions_open_tokens", "sessions", ["token_count"], **opened)
    op.create_index("ix_sessions_open_messages", "sessions", ["message_count"], **opened)
    op.create_index("ix_sessions_open_prompt", "sessions", ["last_prompt_tokens"], **opened)
    op.create_index("ix_sessions_open_last_active", "sessions", ["last_active_at"], **opened)
    op.create_index("ix_sessions_started", "sessions", ["started_at"])
    op.create_index("ix_sessions_parent", "sessions", ["parent_session_id"])

    op.create_table(
        "messages",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(40), sa.ForeignKey("sessions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True)),
        sa.Column("archived_by", sa.Integer()),
        sa.Column("compacted", sa.Boolean(), nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="uq_messages_session_seq"),
    )
    op.create_index("ix_messages_active", "messages", ["session_id", "seq"],
                    sqlite_where=_ACTIVE, postgresql_where=_ACTIVE)
    op.create_index("ix_messages_archived_by", "messages", ["session_id", "archived_by"])

    op.create_table(
        "compactions",
        sa.Column("session_id", sa.String(40), sa.ForeignKey("sessions.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("number", sa.Integer(), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("watermark", sa.BigInteger(), nullable=False),
        sa.Column("messages_before", sa.Integer(), nullable=False),
        sa.Column("messages_after", sa.Integer(), nullable=False),
        sa.Column("tokens_before", sa.BigInteger(), nullable=False),
        sa.Column("tokens_after", sa.BigInteger(), nullable=False),
        sa.Column("carried", sa.Integer(), nullable=False),
    )

    dialect = op.get_bind().dialect.name
    for statement in _SQLITE_FTS if dialect == "sqlite" else _PG_FTS if dialect == "postgresql" else ():
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        op.execute("DROP TABLE IF EXISTS messages_fts")
        op.execute("DROP TABLE IF EXISTS messages_trigram")
    op.drop_table("compactions")
    op.drop_table("messages")
    op.drop_table("sessions")
