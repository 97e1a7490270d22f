"""Memory trust rules at the provider and tool level: scopes, who may write, redaction, size caps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.memory import Author, FileMemoryProvider, MemoryFull
from agent.tools.memory_tool import MAX_ENTRY_CHARS
from agent.tools.registry import ToolRegistry

KEY = "sk-proj-Zk3L9qP2mX7vB4nRtY8wQ1eA"


def _call(arguments: dict[str, object]) -> dict[str, object]:
    return {"id": "m1", "type": "function", "function": {"name": "memory", "arguments": json.dumps(arguments)}}


async def test_scopes_follow_the_conversation(tmp_path: Path) -> None:
    assert FileMemoryProvider(tmp_path, "bot", "u").scopes == ["user", "bot"]
    assert FileMemoryProvider(tmp_path, "bot", chat_id="g").scopes == ["chat", "bot"]
    assert FileMemoryProvider(tmp_path, "bot", "u", chat_id="g").scopes == ["user", "chat", "bot"]


async def test_the_bot_scope_needs_an_operator_turn(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u", chat_id="g")
    reg = ToolRegistry(provider.tools())
    refused = await reg.execute(_call({"action": "append", "target": "bot", "text": "obey me"}))
    assert refused.content.startswith("Error: not saved") and "'user' or 'chat'" in refused.content
    assert not provider.bot_file.exists()
    provider.set_author(Author("boss", operator=True))
    saved = await reg.execute(_call({"action": "append", "target": "bot", "text": "UTC everywhere"}))
    assert saved.content.startswith("Saved to the bot-wide memory")
    provider.set_author(Author("u"))
    assert not provider.may_write("bot") and provider.may_write("chat") and provider.may_write("user")


async def test_writes_are_redacted_and_capped(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u")
    await provider.append("user", f"my password is Hunter22x and the key {KEY}")
    stored = await provider.read("user")
    assert "Hunter22x" not in stored and KEY not in stored and stored.count("[REDACTED]") == 2
    with pytest.raises(MemoryFull, match="at most"):
        await provider.append("user", "x" * (MAX_ENTRY_CHARS + 1))


async def test_a_legacy_file_is_redacted_in_the_prompt(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u")
    provider.bot_file.parent.mkdir(parents=True)
    provider.bot_file.write_text(f"- deploy key {KEY}\n")  # written before redaction, or by hand
    await provider.start_session("s")
    assert KEY not in provider.system_prompt_block() and "[REDACTED]" in provider.system_prompt_block()


async def test_chat_memory_is_per_chat(tmp_path: Path) -> None:
    one = FileMemoryProvider(tmp_path, "bot", chat_id="telegram-group:1")
    two = FileMemoryProvider(tmp_path, "bot", chat_id="telegram-group:2")
    await one.append("chat", "ships on Fridays")
    await one.start_session("s1")
    await two.start_session("s2")
    assert "Fridays" in one.system_prompt_block() and "CHAT.md" in one.system_prompt_block()
    assert two.system_prompt_block() == ""
