"""Fault paths and small parts: chain failures, attachments, group context bounds, engine state moves."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from adapters.base import Attachment
from agent.compression.engine import CompressionResult, ContextEngine
from gateway.conversation.answers import FAILURE_TEXT
from gateway.conversation.engine_state import export_engine_state, restore_engine_state
from gateway.conversation.group_context import GroupContext
from gateway.intake.keys import SessionKey
from gateway.store import CompactionInfo, EngineState
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory


async def test_a_failing_chain_answers_with_a_short_error_and_the_queue_goes_on(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    real_open = gateway.sessions.open_for_message
    calls = {"n": 0}

    async def flaky_open(key: SessionKey, user_id: str | None, message_key: str | None) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("a bug in the database layer")  # not an outage: nothing to wait for
        return await real_open(key, user_id, message_key)

    gateway.sessions.open_for_message = flaky_open  # type: ignore[method-assign]
    await adapter.say("first")
    await adapter.say("second")
    assert adapter.texts() == [FAILURE_TEXT, "ok"]
    assert "database" not in adapter.texts()[0]  # internals never reach the chat
    assert calls["n"] == 2  # answered, not retried


async def test_image_attachments_reach_the_model_as_image_parts(gateway_factory: GatewayFactory,
                                                                fake_llm: FakeLLMServer) -> None:
    _, adapter = await gateway_factory()
    inbound = adapter.inbound("what is this?")
    png = "data:image/png;base64,iVBORw0KGgo="
    inbound = type(inbound)(**{**inbound.__dict__, "attachments": (
        Attachment("image", "image/png", 10, "a.png", data_url=png),
        Attachment("file", "text/plain", 3, "a.txt", url="https://example.invalid/a.txt"))})
    await adapter._handler(inbound)
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is this?\n[Attached file: a.txt (text/plain, 3 bytes)]"}
    assert [p["type"] for p in content] == ["text", "image_url"]
    assert content[1]["image_url"]["url"] == png


async def test_a_message_with_only_a_file_still_says_what_was_sent(gateway_factory: GatewayFactory,
                                                                   fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    inbound = adapter.inbound("")
    inbound = type(inbound)(**{**inbound.__dict__, "attachments": (
        Attachment("file", "application/pdf", 48_213, "report.pdf", url="https://example.invalid/r.pdf"),)})
    await adapter._handler(inbound)
    sent = fake_llm.requests[-1].json["messages"][-1]
    assert sent == {"role": "user", "content": "[Attached file: report.pdf (application/pdf, 48,213 bytes)]"}
    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    stored = (await gateway.rt.store.messages.load_active(record.id)).messages
    assert {k: v for k, v in stored[0].items() if k != "origin"} == sent  # the origin is never sent


def test_group_context_keeps_the_newest_lines_for_a_bounded_number_of_sessions() -> None:
    context = GroupContext(limit=2, max_sessions=2)
    a, b, c = (SessionKey("discord", f"group:{n}") for n in "abc")
    for line in ("1", "2", "3"):
        context.add(a, line)
    context.add(b, "b1")
    context.add(c, "c1")  # a is the least recently used session and falls out
    assert context.take(a) == []
    assert context.take(b) == ["b1"] and context.take(b) == []
    off = GroupContext(limit=0)
    off.add(a, "x")
    assert off.take(a) == []


def test_group_context_is_bounded_in_characters_too() -> None:
    # 50 lines of 4,000-character chatter would put ~50K tokens in front of one question.
    context = GroupContext(limit=50, max_chars=10_000)
    key = SessionKey("discord", "group:a")
    for i in range(50):
        context.add(key, f"[bob] {i} " + "x" * 3_000)
    kept = context.take(key)
    assert sum(len(line) for line in kept) <= 10_000
    assert [line.split()[1] for line in kept] == ["47", "48", "49"]  # the newest lines
    context.add(key, "y" * 20_000)  # one line alone over the budget is cut, not dropped
    [line] = context.take(key)
    assert len(line) <= 10_000 and line.startswith("yyy")


class _CountingEngine(ContextEngine):
    """A minimal third-party engine: public counters only, no export_state/load_state."""

    def should_compress(self, prompt_tokens: int | None = None) -> bool:
        return False

    async def compress(self, messages: Sequence[Mapping[str, Any]], current_tokens: int | None = None,
                       focus_topic: str | None = None, force: bool = False) -> CompressionResult:
        return CompressionResult(list(messages), False, len(messages), len(messages), 0, 0)

    def update_from_response(self, usage: Any) -> None:
        return None


def test_engine_state_moves_for_engines_without_export() -> None:
    engine = _CountingEngine()
    engine.context_length = 50_000
    restore_engine_state(engine, EngineState(last_prompt_tokens=1234, compression_count=3))
    assert (engine.last_prompt_tokens, engine.compression_count) == (1234, 3)
    info = CompactionInfo(datetime(2025, 1, 1, tzinfo=UTC), "manual", 100, 40)
    state = export_engine_state(engine, info)
    assert state == EngineState(last_prompt_tokens=1234, compression_count=3, context_length=50_000,
                                last_compaction=info)
