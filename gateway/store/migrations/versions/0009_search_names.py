"""A named person's message is searched with their name in front (``NAME: text``), so "what did Alice say
about…" finds what Alice said (`gateway.store.message_text`).

Rows stored before this revision get the prefix here: user rows whose payload names a speaker (a JSON
string ``name``). The full-text indexes follow the new text (SQLite's triggers, PostgreSQL's generated
``search_tsv``). Downgrade takes the prefix off again.

Revision ID: 0009_search_names
Revises: 0008_message_origins
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0009_search_names"
down_revision = "0008_message_origins"
branch_labels = None
depends_on = None

# The speaker's name of a user row, or NULL (a payload is always JSON written by json.dumps).
_NAME = {
    "sqlite": "(CASE WHEN json_valid(payload) AND json_type(payload, '$.name') = 'text' "
              "THEN json_extract(payload, '$.name') END)",
    # CASE fixes the order: the JSON operators never see a payload they would refuse (below).
    "postgresql": "(CASE WHEN strpos(payload, '\\u0000') > 0 THEN NULL "
                  "WHEN json_typeof(payload::json -> 'name') = 'string' THEN payload::json ->> 'name' END)",
}
# Cheap test first: most payloads never mention a name.
_MAY_BE_NAMED = "role = 'user' AND payload LIKE '%\"name\"%'"
# PostgreSQL's JSON operators refuse a \u0000 escape (a tool output may hold one): such rows are done in Python.
_NUL_ESCAPE = {"sqlite": "0", "postgresql": "strpos(payload, '\\u0000') > 0"}


def _rows_with_nul_escapes(dialect: str) -> list[tuple[int, str]]:
    if dialect != "postgresql":
        return []
    rows = op.get_bind().execute(sa.text(f"SELECT id, payload FROM messages WHERE {_MAY_BE_NAMED} AND "
                                         f"{_NUL_ESCAPE[dialect]}"))
    named = [(row.id, json.loads(row.payload).get("name")) for row in rows]
    return [(id_, name) for id_, name in named if isinstance(name, str) and name]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    name = _NAME[dialect]
    op.execute(f"UPDATE messages SET search_text = {name} || ': ' || search_text "
               f"WHERE {_MAY_BE_NAMED} AND NOT ({_NUL_ESCAPE[dialect]}) AND {name} <> ''")
    for id_, speaker in _rows_with_nul_escapes(dialect):
        op.get_bind().execute(sa.text("UPDATE messages SET search_text = :prefix || search_text WHERE id = :id"),
                              {"prefix": f"{speaker}: ", "id": id_})


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    prefix = f"{_NAME[dialect]} || ': '"
    op.execute(f"UPDATE messages SET search_text = substr(search_text, length({prefix}) + 1) "
               f"WHERE {_MAY_BE_NAMED} AND NOT ({_NUL_ESCAPE[dialect]}) "
               f"AND substr(search_text, 1, length({prefix})) = {prefix}")
    for id_, speaker in _rows_with_nul_escapes(dialect):
        op.get_bind().execute(sa.text("UPDATE messages SET search_text = substr(search_text, :cut) "
                                      "WHERE id = :id AND substr(search_text, 1, :length) = :prefix"),
                              {"cut": len(speaker) + 3, "length": len(speaker) + 2, "prefix": f"{speaker}: ",
                               "id": id_})
