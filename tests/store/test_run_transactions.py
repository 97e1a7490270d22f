"""`run_read` / `run_write`: a synchronous function of Core statements in one transaction — on a SQLite file
run whole in a worker thread, elsewhere through ``run_sync`` — with the guarantees of `read` / `write`."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, select, update
from sqlalchemy.engine import make_url

from gateway.store import SessionEnded, SessionNotFound, Store, database
from gateway.store.database import run_read, run_write
from gateway.store.models import SessionRow


class Boom(Exception):
    """Raised inside a transaction."""


async def test_a_failing_write_changes_nothing(store: Store) -> None:
    record = await store.sessions.get_or_create_active("discord", "dm:1", title="before")

    def transaction(conn: Connection) -> None:
        conn.execute(update(SessionRow).where(SessionRow.id == record.id).values(title="after"))
        raise Boom

    with pytest.raises(Boom):
        await run_write(store.engine, transaction)
    assert (await store.sessions.require(record.id)).title == "before"

    def rename(conn: Connection) -> int:
        return conn.execute(update(SessionRow).where(SessionRow.id == record.id).values(title="after")).rowcount

    assert await run_write(store.engine, rename) == 1
    titles = await run_read(store.engine, lambda conn: conn.execute(select(SessionRow.title)).scalars().all())
    assert titles == ["after"]


async def test_store_errors_raised_inside_pass_through(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        await store.messages.append("no-such-session", [{"role": "user", "content": "hi"}], [3])
    record = await store.sessions.get_or_create_active("discord", "dm:2")
    await store.sessions.end(record.id, "new")
    with pytest.raises(SessionEnded):
        await store.messages.append(record.id, [{"role": "user", "content": "hi"}], [3])
    assert (await store.messages.load_active(record.id)).messages == []


async def test_sqlite_runs_each_transaction_in_a_worker_thread_that_closing_stops(store_url: str) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    opened = await Store.open(store_url, migrate=False)
    loop_thread = threading.current_thread().name
    ran_in = await run_read(opened.engine, lambda conn: threading.current_thread())
    assert ran_in.name != loop_thread and ran_in.name.startswith("concord-sqlite")
    await opened.aclose()
    assert not ran_in.is_alive()
    assert opened.engine not in database._twins


async def test_a_postgresql_read_is_one_read_only_snapshot_and_leaves_the_connection_as_it_was(
        store: Store, store_url: str) -> None:
    if not store_url.startswith("postgresql"):
        pytest.skip("isolation levels are PostgreSQL's")

    def settings(conn: Connection) -> tuple[str, str]:
        return (conn.exec_driver_sql("SHOW transaction_isolation").scalar_one(),
                conn.exec_driver_sql("SHOW transaction_read_only").scalar_one())

    assert await run_read(store.engine, settings) == ("repeatable read", "on")
    with pytest.raises(Exception, match="read-only transaction"):
        await run_read(store.engine, lambda conn: conn.execute(update(SessionRow).values(title="x")))
    # The same pooled connection writes again afterwards, at the default level.
    assert await run_write(store.engine, settings) == ("read committed", "off")


async def test_sqlite_checkpoints_the_wal_in_the_background_not_in_a_commit(store_url: str) -> None:
    if not store_url.startswith("sqlite"):
        pytest.skip("SQLite only")
    opened = await Store.open(store_url, migrate=False)
    path = Path(make_url(store_url).database or "")
    try:
        assert await run_read(opened.engine, lambda c: c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar()) == 0
        before = await asyncio.to_thread(os.path.getsize, path)
        record = await opened.sessions.get_or_create_active("discord", "dm:wal")
        for i in range(40):  # far past 1,000 WAL pages: a commit would have checkpointed long ago
            await opened.messages.append(record.id, [{"role": "user", "content": f"{i} " + "x" * 20_000}], [5_000])
        deadline = time.monotonic() + 10 * database.CHECKPOINT_INTERVAL_S
        while await asyncio.to_thread(os.path.getsize, path) <= before:  # the pages reach the database file only through a checkpoint
            assert time.monotonic() < deadline, "the WAL was never checkpointed"
            await asyncio.sleep(0.05)
        checkpointers = [t for t in threading.enumerate() if t.name == "concord-sqlite-checkpoint"]
        assert checkpointers
    finally:
        await opened.aclose()
    assert not any(t.is_alive() for t in checkpointers)


async def test_opening_waits_out_another_process_holding_a_fresh_file_longer_than_sqlites_default(
        tmp_path: Path) -> None:
    # A fresh file (no WAL yet) locked by someone else for 6 s — longer than pysqlite's default 5 s wait, within
    # the busy timeout: the switch to WAL on connect must wait like any statement, not fail "database is locked".
    path = tmp_path / "fresh.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(6.0, lambda: holder.execute("COMMIT"))
    release.start()
    engine = database.create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        async with engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        release.join()
        holder.close()
        await engine.dispose()
