"""Deletions and /forget through the router, on SQLite and PostgreSQL: a deleted message leaves no
trace of its text in any table (the full-text index, the summaries, the engine state, the compaction archive,
the ledger's answers included), in search, in memory files or in a restore; a tombstone says who, when, and
that something was deleted."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path
from typing import Any

from adapters.base import Inbound
from gateway.app import Gateway
from gateway.conversation.sweep import sweep
from gateway.store import Store
from gateway.store.erasure import FTS_SECURE_DELETE
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter
from tests.gateway.planted_scan import PIECE, PLANT, echoing_model, files_holding, tables_holding

ALSO = "quartz-harbor-4410"


def deletion(message: Inbound) -> Inbound:
    """The platform's report that ``message`` was deleted (Discord names no sender when it was not cached)."""
    return dataclasses.replace(message, kind="delete", text="", user_id="", user_name="")


async def conversation(adapter: ScriptedAdapter, planted: str) -> Inbound:
    """A DM conversation compacted once with the planted message in its middle, which goes on after; returns
    the planted message."""
    await adapter.say("hello there")
    secret = adapter.inbound(f"please remember that my locker code is {planted}")
    await adapter._handler(secret)  # type: ignore[misc]
    for topic in range(6):
        await adapter.say(f"tell me about topic {topic} " + "in detail " * 200)
    await adapter.say("/compress", user_id="boss")
    assert adapter.texts()[-1].startswith("Compressed:"), adapter.texts()[-1]
    await adapter.say("and one more thing")
    return secret


async def start(gateway_factory: GatewayFactory, storage: dict[str, Any]) -> tuple[Gateway, ScriptedAdapter]:
    return await gateway_factory(storage=storage, llm={"context_length": 16_000},
                                 compression={"protect_first_n": 1, "protect_last_n": 4})


async def test_a_deleted_message_leaves_no_trace_but_a_tombstone(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, backend_storage: dict[str, Any], tmp_path: Path) -> None:
    gateway, adapter = await start(gateway_factory, backend_storage)
    echoing_model(fake_llm)
    secret = await conversation(adapter, PLANT)
    store: Store = gateway.rt.store
    before = await tables_holding(store.engine, PLANT)
    # The scan sees it everywhere it was: the row and its copies, the summary and the engine state, the answers.
    assert {"messages", "sessions", "deliveries"} <= {place.split(".")[0] for place in before}
    assert files_holding(tmp_path, PLANT) != []  # the memory file
    await adapter._handler(deletion(secret))  # type: ignore[misc]

    for needle in (PLANT, PIECE):
        assert await tables_holding(store.engine, needle) == []
        assert files_holding(tmp_path, needle) == []
        assert await store.search(needle) == []
    record = await store.sessions.get_active("discord", "dm:c1")
    rows = await store.messages.export(record.id, include_archived=True)
    tombstones = [r for r in rows if str(r.message["content"]).startswith("[Ann deleted the message they sent")]
    assert tombstones and all(r.message["origin"]["author"] == "discord:u1" for r in tombstones)
    active = (await store.messages.load_active(record.id)).messages
    assert "rebuilt without a model" in str(active)  # the summary in view was written again
    assert "rebuilt without a model" in str(record.engine.previous_summary)
    history = await store.compactions.history(record.id)
    assert history[-1].reason == "erasure"
    # SQLite before 3.42 keeps a replaced row's words in full-text pages until the next sweep rewrites them.
    marked = await store.chat_settings.get("store", "fts-purge-due")
    assert (marked is not None) == (store.dialect == "sqlite" and not FTS_SECURE_DELETE)
    await sweep(gateway.router.sessions)
    assert await store.chat_settings.get("store", "fts-purge-due") is None
    # Undoing the compaction brings back the messages it replaced: the tombstone, never the text.
    await store.compactions.restore(record.id, before_compaction=1)
    restored = (await store.messages.load_active(record.id)).messages
    assert PLANT not in str(restored) and "[Ann deleted the message" in str(restored)
    # The conversation goes on, and the next request carries no trace either.
    await adapter.say("what do you know about me?")
    assert PIECE not in str(fake_llm.requests[-1].json)
    assert adapter.sent[-1][1].startswith("You said:")


async def test_a_deletion_before_the_answer_means_no_answer(gateway_factory: GatewayFactory,
                                                            fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    fake_llm.reply("slow first answer", delay=0.5)
    first = adapter.inbound("first question")
    regret = adapter.inbound(f"my code is {PLANT}")
    adapter._dispatch(first)
    await asyncio.sleep(0.15)  # the first turn is waiting for its answer
    adapter._dispatch(regret)
    await asyncio.sleep(0.05)
    adapter._dispatch(deletion(regret))
    await adapter._drain(10)
    assert adapter.texts() == ["slow first answer"]
    assert len(fake_llm.requests) == 1
    assert await tables_holding(gateway.rt.store.engine, PLANT) == []


async def test_forget_me_erases_one_users_messages_and_nobody_elses(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, backend_storage: dict[str, Any], tmp_path: Path) -> None:
    gateway, adapter = await start(gateway_factory, backend_storage)
    echoing_model(fake_llm)
    group = {"chat_type": "group", "chat_id": "g1"}
    await adapter.say(f"hi bot, my code is {PLANT}", user_name="Ann", user_id="u1", mentions_bot=True, **group)
    await adapter.say(f"mine is {ALSO}", user_name="Bob", user_id="u2", mentions_bot=True, **group)
    await adapter.say(f"ann also says {PLANT} again", user_name="Ann", user_id="u1", **group)  # observed
    await adapter.say("/pin always answer in French", user_name="Ann", user_id="u1", admin_hint=True, **group)
    await adapter.say("/forget me", user_name="Ann", user_id="u1", **group)
    assert adapter.texts()[-1].startswith("Forgotten: "), adapter.texts()[-1]
    store: Store = gateway.rt.store
    assert await tables_holding(store.engine, PIECE) == []
    assert await tables_holding(store.engine, "answer in French") == []  # her pin went too
    assert files_holding(tmp_path, PIECE) == []
    assert await tables_holding(store.engine, ALSO) != []  # Bob's messages stay
    record = await store.sessions.get_active("discord", "group:g1")
    contents = [str(m["content"]) for m in (await store.messages.load_active(record.id)).messages]
    assert any(c.startswith("[Ann asked to be forgotten") for c in contents)
    assert any(c.startswith(f"[Bob] mine is {ALSO}") for c in contents)


async def test_only_admins_forget_someone_else(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    group = {"chat_type": "group", "chat_id": "g1"}
    await adapter.say(f"note {PLANT}", user_name="Bob", user_id="u2", mentions_bot=True, **group)
    await adapter.say("/forget discord:u2", user_name="Ann", user_id="u1", **group)
    assert adapter.texts()[-1].startswith("Sorry, only admins")
    await adapter.say("/forget", user_name="Ann", user_id="u1", **group)
    assert adapter.texts()[-1].startswith("Usage: /forget me")
    await adapter.say("/forget discord:u2", user_name="Cy", user_id="boss", **group)
    assert adapter.texts()[-1].startswith("Forgotten: 1 stored copy of discord:u2's messages")
    assert await tables_holding(gateway.rt.store.engine, PLANT) == []


async def test_a_deletion_on_another_worker_reaches_this_workers_session(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, redis_url: str, tmp_path: Path) -> None:
    shared = {"url": redis_url, "key_prefix": f"concord-test:{uuid.uuid4().hex}:"}
    _first, a = await gateway_factory(redis=shared)
    second, b = await gateway_factory(redis=shared)
    echoing_model(fake_llm)
    secret = b.inbound(f"please remember that my locker code is {PLANT}")
    await second.router.handle(secret, b)  # the second worker writes the memory entry
    await a.say("and hello again")  # the first builds the session: the entry is in its prompt's memory snapshot
    assert PIECE in str(fake_llm.requests[-1].json["messages"][0])
    await second.router.handle(deletion(secret), b)
    await a.say("what do you know about me?")
    assert PIECE not in str(fake_llm.requests[-1].json)  # neither the message nor the memory entry
    assert files_holding(tmp_path, PIECE) == []


async def test_summaries_out_of_view_are_withdrawn_and_the_one_in_view_rebuilt(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await start(gateway_factory, {})
    echoing_model(fake_llm)
    secret = await conversation(adapter, PLANT)
    for topic in range(6):  # a second compaction: the first summary is archived, the second carries it on
        await adapter.say(f"and later topic {topic} " + "in detail " * 200)
    await adapter.say("/compress", user_id="boss")
    assert adapter.texts()[-1].startswith("Compressed:"), adapter.texts()[-1]
    store: Store = gateway.rt.store
    record = await store.sessions.get_active("discord", "dm:c1")
    await adapter._handler(deletion(secret))  # type: ignore[misc]
    rows = await store.messages.export(record.id, include_archived=True)
    summaries = [str(r.message["content"]) for r in rows if str(r.message["content"]).startswith("[CONTEXT")]
    withdrawn = [s for s in summaries if "This earlier summary was withdrawn" in s]
    rebuilt = [s for s in summaries if "rebuilt without a model" in s]
    assert withdrawn and rebuilt and len(withdrawn) + len(rebuilt) == len(summaries)
    assert all(s.split("\n\n")[1].startswith("Messages #") for s in withdrawn)  # the coverage line stays
    assert await tables_holding(store.engine, PIECE) == []


async def test_deletions_waiting_together_are_erased_in_one_replacement(gateway_factory: GatewayFactory,
                                                                        fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    group = {"chat_type": "group", "chat_id": "g1", "user_name": "Bob"}
    spam = [adapter.inbound(f"buy now at shop-{n}-9911.example", **group) for n in range(5)]
    for message in spam:
        await adapter._handler(message)  # type: ignore[misc]
    fake_llm.reply("a slow answer", delay=0.5)
    adapter._dispatch(adapter.inbound("hello bot", mentions_bot=True, **group))
    await asyncio.sleep(0.15)  # the session is busy: the moderator's purge waits behind the answer
    for message in spam:
        adapter._dispatch(deletion(message))
    await adapter._drain(10)
    store: Store = gateway.rt.store
    record = await store.sessions.get_active("discord", "group:g1")
    assert [h.reason for h in await store.compactions.history(record.id)] == ["erasure"]
    assert await tables_holding(store.engine, "9911.example") == []
