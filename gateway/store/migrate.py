"""Run the Alembic migrations shipped inside this package, on SQLite or PostgreSQL.

No ``alembic.ini`` is needed: the script location is this package's ``migrations`` folder, so an installed
copy migrates itself (at start-up and from ``concord db upgrade``).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import inspect
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.database import create_engine, read, write
from gateway.store.errors import StorageUnavailable
from gateway.store.models import Base

__all__ = ["HEAD", "MIGRATIONS_DIR", "alembic_config", "current_revision", "downgrade_database", "first_line",
           "upgrade_database"]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any constant works; it only has to be the same for every worker migrating the same PostgreSQL database.
_PG_MIGRATION_LOCK = 0x636F6E63


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config pointing at the packaged migrations (``url`` only for offline/CLI use)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", url)
    return cfg


def _head() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise RuntimeError("the packaged migrations have no head revision")
    return head


HEAD = _head()


async def _run(engine: AsyncEngine, action: str, target: str) -> None:
    cfg = alembic_config()

    def _migrate(conn: Connection) -> None:
        cfg.attributes["connection"] = conn
        getattr(command, action)(cfg, target)

    # One transaction: on PostgreSQL DDL is transactional and the advisory lock makes concurrent workers
    # starting together take turns; on SQLite BEGIN IMMEDIATE serializes them the same way.
    async with write(engine) as conn:
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_MIGRATION_LOCK})")
        await conn.run_sync(_migrate)


async def upgrade_database(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` up to ``revision`` (default: the newest); a no-op when already there.

    Raises `StorageUnavailable` when the database cannot be reached or created.
    """
    try:
        engine = create_engine(url)  # creates a missing SQLite data dir: may fail on an unwritable path
    except OSError as exc:
        raise StorageUnavailable(f"cannot open the database {_shown(url)}: {first_line(exc)}") from None
    try:
        try:
            async with engine.connect():
                pass
        except (OSError, DBAPIError) as exc:
            raise StorageUnavailable(f"cannot open the database {_shown(url)}: {first_line(exc)}") from None
        try:
            await _run(engine, "upgrade", revision)
        except CommandError as exc:
            # Usually a revision this copy does not ship: a newer Concord migrated the database.
            raise StorageUnavailable(f"cannot migrate the database {_shown(url)}: {first_line(exc)} (was it "
                                     f"written by a newer Concord? upgrade this one)") from None
        except DBAPIError as exc:  # a corrupt file
            raise StorageUnavailable(f"the database {_shown(url)} is unusable: {first_line(exc)}") from None
        missing = await _missing_tables(engine) if revision == "head" else []
        if missing:
            raise StorageUnavailable(f"the database {_shown(url)} is at the latest schema but lacks the table(s) "
                                     f"{', '.join(missing)} (dropped by hand? restore a backup)")
    finally:
        await engine.dispose()


async def _missing_tables(engine: AsyncEngine) -> list[str]:
    async with read(engine) as conn:
        present = set(await conn.run_sync(lambda sync: inspect(sync).get_table_names()))
    return sorted(set(Base.metadata.tables) - present)


def _shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def first_line(exc: BaseException) -> str:
    """The driver's own message, first line only: never the SQL statement or its parameters."""
    cause = getattr(exc, "orig", None) or exc
    text = str(cause).strip()
    return (text.splitlines()[0] if text else type(cause).__name__)[:300]


async def downgrade_database(url: str, revision: str) -> None:
    """Take the database at ``url`` back to ``revision`` (``"base"`` drops every table)."""
    engine = create_engine(url)
    try:
        await _run(engine, "downgrade", revision)
    finally:
        await engine.dispose()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (None for an empty database)."""
    async with read(engine) as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())
