"""A planted string, a model that spreads it around, and where it still is: every column of every table of a
database (SQLite's full-text shadow tables and PostgreSQL's tsvector column included), and every file under a
directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import is_summary_request

# Not shaped like a secret, so only erasure (never redaction) can take it out.
PLANT = "zephyr-lighthouse-7781"
PIECE = "lighthouse-7781"


def echoing_model(server: FakeLLMServer) -> None:
    """A model that repeats what it is told: answers quote the user, the memory tool saves what the user asks to
    remember, and summaries quote every line of their prompt that holds the planted text (the worst case for a
    deleted text; only those, so that the summary stays within the length it is asked for and is kept whole)."""

    def respond(body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        last = messages[-1]
        if is_summary_request(body):
            quoted = [line for line in str(last["content"]).splitlines() if PLANT in line]
            return Reply("## Goal\n" + "\n".join(quoted or ["The users chatted."]))
        if last["role"] == "tool":
            return Reply(f"Saved. I will remember {PLANT}.")
        text = str(last["content"])
        if "please remember" in text:
            return Reply("", tool_calls=[{"name": "memory", "arguments": {
                "action": "append", "text": f"The user's locker code is {PLANT}"}}])
        return Reply(f"You said: {text[-60:]}")

    server.responder = respond


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
