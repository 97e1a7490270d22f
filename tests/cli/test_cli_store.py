"""`concord db` and `concord sessions` against a real SQLite file, as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.store import Store


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(tmp_path / "fresh" / "data"))
    return tmp_path / "fresh" / "data"


async def _seed(url: str) -> str:
    store = await Store.open(url)
    try:
        session = await store.sessions.get_or_create_active("console", "dm:alice")
        old = [{"role": "user", "content": f"the deploy key rotation happens on day {i}"} for i in range(6)]
        await store.messages.append(session.id, old, [12] * len(old))
        active = await store.messages.load_active(session.id)
        summary = [{"role": "user", "content": "summary of earlier turns"}]
        await store.compactions.replace_active(session.id, summary, [5], active.watermark)
        return session.id
    finally:
        await store.aclose()


def test_db_upgrade_creates_the_data_dir(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["db", "upgrade"]) == 0
    assert (data_dir / "concord.db").is_file()
    assert "latest schema" in capsys.readouterr().out


def test_sessions_commands(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session_id = asyncio.run(_seed(f"sqlite+aiosqlite:///{data_dir / 'concord.db'}"))
    capsys.readouterr()

    assert main(["sessions", "list"]) == 0
    assert session_id[:8] in capsys.readouterr().out

    assert main(["sessions", "show", session_id]) == 0
    shown = capsys.readouterr().out
    assert "6 → 1" in shown and "dm:alice" in shown

    assert main(["sessions", "export", session_id]) == 0
    active = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert active == [{"role": "user", "content": "summary of earlier turns"}]

    assert main(["sessions", "export", session_id, "--include-archived"]) == 0
    everything = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(everything) == 7

    assert main(["sessions", "search", "rotation"]) == 0
    assert "yes" in capsys.readouterr().out  # hits are archived rows

    assert main(["sessions", "restore", session_id, "--before-compaction", "1"]) == 0
    capsys.readouterr()
    assert main(["sessions", "export", session_id]) == 0
    restored = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [m["content"] for m in restored] == [f"the deploy key rotation happens on day {i}" for i in range(6)]


def test_unknown_session_is_a_clear_error(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sessions", "show", "no-such-id"]) == 1
    assert "not found" in capsys.readouterr().err
    assert main(["sessions", "restore", "no-such-id", "--before-compaction", "1"]) == 1


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


@pytest.mark.parametrize("url", [
    "postgresql+asyncpg://bot:hunter2pw@127.0.0.1:{port}/concord",
    "sqlite+aiosqlite:////proc/no-such-dir/concord.db",
])
def test_unreachable_database_is_one_line_without_the_password(
        data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str) -> None:
    monkeypatch.setenv("CONCORD_STORAGE__DATABASE_URL", url.format(port=_closed_port()))
    assert main(["sessions", "list"]) == 3
    assert main(["db", "upgrade"]) == 3
    err = capsys.readouterr().err
    assert err.count("concord: error: cannot open the database") == 2
    assert "hunter2pw" not in err and "Traceback" not in err


async def test_upgrade_database_translates_connection_failures() -> None:
    from gateway.store import StorageUnavailable, upgrade_database

    with pytest.raises(StorageUnavailable, match=r"bot:\*\*\*@127\.0\.0\.1"):
        await upgrade_database(f"postgresql+asyncpg://bot:hunter2pw@127.0.0.1:{_closed_port()}/concord")
