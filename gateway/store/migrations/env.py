"""Alembic environment: uses the connection handed in by ``gateway.store.migrate``, or the configured URL.

The second path serves a developer running the ``alembic`` command by hand with ``-x``-less config.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from gateway.store.database import create_engine
from gateway.store.models import Base

target_metadata = Base.metadata


def _run_on(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_with_url(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(_run_on)
    finally:
        await engine.dispose()


def _main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    url = context.config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no connection and no sqlalchemy.url given to the Concord migrations")
    asyncio.run(_run_with_url(url))


_main()
