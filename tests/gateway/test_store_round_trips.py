"""The gateway's per-message store traffic on SQLite: one read and one write transaction per message,
each a single round trip to a worker thread, and the store's token counts reused instead of re-tokenizing."""

from __future__ import annotations

from typing import Any

import aiosqlite.core
import pytest

import gateway.store.database as database
from agent.compression.compressor import ContextCompressor
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


async def test_a_message_costs_one_read_and_one_write_transaction(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    _gateway, adapter = await gateway_factory()
    answer_by_kind(fake_llm, "noted")
    await adapter.say("first message: creates the session")
    transactions: list[bool] = []
    driver_calls: list[Any] = []
    in_transaction, execute = database._in_transaction, aiosqlite.core.Connection._execute

    def counted(engine: Any, fn: Any, writing: bool) -> Any:
        transactions.append(writing)
        return in_transaction(engine, fn, writing)

    async def spied(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        driver_calls.append(fn)
        return await execute(self, fn, *args, **kwargs)

    monkeypatch.setattr(database, "_in_transaction", counted)
    monkeypatch.setattr(aiosqlite.core.Connection, "_execute", spied)
    for text in ("second", "third"):
        await adapter.say(text)
    # Per message: one read (the session, the chat's pins — another worker may have pinned — and whether the
    # store marks the message handled: a retry of a turn stored before a crash); the turn's write, which
    # stores its answer in the delivery ledger too, and the ledger's mark once the platform confirmed it.
    assert sorted(transactions) == [False] * 2 + [True] * 4
    assert driver_calls == []  # nothing went through aiosqlite's one-call-per-round-trip path
    assert adapter.texts()[-2:] == ["noted", "noted"]


async def test_live_counts_follow_the_store(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    answer_by_kind(fake_llm)
    for text in ("one", "two", "three"):
        await adapter.say(text)
    (live,) = gateway.sessions._live.values()
    stored = await gateway.rt.store.messages.load_active(live.id)
    assert live.held_counts == stored.token_counts and len(stored.token_counts) == 6


async def test_compress_hands_the_engine_the_stored_counts(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000})
    answer_by_kind(fake_llm)
    messages = chatter(80, words=30)
    await bulk_session(gateway, "dm:c1", messages)
    seen: list[dict[str, Any]] = []
    compress = ContextCompressor.compress

    async def spied(self: ContextCompressor, framed: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append({"framed": list(framed), **kwargs})
        return await compress(self, framed, *args, **kwargs)

    monkeypatch.setattr(ContextCompressor, "compress", spied)
    await adapter.say("/compress", user_id="boss")
    assert adapter.texts()[-1].startswith("Compressed: 80 → ")  # the conversation, without the system prompt
    (call,) = seen
    counter = gateway.rt.counter
    assert call["token_counts"] == [counter.count_message(m) for m in call["framed"]]
    (live,) = gateway.sessions._live.values()
    stored = await gateway.rt.store.messages.load_active(live.id)
    # The compressed set was stored with the counts the engine gave, which are exact.
    assert stored.token_counts == [counter.count_message(m) for m in stored.messages] == live.held_counts
