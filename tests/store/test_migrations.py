"""Migrations: packaged, idempotent, reversible, and in step with the models, on both databases."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from gateway.store import Store, current_revision, downgrade_database, upgrade_database
from gateway.store.migrate import HEAD, MIGRATIONS_DIR
from gateway.store.models import Base

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
