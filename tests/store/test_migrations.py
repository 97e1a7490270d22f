"""Migrations: packaged, idempotent, reversible, and in step with the models, on both databases."""

from __future__ import annotations

import json
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert, inspect, select

from agent.compression.messages import plain_text
from agent.storable import storable_text
from gateway.store import Store, current_revision, downgrade_database, upgrade_database
from gateway.store._rows import utcnow
from gateway.store.migrate import HEAD, MIGRATIONS_DIR
from gateway.store.models import Base, MessageRow

# Full-text machinery (FTS5 tables and their shadow tables, the tsvector column and GIN indexes) lives
# outside the models on purpose (see models.py).
_FTS_PREFIXES = ("messages_fts", "messages_trigram", "search_tsv", "ix_messages_search_", "alembic_version")


def test_migrations_ship_inside_the_package() -> None:
    assert (MIGRATIONS_DIR / "env.py").is_file()
    assert any(MIGRATIONS_DIR.joinpath("versions").glob("0001_*.py"))
    assert not (MIGRATIONS_DIR.parent.parent.parent / "alembic.ini").exists()


async def test_upgrade_is_idempotent_and_reversible(store_url: str) -> None:
    await upgrade_database(store_url)  # already at head: a no-op
    async with await Store.open(store_url) as store:
        assert await current_revision(store.engine) == HEAD
    await downgrade_database(store_url, "base")
    async with await Store.open(store_url, migrate=False) as store:
        assert await current_revision(store.engine) is None
        async with store.engine.connect() as conn:
            tables = await conn.run_sync(lambda c: set(inspect(c).get_table_names()))
        assert not tables & {"sessions", "messages", "compactions", "messages_fts", "deliveries"}
    async with await Store.open(store_url) as store:  # migrates on open
        session = await store.sessions.get_or_create_active("tg", "c")
        await store.messages.append(session.id, [{"role": "user", "content": "after re-upgrade"}], [3])
        assert [h.seq for h in await store.search("re-upgrade")] == [1]


def _relevant(diff: Any) -> bool:
    flat = diff if isinstance(diff, tuple) else diff[0]
    names = [str(part.name) for part in flat if getattr(part, "name", None)]
    return not any(name.startswith(_FTS_PREFIXES) for name in names)


async def test_models_match_the_migrated_schema(store: Store) -> None:
    def compare(conn: Any) -> list[Any]:
        context = MigrationContext.configure(conn, opts={"compare_type": False})
        return [d for d in compare_metadata(context, Base.metadata) if _relevant(d)]

    async with store.engine.connect() as conn:
        assert await conn.run_sync(compare) == []


async def test_open_migrates_a_new_sqlite_file_and_close_is_idempotent(tmp_path: Any) -> None:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
    assert store.dialect == "sqlite"
    assert await current_revision(store.engine) == HEAD
    async with store.engine.connect() as conn:
        journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        foreign = (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar()
    assert (journal, busy, foreign) == ("wal", 15_000, 1)
    await store.aclose()
    await store.aclose()


async def test_named_messages_stored_before_0009_are_searched_by_name_after_it(store_url: str) -> None:
    await downgrade_database(store_url, "0008_message_origins")
    named = {"role": "user", "name": "Alice", "content": "I signed up for a pottery class"}
    rows = [named, {"role": "user", "content": "Bob: no name field here"},
            {"role": "assistant", "name": "helper", "content": "an assistant's name is not a speaker"},
            {"role": "user", "name": "Nul", "content": "a tool output with \x00 in it"}]
    async with await Store.open(store_url, migrate=False) as store:
        session = await store.sessions.get_or_create_active("tg", "before")
        async with store.engine.begin() as conn:  # the text as 0008 stored it: no name in front
            await conn.execute(insert(MessageRow), [
                {"session_id": session.id, "seq": i + 1, "role": m["role"], "search_text": storable_text(plain_text(m)),
                 "payload": json.dumps(m, ensure_ascii=False), "tokens": 5, "created_at": utcnow(), "active": True}
                for i, m in enumerate(rows)])
    await upgrade_database(store_url)
    async with await Store.open(store_url, migrate=False) as store:
        texts = [r.search_text for r in await _texts(store)]
        assert texts == ["Alice: I signed up for a pottery class", "Bob: no name field here",
                         "an assistant's name is not a speaker", "Nul: a tool output with \ufffd in it"]
        assert [h.seq for h in await store.search("alice pottery")] == [1]
        # What new rows get is the same text.
        later = await store.sessions.get_or_create_active("tg", "after")
        await store.messages.append(later.id, [named], [5])
        assert [r.search_text for r in await _texts(store)][-1] == texts[0]
    await downgrade_database(store_url, "0008_message_origins")
    async with await Store.open(store_url, migrate=False) as store:
        assert [r.search_text for r in await _texts(store)][:4] == [storable_text(plain_text(m)) for m in rows]
    await upgrade_database(store_url)  # PostgreSQL's database is shared by the tests that follow


async def _texts(store: Store) -> list[Any]:
    async with store.engine.connect() as conn:
        return list(await conn.execute(select(MessageRow.search_text).order_by(MessageRow.id)))
