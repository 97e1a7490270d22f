"""Each stored message row names the platform message it holds and who wrote it (``origin``, ``author``), so a
platform delete, an edit and ``/forget`` find every row and copy of a message.

Rows stored before this revision have neither: they are left NULL (their payloads carry no origin either).

Revision ID: 0008_message_origins
Revises: 0007_inbox_progress
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_message_origins"
down_revision = "0007_inbox_progress"
branch_labels = None
depends_on = None

_HAS_ORIGIN = sa.text("origin IS NOT NULL")
_HAS_AUTHOR = sa.text("author IS NOT NULL")


def upgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.add_column(sa.Column("origin", sa.String(1024)))
        batch.add_column(sa.Column("author", sa.String(160)))
    op.create_index("ix_messages_origin", "messages", ["origin"], sqlite_where=_HAS_ORIGIN,
                    postgresql_where=_HAS_ORIGIN)
    op.create_index("ix_messages_author", "messages", ["author", "session_id"], sqlite_where=_HAS_AUTHOR,
                    postgresql_where=_HAS_AUTHOR)


def downgrade() -> None:
    op.drop_index("ix_messages_author", "messages")
    op.drop_index("ix_messages_origin", "messages")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("author")
        batch.drop_column("origin")
