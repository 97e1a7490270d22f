"""The inbox records how far a message's handling got: ``progress`` (its turn's messages a compaction stored
before the turn ended, or a command that began changing something) and ``answer_id`` (the ledger row of the
answer stored with the handled mark), so a retry never stores or runs anything twice.

Revision ID: 0007_inbox_progress
Revises: 0006_deliveries_pruned
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_inbox_progress"
down_revision = "0006_deliveries_pruned"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.add_column(sa.Column("progress", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("answer_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite")))


def downgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("answer_id")
        batch.drop_column("progress")
