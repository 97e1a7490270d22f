"""Runaway models and hostile payloads through the whole gateway (fake LLM server, real store): a trickling
stream, a small window with a model that always answers at length, a message larger than the window, a huge
answer, context overflow on every call, deeply nested tool arguments, NUL on PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent.compression.summary import SUMMARIZER_SYSTEM
from agent.tokens import get_counter
from bench.scratch_db import scratch_postgres
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter, is_summary_request, make_settings

VOCABULARY = "the gateway keeps every session inside its window by compressing older turns".split()


def words(tokens: int) -> str:
    """About ``tokens`` tokens of prose (one token per word of this vocabulary)."""
    return " ".join(VOCABULARY[i % len(VOCABULARY)] for i in range(tokens))


async def test_a_trickling_answer_ends_at_the_deadline_and_the_chat_stays_usable(
    gateway_factory: GatewayFactory, fake_llm: FakeLLMServer
) -> None:
    get_counter()
    _, adapter = await gateway_factory(llm={"timeout_seconds": 1.0})
    fake_llm.reply(words(300), trickle=0.4, chunk_delay=0.4, text_pieces=20)
    started = time.monotonic()
    await adapter.say("tell me a story")
    assert time.monotonic() - started < 4
    assert adapter.texts()[-1].startswith("⚠️ The model did not finish its answer in time")
    assert len(fake_llm.requests) == 1  # stopped at the deadline, not asked again
    fake_llm.reply("a short one")
    await adapter.say("a short one, then")
    assert adapter.texts()[-1] == "a short one"


def _long_answers(server: FakeLLMServer) -> dict[str, int]:
    """A model that always answers with as many tokens as it may (3,660 when the request sets no cap), and a
    summary model answering briefly; counts both kinds of call."""
    calls = {"chat": 0, "summary": 0}

    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            calls["summary"] += 1
            return Reply("## Goal\nThe user asks questions and gets long answers.")
        calls["chat"] += 1
        return Reply(words(min(body.get("max_tokens") or 3_660, 3_660) - 8), finish_reason="length")

    server.responder = respond
    return calls


async def test_a_4096_window_with_a_model_that_always_answers_at_length_keeps_answering(
    gateway_factory: GatewayFactory, fake_llm: FakeLLMServer
) -> None:
    fake_llm.context_window = 4_096  # the server refuses what does not fit, like llama.cpp
    calls = _long_answers(fake_llm)
    _, adapter = await gateway_factory(llm={"context_length": 4_096})
    for turn in range(50):
        await adapter.say(f"question {turn}: explain it all again")
        assert not adapter.texts()[-1].startswith("⚠️"), f"turn {turn}: {adapter.texts()[-3:]}"
    window_errors = [r for r in fake_llm.requests if r.prompt_tokens + (r.json.get("max_tokens") or 0) > 4_096]
    assert window_errors == []
    assert all(r.json.get("max_tokens") == 1_024 for r in fake_llm.requests if not is_summary_request(r.json))
    assert calls["chat"] == 50 and calls["summary"] <= 50
    await adapter.say("/status", admin_hint=True)
    status = adapter.texts()[-1]
    assert "Next request: " in status and "tool schemas" in status


async def test_a_message_larger_than_the_window_is_answered_not_wedged(
    gateway_factory: GatewayFactory, fake_llm: FakeLLMServer
) -> None:
    fake_llm.context_window = 200_000
    _long_answers(fake_llm)
    gateway, adapter = await gateway_factory()
    diff = "\n".join(f"+ line {i}: " + words(40) for i in range(10_500))
    assert get_counter().count_text(diff) > 445_000
    await adapter.say(diff)
    assert not adapter.texts()[-1].startswith("⚠️")
    sent = [r for r in fake_llm.requests if not is_summary_request(r.json)]
    assert sent and all(r.prompt_tokens <= 200_000 for r in sent)
    user_text = sent[-1].messages[-1]["content"]
    assert user_text.startswith("+ line 0: ") and "were cut here" in user_text and "line 10499" in user_text
    await adapter.say("and what about line 3?")
    assert not adapter.texts()[-1].startswith("⚠️")
    # Nothing lost: the whole paste is stored (archived with the compaction) and searchable.
    session = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert session is not None
    every = await gateway.rt.store.messages.export(session.id, include_archived=True)
    assert any(r.message.get("content") == diff for r in every)
    assert await gateway.rt.store.search("10499", session_id=session.id)


async def test_a_huge_answer_is_cut_to_a_few_messages(gateway_factory: GatewayFactory,
                                                      fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("x" * 1_000_000)
    await adapter.say("write a lot")
    assert len(adapter.sent) <= 12
    assert "reply cut here: " in adapter.texts()[-1] and "The whole answer is stored" in adapter.texts()[-1]
    session = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    stored = (await gateway.rt.store.messages.load_active(session.id)).messages
    assert any(m.get("content") == "x" * 1_000_000 for m in stored)


async def test_overflow_on_every_call_stops_trying_instead_of_looping(
    gateway_factory: GatewayFactory, fake_llm: FakeLLMServer
) -> None:
    _, adapter = await gateway_factory(llm={"context_length": 8_000})
    summaries = 0

    def respond(body: dict[str, Any]) -> Any:
        nonlocal summaries
        if is_summary_request(body):
            summaries += 1
            return Reply("## Goal\nchat")
        return "will not fit"

    fake_llm.responder = respond
    for turn in range(6):
        await adapter.say(f"warm-up {turn} " + words(200))
    fake_llm.context_window = 50  # from now on every chat call overflows
    before = len(adapter.sent)
    for turn in range(12):
        await adapter.say(f"turn {turn}")
    notices = adapter.texts()[before:]
    assert summaries <= 3
    assert sum("Compacting context" in t for t in notices) <= 1
    assert all("/compress" not in t for t in notices[-3:])
    assert notices[-1].startswith("⚠️") and "/new" in notices[-1]


async def test_tool_arguments_nested_too_deep_become_a_tool_error(gateway_factory: GatewayFactory,
                                                                   fake_llm: FakeLLMServer) -> None:
    _, adapter = await gateway_factory()
    nested = '{"query": ' + "[" * 100_000 + "]" * 100_000 + "}"
    fake_llm.reply("", tool_calls=[{"name": "search_history", "arguments": nested}])
    fake_llm.reply("I could not search, sorry.")
    await adapter.say("look it up")
    assert adapter.texts()[-1] == "I could not search, sorry."
    [result] = [m for m in fake_llm.requests[-1].messages if m["role"] == "tool"]
    assert "nested" in result["content"] and result["content"].startswith("Error:")


@pytest.fixture
async def private_postgres(postgres_url: str) -> AsyncIterator[str]:
    async with scratch_postgres(postgres_url, "concord_nul") as url:
        yield url


async def test_nul_and_lone_surrogates_are_stored_on_postgresql(private_postgres: str, fake_llm: FakeLLMServer,
                                                                tmp_path: Path) -> None:
    settings = make_settings(fake_llm, tmp_path, storage={"database_url": private_postgres})
    adapter = ScriptedAdapter()
    gateway = Gateway(await build_runtime(settings), [adapter])
    await gateway.start()
    try:
        fake_llm.reply("answer with a \x00 NUL and a \ud800 half")
        fake_llm.reply("", tool_calls=[{"name": "search_history", "arguments": json.dumps({"query": "a\x00b"})}])
        fake_llm.reply("second answer")
        await adapter.say("question with \x00 inside")
        await adapter.say("again \udfff")
        assert adapter.texts() == ["answer with a \ufffd NUL and a \ufffd half", "second answer"]
        session = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
        stored = json.dumps((await gateway.rt.store.messages.load_active(session.id)).messages, ensure_ascii=False)
        assert "question with \ufffd inside" in stored and "again \ufffd" in stored
        assert "DBAPIError" not in stored  # the NUL in the tool's argument never reached the query
    finally:
        await gateway.aclose(grace_seconds=5)


def test_the_summary_system_prompt_is_what_the_fake_recognises() -> None:
    assert is_summary_request({"messages": [{"role": "system", "content": SUMMARIZER_SYSTEM}]})
