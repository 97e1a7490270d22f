"""`concord sessions search / show / export` redact secrets unless ``--raw`` is given."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.store import Store

KEY = "sk-proj-Zk3L9qP2mX7vB4nRtY8wQ1eA"
PASSWORD = "Hunter22x!"


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(tmp_path / "data"))

    async def seed() -> str:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'concord.db'}")
        try:
            session = await store.sessions.get_or_create_active("telegram", "dm:42")
            messages = [
                {"role": "user", "content": f"deploy with {KEY} please, my password is {PASSWORD}"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                    "name": "shell", "arguments": json.dumps({"command": f"psql -W {PASSWORD} deploydb"})}}]},
                {"role": "tool", "tool_call_id": "c1", "content": f"deploy ok, key {KEY}"},
            ]
            await store.messages.append(session.id, messages, [10, 10, 10])
            await store.sessions.set_details(session.id, goal=f"rotate the key {KEY}")
            return session.id
        finally:
            await store.aclose()

    (tmp_path / "data").mkdir()
    return asyncio.run(seed())


def _out(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_search_redacts_unless_raw(seeded: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["sessions", "search", "deploy"]) == 0
    shown = _out(capsys)
    assert "deploy" in shown and KEY[:12] not in shown and PASSWORD not in shown and "[REDACTED]" in shown
    assert main(["sessions", "search", "deploy", "--raw"]) == 0
    assert KEY[:12] in _out(capsys)


def test_export_redacts_every_string_unless_raw(seeded: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["sessions", "export", seeded]) == 0
    exported = _out(capsys)
    lines = [json.loads(line) for line in exported.splitlines()]
    assert len(lines) == 3 and lines[1]["tool_calls"][0]["function"]["name"] == "shell"
    assert KEY not in exported and PASSWORD not in exported
    assert main(["sessions", "export", seeded, "--raw"]) == 0
    raw = _out(capsys)
    assert KEY in raw and PASSWORD in raw


def test_show_redacts_unless_raw(seeded: str, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["sessions", "show", seeded]) == 0
    shown = _out(capsys)
    assert "dm:42" in shown and "rotate the key [REDACTED]" in shown and KEY not in shown
    assert main(["sessions", "show", seeded, "--raw"]) == 0
    assert KEY in _out(capsys)
