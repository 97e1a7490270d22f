"""The delivery ledger is pruned: an index over the answers that are no longer pending, by age.

Revision ID: 0006_deliveries_pruned
Revises: 0005_inbox
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_deliveries_pruned"
down_revision = "0005_inbox"
branch_labels = None
depends_on = None

_SETTLED = sa.text("status <> 'pending'")


def upgrade() -> None:
    op.create_index("ix_deliveries_settled", "deliveries", ["created_at"], sqlite_where=_SETTLED,
                    postgresql_where=_SETTLED)


def downgrade() -> None:
    op.drop_index("ix_deliveries_settled", table_name="deliveries")
