"""Each stored message row can keep what the context engine prepared for it (``prepared``: its evidence facts
and its summary block's token count, as the engine's own text), so a compaction after a restart adopts them
instead of finding them again — as the row's token count spares re-tokenizing it.

Rows stored before this revision have none (NULL): the engine computes theirs when it needs them.

Revision ID: 0010_message_prepared
Revises: 0009_search_names
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_message_prepared"
down_revision = "0009_search_names"
branch_labels = None
depends_on = None


# Both are plain ALTER TABLE statements on both databases: a batch operation would rebuild SQLite's messages
# table, and with it the full-text triggers the table carries.
def upgrade() -> None:
    op.add_column("messages", sa.Column("prepared", sa.Text()))


def downgrade() -> None:
    op.execute("ALTER TABLE messages DROP COLUMN prepared")
