"""The delivery ledger: answers stored before they are sent, so a crash before the platform confirms loses none.

Revision ID: 0004
Revises: 0003_pins
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003_pins"
branch_labels = None
depends_on = None

_PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    big_id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "deliveries",
        sa.Column("id", big_id, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.String(40)),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_id", sa.String(255), nullable=False),
        sa.Column("thread_id", sa.String(255)),
        sa.Column("reply_to", sa.String(255)),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.Column("worker", sa.String(128), nullable=False),
        sa.Column("recovered_by", sa.String(128)),
    )
    op.create_index("ix_deliveries_pending", "deliveries", ["created_at"], sqlite_where=_PENDING,
                    postgresql_where=_PENDING)


def downgrade() -> None:
    op.drop_index("ix_deliveries_pending", table_name="deliveries")
    op.drop_table("deliveries")
