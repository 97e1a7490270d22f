"""Pinned rules per conversation (a chat: platform + chat key), kept across rotations, /new and restarts.

Revision ID: 0003_pins
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_pins"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pins",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("platform", sa.String(32), nullable=False),
        sa.Column("chat_key", sa.String(255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(64)),
    )
    op.create_index("ix_pins_chat", "pins", ["platform", "chat_key", "id"])


def downgrade() -> None:
    op.drop_index("ix_pins_chat", table_name="pins")
    op.drop_table("pins")
