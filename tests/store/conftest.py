"""Store fixtures: every store test runs on SQLite AND PostgreSQL with the same body.

PostgreSQL gets a private database per test run (created here, dropped at the end); each test starts from
empty tables. SQLite gets a fresh file per test, copied from a template migrated once.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from gateway.store import Store, upgrade_database
from gateway.store.database import create_engine

BACKENDS = ["sqlite", "postgres"]


async def _admin(url: str, *statements: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def pg_store_url(postgres_url: str) -> Iterator[str]:
    """A migrated PostgreSQL database private to this test run."""
    name = f"concord_store_{uuid.uuid4().hex[:12]}"
    url = make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    asyncio.run(_admin(postgres_url, f'CREATE DATABASE "{name}"'))
    try:
        asyncio.run(upgrade_database(url))
        yield url
    finally:
        asyncio.run(_admin(postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file to copy (migrating once keeps per-test setup cheap)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    asyncio.run(upgrade_database(f"sqlite+aiosqlite:///{path}"))
    return path


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path) -> str:
    """URL of an empty, migrated database of the parametrized kind."""
    if request.param == "sqlite":
        target = tmp_path / "store.db"
        shutil.copyfile(sqlite_template, target)
        return f"sqlite+aiosqlite:///{target}"
    url: str = request.getfixturevalue("pg_store_url")
    asyncio.run(_admin(url, "TRUNCATE inbox, deliveries, compactions, messages, sessions, chat_settings RESTART IDENTITY "
                            "CASCADE"))
    return url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An open store on an empty database."""
    opened = await Store.open(store_url, migrate=False)
    try:
        yield opened
    finally:
        await opened.aclose()


def user(text: str) -> dict[str, Any]:
    """A user message."""
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    """An assistant message."""
    return {"role": "assistant", "content": text}
