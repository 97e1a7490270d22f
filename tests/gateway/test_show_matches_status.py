"""`concord sessions show` reports the same figures as /status and /compress in the chat (also where its own
environment names no model), and `restore` keeps later turns; /compress with nothing to do says why."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from gateway.cli.main import main
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


def _cli_env(monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer, tmp_path: Path, *, llm: bool = True) -> None:
    """The command line's environment: the gateway's settings, or (``llm=False``) none about the model."""
    for key in list(os.environ):
        if key.startswith("CONCORD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONCORD_STORAGE__DATA_DIR", str(tmp_path))
    if llm:
        monkeypatch.setenv("CONCORD_LLM__BASE_URL", fake_llm.openai_base_url)
        monkeypatch.setenv("CONCORD_LLM__MODEL", "fake-model")
        monkeypatch.setenv("CONCORD_LLM__CONTEXT_LENGTH", "200000")
    monkeypatch.setenv("CONCORD_MEMORY__DIRECTORY", str(tmp_path / "memory"))


@pytest.mark.parametrize(("usage", "cli_llm"), [(True, True), (False, True), (True, False)])
async def test_sessions_show_prints_the_status_figures(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str], usage: bool, cli_llm: bool) -> None:
    gateway, adapter = await gateway_factory()
    for i in range(3):
        fake_llm.reply(f"answer {i}", usage={"prompt_tokens": 1234 + i, "completion_tokens": 5} if usage else None)
        await adapter.say(f"question {i} " + "words " * 40)
    await adapter.say("/status")
    in_chat = adapter.texts()[-1]
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None
    await gateway.aclose()
    # Without the model's settings the command line's own window would be the 128K default, not the 200K the
    # gateway ran with: the figures must still be the chat's.
    _cli_env(monkeypatch, fake_llm, tmp_path, llm=cli_llm)
    capsys.readouterr()
    requests = len(fake_llm.requests)
    assert await asyncio.to_thread(main, ["sessions", "show", record.id]) == 0
    shown = capsys.readouterr().out
    # "Next request" counts the system prompt, whose per-user memory part only the chat knows (a DM's
    # stored key names the chat, not the user): the CLI's figure may differ by those few tokens.
    # Without the model's settings the command line cannot name the model.
    def steady(text: str) -> str:
        skipped = ("Next request: ",) if cli_llm else ("Next request: ", "Engine: ")
        return "\n".join(line for line in text.splitlines() if not line.startswith(skipped))

    assert steady(in_chat) in steady(shown), (in_chat, shown)
    assert "Next request: " in in_chat and "Next request: " in shown
    assert ("1,236 / 200,000" in in_chat) is usage
    assert len(fake_llm.requests) == requests  # showing a session calls no LLM


async def test_restore_keeps_the_turns_added_after_the_compaction(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8000},
                                             compression={"protect_first_n": 1, "protect_last_n": 2})
    for i in range(6):
        fake_llm.reply(f"answer {i}")
        await adapter.say(f"question {i} " + "words " * 300)
    fake_llm.reply("## Goal\nsummary of the talk")
    await adapter.say("/compress", user_id="boss")
    assert adapter.texts()[-1].startswith("Compressed")
    fake_llm.reply("answer after")
    await adapter.say("question after the compaction")
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None
    await gateway.aclose()
    _cli_env(monkeypatch, fake_llm, tmp_path)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["sessions", "restore", record.id, "--before-compaction", "1"]) == 0
    said = capsys.readouterr().out
    assert "restored the 12 messages from before compaction 1 and kept the 2 added since" in said, said
    assert await asyncio.to_thread(main, ["sessions", "export", record.id]) == 0
    contents = [json.loads(line).get("content") for line in capsys.readouterr().out.splitlines()]
    assert contents[:2] == ["question 0 " + "words " * 300, "answer 0"]
    assert contents[-2:] == ["question after the compaction", "answer after"]
    assert len(contents) == 14
    assert not any("summary of the talk" in (c or "") for c in contents)


async def test_a_compress_the_chat_reports_is_the_one_sessions_show_lists(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000})
    session_id = await bulk_session(gateway, "dm:c1", chatter(54, words=60))
    answer_by_kind(fake_llm)
    await adapter.say("/compress", user_id="boss")
    said = re.fullmatch(r"Compressed: (\d+) → (\d+) messages, ([\d,]+) → ([\d,]+) tokens \(\d+% saved\)\.",
                        adapter.texts()[-1])
    assert said is not None, adapter.texts()[-1]
    assert said[1] == "54"  # the conversation's messages, not counting the system prompt (as /status counts)
    await adapter.say("/status")
    assert f"Messages: {said[2]}\n" in adapter.texts()[-1]
    await gateway.aclose()
    _cli_env(monkeypatch, fake_llm, tmp_path)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["sessions", "show", session_id]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "manual /compress" in line and "→" in line)
    assert f"{said[1]} → {said[2]}" in row and f"{said[3]} → {said[4]}" in row, row


async def test_nothing_to_compress_says_why_in_tokens(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    engine = gateway.rt.new_engine()
    await bulk_session(gateway, "dm:c1", chatter(52))
    requests = len(fake_llm.requests)
    await adapter.say("/compress", user_id="boss")
    reply = adapter.texts()[-1]
    assert reply.startswith("Nothing to compress yet: all 52 messages (")
    assert f"up to {engine.tail_token_budget:,} tokens" in reply  # type: ignore[attr-defined]
    assert f"{engine.threshold_tokens:,}-token compression threshold" in reply
    assert "sized in tokens, not messages" in reply
    assert len(fake_llm.requests) == requests  # answered without an LLM call
