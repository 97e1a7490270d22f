"""File memory: MEMORY.md per bot, USER.md per user, frozen snapshot, pre-compress rescue, the memory tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.memory import FileMemoryProvider, MemoryFull, MemoryProvider, system_prompt_with_memory
from agent.tools.registry import ToolRegistry


def _call(arguments: dict[str, object]) -> dict[str, object]:
    return {"id": "m1", "type": "function", "function": {"name": "memory", "arguments": json.dumps(arguments)}}


async def test_files_live_per_bot_and_per_user(tmp_path: Path) -> None:
    alice = FileMemoryProvider(tmp_path, "bot1", "alice")
    bob = FileMemoryProvider(tmp_path, "bot1", "bob")
    await alice.append("user", "prefers   metric\nunits")
    await alice.append("bot", "the deploy host is web-3")
    assert (tmp_path / "users" / "alice" / "USER.md").read_text() == "- prefers metric units\n"
    assert await bob.read("user") == ""
    assert await bob.read("bot") == "- the deploy host is web-3\n"


async def test_unsafe_ids_cannot_escape_the_root(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path / "mem", "../../etc", "../x/../../y")
    await provider.append("user", "fact")
    await provider.append("bot", "fact")
    for path in (provider.user_file, provider.bot_file):
        assert path is not None and path.resolve().is_relative_to((tmp_path / "mem").resolve())


async def test_snapshot_is_frozen_at_session_start(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u1")
    assert provider.system_prompt_block() == ""
    await provider.append("user", "likes tea")
    await provider.start_session("s1")
    frozen = provider.system_prompt_block()
    assert "likes tea" in frozen and "USER.md" in frozen
    await provider.append("user", "hates coffee")
    assert provider.system_prompt_block() == frozen  # the prompt stays cache-stable
    assert "hates coffee" in await provider.read("user")
    await provider.start_session("s2")
    assert "hates coffee" in provider.system_prompt_block()


async def test_size_cap(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u", max_file_chars=40)
    await provider.append("user", "a" * 20)
    with pytest.raises(MemoryFull, match=r"USER\.md is full"):
        await provider.append("user", "b" * 20)


async def test_no_user_means_no_user_memory(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot")
    with pytest.raises(LookupError):
        await provider.read("user")
    reg = ToolRegistry(provider.tools())
    outcome = await reg.execute(_call({"action": "append", "target": "user", "text": "x"}))
    assert not outcome.ok and "must be one of 'bot'" in outcome.content
    await provider.start_session("s")  # bot memory only, nothing written yet
    assert provider.system_prompt_block() == ""


async def test_pre_compress_rescues_remember_requests(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u")
    messages = [
        {"role": "user", "content": "hi\nRemember that my staging port is 8443"},
        {"role": "assistant", "content": "remember that I am an assistant"},  # not the user's
        {"role": "user", "content": [{"type": "text", "text": "please remember: deploys only on Tuesdays"}]},
        {"role": "user", "content": "Remember that my staging port is 8443"},  # already rescued
    ]
    await provider.on_pre_compress(messages)
    content = await provider.read("user")
    assert content == "- my staging port is 8443\n- deploys only on Tuesdays\n"
    await provider.on_pre_compress(messages)
    assert await provider.read("user") == content


async def test_pre_compress_stops_quietly_when_full(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u", max_file_chars=30)
    await provider.on_pre_compress([{"role": "user", "content": "remember that " + "z" * 100}])
    assert await provider.read("user") == ""


async def test_memory_tool_read_and_append(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u")
    reg = ToolRegistry(provider.tools())
    assert (await reg.execute(_call({"action": "read"}))).content == "The user memory is empty."
    saved = await reg.execute(_call({"action": "append", "text": "name is Ana"}))
    assert saved.ok and saved.content.startswith("Saved to the user memory (USER.md")
    assert (await reg.execute(_call({"action": "read", "target": "user"}))).content == "- name is Ana\n"
    missing = await reg.execute(_call({"action": "append"}))
    assert "'text' is required" in missing.content
    bad = await reg.execute(_call({"action": "forget"}))
    assert not bad.ok and "must be one of 'read', 'append'" in bad.content


async def test_memory_tool_reports_a_full_file(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u", max_file_chars=10)
    reg = ToolRegistry(provider.tools())
    outcome = await reg.execute(_call({"action": "append", "text": "a long fact that does not fit"}))
    assert not outcome.ok and "MemoryFull" in outcome.content


async def test_base_provider_is_a_no_memory_provider() -> None:
    base = MemoryProvider()
    await base.start_session("s")
    await base.on_pre_compress([{"role": "user", "content": "remember that x is 1"}])
    await base.on_session_switch("a", "b")
    assert base.system_prompt_block() == "" and base.tools() == []


async def test_system_prompt_with_memory(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path, "bot", "u")
    assert system_prompt_with_memory("Base.", None) == "Base."
    await provider.start_session("s")
    assert system_prompt_with_memory("Base.", provider) == "Base."
    await provider.append("bot", "uses UTC")
    await provider.start_session("s")
    assert system_prompt_with_memory("Base.", provider) == "Base.\n\n## What you remember (MEMORY.md)\n- uses UTC"
