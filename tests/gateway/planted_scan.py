"""Where a planted string still is: every column of every table of a database (SQLite's full-text shadow tables
and PostgreSQL's tsvector column included), and every file under a directory."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

# SQLite's own files: their pages hold what a transaction freed until the pages are reused (the SQL scan covers
# what the database holds).
SQLITE_FILES = (".db", ".db-wal", ".db-shm", ".db.lock")


async def tables_holding(engine: AsyncEngine, needle: str) -> list[str]:
    """``table.column`` (or ``table`` on PostgreSQL, whose rows are read whole as text) of every place the
    database holds ``needle``, case-insensitively."""
    wanted = needle.lower().encode()
    found: list[str] = []
    async with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            names = [r[0] for r in await conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))]
            for name in names:
                result = await conn.execute(text(f'SELECT * FROM "{name}"'))
                columns = list(result.keys())
                for row in result:
                    for column, value in zip(columns, row, strict=True):
                        raw = value if isinstance(value, bytes) else str(value).encode()
                        if wanted in raw.lower():
                            found.append(f"{name}.{column}")
        else:
            names = [r[0] for r in await conn.execute(text(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"))]
            for name in names:
                rows = await conn.execute(text(f'SELECT t::text FROM "{name}" t'))
                found += [name for (row,) in rows if wanted in row.lower().encode()]
    return sorted(set(found))


def files_holding(root: Path, needle: str, *, skip: tuple[str, ...] = SQLITE_FILES) -> list[str]:
    """Every file under ``root`` (but the SQLite database's own) whose bytes hold ``needle``, case-insensitively."""
    wanted = needle.lower().encode()
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")
                  if path.is_file() and not path.name.endswith(skip) and wanted in path.read_bytes().lower())
