"""Async engine construction and the two kinds of transactions the repositories use.

SQLite: WAL, a busy timeout and foreign keys on every connection. pysqlite's own transaction handling starts
transactions lazily (and never for SELECT), which would let a read-then-write race with another process; we
switch it off and issue BEGIN ourselves — ``BEGIN IMMEDIATE`` for writes, so a writer takes the database
lock up front and waits (busy timeout) instead of failing when it upgrades from reading to writing.

aiosqlite runs every DBAPI call (cursor, execute, fetch, close, commit: about four per statement) as one
round trip to its connection thread, and on a busy machine each costs a thread switch and a GIL hand-over.
The per-message transactions therefore go through `run_read` / `run_write`: a synchronous function of
SQLAlchemy Core statements that, on a SQLite file, runs whole on a synchronous twin engine in a worker
thread — one round trip per transaction — and elsewhere inside `read` / `write` through ``run_sync``.

SQLite moves the WAL into the database file (a checkpoint, with an fsync) inside whichever commit crosses
1,000 pages: about one message in sixty waited ~5 ms for it, which was the gateway's p99. The twin's
connections leave that to a background thread instead (`_Checkpointer`), which checkpoints passively —
never blocking a reader or the writer — once a second.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Engine, event
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

__all__ = ["SQLITE_BUSY_TIMEOUT_MS", "create_engine", "dispose_engine", "read", "run_read", "run_write", "write"]

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 15_000
CHECKPOINT_INTERVAL_S = 1.0
_WRITE = "concord_write"
# Worker threads (and pooled connections) of a SQLite file's synchronous twin engine.
_TWIN_THREADS = 4

T = TypeVar("T")


class _Checkpointer:
    """Checkpoints a SQLite file's WAL every ``interval`` seconds from a daemon thread, on its own connection."""

    def __init__(self, path: str, interval: float = CHECKPOINT_INTERVAL_S) -> None:
        self._path = path
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="concord-sqlite-checkpoint", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failing = False
        connection: sqlite3.Connection | None = None
        try:
            while not self._stop.wait(self._interval):
                try:
                    connection = connection or sqlite3.connect(self._path)
                    connection.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    failing = False
                except sqlite3.Error as exc:
                    if not failing:  # once per run of failures (a full disk), not once a second
                        log.warning("sqlite: WAL checkpoint failed (%s); retrying every %.0f s", exc, self._interval)
                    failing = True
        finally:
            if connection is not None:
                connection.close()

    def stop(self) -> None:
        """Stop after the checkpoint in progress, if any."""
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class _Twin:
    """A synchronous engine on the same SQLite file and the threads its transactions run in."""

    url: URL
    engine: Engine | None = None
    executor: ThreadPoolExecutor | None = None
    checkpointer: _Checkpointer | None = None

    def start(self) -> tuple[Engine, ThreadPoolExecutor]:
        """The engine and executor, created on first use (migrations never pay for them)."""
        if self.engine is None or self.executor is None:
            # Each pooled connection is used by one thread at a time, but not always the same one.
            self.engine = create_sync_engine(self.url.set(drivername="sqlite+pysqlite"), pool_size=_TWIN_THREADS,
                                             max_overflow=0, pool_reset_on_return=None,
                                             connect_args={"check_same_thread": False})
            _install_sqlite_hooks(self.engine, autocheckpoint=False)
            self.executor = ThreadPoolExecutor(_TWIN_THREADS, thread_name_prefix="concord-sqlite")
            self.checkpointer = _Checkpointer(str(self.url.database))
        return self.engine, self.executor

    def close(self) -> None:
        """Let running transactions finish, then close every connection."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        if self.checkpointer is not None:
            self.checkpointer.stop()
        if self.engine is not None:
            self.engine.dispose()


_twins: weakref.WeakKeyDictionary[AsyncEngine, _Twin] = weakref.WeakKeyDictionary()


def _install_sqlite_hooks(engine: Engine, *, autocheckpoint: bool = True) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # First: switching to WAL may wait for another process (one migrating a fresh file) as long as any lock.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        if not autocheckpoint:  # a `_Checkpointer` does it, off the commit path
            cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
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
        _install_sqlite_hooks(engine.sync_engine)
        if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
            _twins[engine] = _Twin(parsed)
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
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            # Set on the connection, the level goes into the BEGIN itself: one round trip fewer than a
            # SET TRANSACTION after it (the pool puts the connection's defaults back on return).
            await conn.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
        async with conn.begin():
            yield conn


def _in_transaction(engine: Engine, fn: Callable[[Connection], T], writing: bool) -> T:
    with engine.connect() as conn:
        if writing:
            conn.execution_options(**{_WRITE: True})
        with conn.begin():
            return fn(conn)


async def run_read(engine: AsyncEngine, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` — synchronous SQLAlchemy Core — in one read-only transaction (`read`); on a SQLite file
    the whole transaction is one round trip to a worker thread."""
    twin = _twins.get(engine)
    if twin is None:
        async with read(engine) as conn:
            return await conn.run_sync(fn)
    sync_engine, executor = twin.start()
    return await asyncio.get_running_loop().run_in_executor(executor, _in_transaction, sync_engine, fn, False)


async def run_write(engine: AsyncEngine, fn: Callable[[Connection], T]) -> T:
    """``fn(conn)`` in one write transaction (`write`: committed on success, rolled back on any error); on a
    SQLite file the whole transaction is one round trip to a worker thread."""
    twin = _twins.get(engine)
    if twin is None:
        async with write(engine) as conn:
            return await conn.run_sync(fn)
    sync_engine, executor = twin.start()
    return await asyncio.get_running_loop().run_in_executor(executor, _in_transaction, sync_engine, fn, True)


async def dispose_engine(engine: AsyncEngine) -> None:
    """Close every pooled connection of ``engine`` (and of its SQLite twin)."""
    await engine.dispose()
    twin = _twins.pop(engine, None)
    if twin is not None:
        await asyncio.to_thread(twin.close)
