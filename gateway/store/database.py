"""Async engine construction and the two kinds of transactions the repositories use.

SQLite: WAL, a busy timeout and foreign keys on every connection. pysqlite's own transaction handling starts
transactions lazily (and never for SELECT), which would let a read-then-write race with another process; we
switch it off and issue BEGIN ourselves — ``BEGIN IMMEDIATE`` for writes, so a writer takes the database
lock up front and waits (busy timeout) instead of failing when it upgrades from reading to writing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

__all__ = ["SQLITE_BUSY_TIMEOUT_MS", "create_engine", "read", "write"]

SQLITE_BUSY_TIMEOUT_MS = 15_000
_WRITE = "concord_write"


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_WRITE) else "BEGIN")


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` (``sqlite+aiosqlite://…`` or ``postgresql+asyncpg://…``)."""
    parsed = make_url(url)
    # Bound values are conversation text: never in SQL logs or in the text of a database error.
    kwargs.setdefault("hide_parameters", True)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            # A fresh checkout has no data dir yet; SQLite would fail with "unable to open database file".
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # pysqlite runs in driver-level autocommit here (we issue BEGIN ourselves and every read()/write()
        # ends its transaction), so the pool's rollback-on-checkin is a no-op that still costs an aiosqlite
        # thread round trip per checkout.
        kwargs.setdefault("pool_reset_on_return", None)
        engine = create_async_engine(parsed, **kwargs)
        _install_sqlite_hooks(engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(parsed, **kwargs)


@asynccontextmanager
async def write(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One write transaction: committed on success, rolled back on any error."""
    async with engine.connect() as conn:
        await conn.execution_options(**{_WRITE: True})
        async with conn.begin():
            yield conn


@asynccontextmanager
async def read(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """One read-only transaction (a consistent snapshot on both databases)."""
    async with engine.connect() as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            await conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield conn
