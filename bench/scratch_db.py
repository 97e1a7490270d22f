"""Throwaway databases for benchmarks and tests: a PostgreSQL database created next to a given one and dropped
after, and a migrated SQLite file (plus that PostgreSQL database when a URL is given) for per-backend figures."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from gateway.store.database import create_engine
from gateway.store.migrate import upgrade_database

__all__ = ["bench_databases", "scratch_postgres"]


@asynccontextmanager
async def scratch_postgres(url: str, prefix: str = "concord_scratch") -> AsyncIterator[str]:
    """Create an empty database on the server of ``url``; yield its URL; drop it (even while in use)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.dispose()


@asynccontextmanager
async def bench_databases(postgres: str | None, prefix: str = "concord_bench") -> AsyncIterator[list[tuple[str, str]]]:
    """Migrated, empty databases as ``(backend, url)``: a SQLite file in a temporary folder, and a scratch
    PostgreSQL database on the server of ``postgres`` when one is given; all removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"{prefix}-") as tmp:
        urls = [("sqlite", f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")]
        async with AsyncExitStack() as stack:
            if postgres:
                urls.append(("postgresql", await stack.enter_async_context(scratch_postgres(postgres, prefix))))
            for _, url in urls:
                await upgrade_database(url)
            yield urls
