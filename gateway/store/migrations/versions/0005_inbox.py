"""The inbox: inbound messages kept from receipt until handled, so a worker killed mid-turn loses none.

Revision ID: 0005_inbox
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_inbox"
down_revision = "0004"
branch_labels = None
depends_on = None

_UNHANDLED = sa.text("handled_at IS NULL")


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "inbox",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(1024), nullable=False),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("session_key", sa.String(1024), nullable=False),
        sa.Column("payload", sa.Text()),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_by", sa.String(160)),
        sa.Column("claimed_at", sa.DateTime(timezone=True)),
        sa.Column("handled_at", sa.DateTime(timezone=True)),
        sa.UniqueConstraint("key", name="uq_inbox_key"),
    )
    op.create_index("ix_inbox_unhandled", "inbox", ["received_at"], sqlite_where=_UNHANDLED,
                    postgresql_where=_UNHANDLED)
    op.create_index("ix_inbox_handled", "inbox", ["handled_at"])


def downgrade() -> None:
    op.drop_index("ix_inbox_handled", table_name="inbox")
    op.drop_index("ix_inbox_unhandled", table_name="inbox")
    op.drop_table("inbox")
