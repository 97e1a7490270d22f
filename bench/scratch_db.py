"""A throwaway PostgreSQL database for benchmarks and tests, created next to a given one and dropped after."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.engine import make_url

from gateway.store.database import create_engine

__all__ = ["scratch_postgres"]


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
