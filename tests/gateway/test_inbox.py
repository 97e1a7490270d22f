"""The inbox through the gateway: a kept message is marked handled however it was answered, one a
stopped worker left is taken over and answered once, and a retry of a message whose turn is stored is not run
again."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.exc import OperationalError

from adapters.base import Attachment
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.intake.inbox import decode, encode, inbound_key
from gateway.store import InboxEntry
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter, answer_by_kind, make_settings


def test_an_inbound_survives_the_round_trip_through_the_store() -> None:
    inbound = replace(ScriptedAdapter().inbound("look \ud800 at this", chat_type="group", thread_id="t9"),
                      attachments=(Attachment("image", "image/png", 3, "a.png", data_url="data:image/png;base64,AAA"),),
                      role_ids=("r1", "r2"), guild_id="g1", received_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert encode(inbound).isascii()
    assert decode(encode(inbound)) == inbound


async def test_a_kept_message_is_marked_handled_however_it_is_answered(gateway_factory: GatewayFactory,
                                                                      fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(gateway={"deny_users": ["discord:troll"]})
    answer_by_kind(fake_llm, "fine")
    messages = [adapter.inbound("a question"), adapter.inbound("/help"), adapter.inbound("hi", user_id="troll"),
                adapter.inbound("lunch?", chat_type="group", chat_id="g1")]  # a turn, a command, refused, observed
    for inbound in messages:
        await gateway.inbox.keep([inbound])
        assert adapter._handler is not None
        await adapter._handler(inbound)
    store = gateway.rt.store
    rows = [await store.inbox.get(inbound_key(m)) for m in messages]
    assert all(row is not None and row.handled_at is not None for row in rows), rows
    assert await store.inbox.claim_stale(datetime.now(UTC) + timedelta(hours=1), "other#1",
                                         platforms=("discord",)) == []


async def test_a_message_a_stopped_worker_kept_is_answered_once_by_the_next(gateway_factory: GatewayFactory,
                                                                           fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(inbox={"stale_after_seconds": 5})
    answer_by_kind(fake_llm, "found it")
    lost = adapter.inbound("did anyone get this?")
    long_ago = datetime.now(UTC) - timedelta(minutes=1)
    await gateway.rt.store.inbox.keep([InboxEntry(inbound_key(lost), "discord", "discord:dm:c1", encode(lost),
                                                  long_ago)], "dead-worker#1", at=long_ago)
    fresh = adapter.inbound("still being handled elsewhere")
    await gateway.rt.store.inbox.keep([InboxEntry(inbound_key(fresh), "discord", "discord:dm:c1", encode(fresh),
                                                  datetime.now(UTC))], "live-worker#1")
    await gateway.recover_inbox()
    await adapter._drain(5)
    await gateway.recover_inbox()  # taken over once: nothing more to do
    await adapter._drain(5)
    assert adapter.sent == [(lost.chat, "found it", lost.message_id)]
    assert (await gateway.rt.store.inbox.get(inbound_key(lost))).handled_at is not None  # type: ignore[union-attr]
    assert (await gateway.rt.store.inbox.get(inbound_key(fresh))).handled_at is None  # type: ignore[union-attr]


async def test_a_retry_of_a_stored_turn_is_not_run_again(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    # Two workers on one database whose de-dup claims are not shared: what a worker that died after storing
    # its turn, before marking the message handled in Redis, leaves to the next one.
    settings = make_settings(fake_llm, tmp_path)
    first_adapter, second_adapter = ScriptedAdapter(), ScriptedAdapter()
    first = Gateway(await build_runtime(settings), [first_adapter])
    second = Gateway(await build_runtime(settings, store=first.rt.store), [second_adapter])
    await first.start()
    await second.start()
    try:
        kinds = answer_by_kind(fake_llm, "once")
        inbound = first_adapter.inbound("answer me")
        assert first_adapter._handler is not None and second_adapter._handler is not None
        await first_adapter._handler(inbound)
        await second_adapter._handler(inbound)  # the platform's retry, at the other worker
        record = await first.rt.store.sessions.get_active("discord", "dm:c1")
        assert record is not None
        stored = (await first.rt.store.messages.load_active(record.id)).messages
        assert [m["content"] for m in stored] == ["answer me", "once"] and kinds == ["chat"]
        assert first_adapter.texts() == ["once"] and second_adapter.texts() == []
        assert second.rt.metrics.instruments.duplicates.labels("discord")._value.get() == 1
    finally:
        await second.aclose(grace_seconds=5)
        await first.aclose(grace_seconds=5)


async def test_a_message_spooled_while_the_database_is_down_is_answered_by_the_next_worker(
        fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    # Discord never sends a message twice: one the inbox cannot take goes to the worker's spool on disk, and a
    # worker that stops before the database is back leaves it there for the next one (tests/scale: SIGKILL).
    settings = make_settings(fake_llm, tmp_path, inbox={"stale_after_seconds": 5})
    answer_by_kind(fake_llm, "answered after all")
    first_adapter = ScriptedAdapter()
    first_adapter.redelivers = False
    first = Gateway(await build_runtime(settings), [first_adapter])
    await first.start()
    down = OperationalError("INSERT INTO inbox", {}, ConnectionRefusedError(111, "Connection refused"))

    async def database_down(*args: object, **kwargs: object) -> int:
        raise down

    first.rt.store.inbox.keep = database_down  # type: ignore[method-assign]
    lost = first_adapter.inbound("asked during the outage")
    assert first_adapter.keep is not None
    await first_adapter.keep([lost])  # spooled: the adapter may hand it on now
    assert first.inbox.spool is not None and first.inbox.spool.pending == 1
    first.inbox.close()  # the worker is gone before it could handle it
    await first.aclose(grace_seconds=1)

    second_adapter = ScriptedAdapter()
    second = Gateway(await build_runtime(settings), [second_adapter])
    await second.start()  # its recovery moves the spool into the inbox and takes the message over
    try:
        await second_adapter._drain(10)
        assert second_adapter.sent == [(lost.chat, "answered after all", lost.message_id)]
        row = await second.rt.store.inbox.get(inbound_key(lost))
        assert row is not None and row.handled_at is not None
        assert list((tmp_path / "spool").glob("*.jsonl")) == []
    finally:
        await second.aclose(grace_seconds=5)


async def test_while_the_database_fails_the_next_messages_go_to_the_spool_at_once(
        gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory()
    tried: list[int] = []

    async def database_down(entries: object, *args: object, **kwargs: object) -> int:
        tried.append(1)
        raise OperationalError("INSERT INTO inbox", {}, ConnectionRefusedError(111, "Connection refused"))

    gateway.rt.store.inbox.keep = database_down  # type: ignore[method-assign]
    first, second = adapter.inbound("one"), adapter.inbound("two")
    await gateway.inbox.keep_or_spool([first])
    await gateway.inbox.keep_or_spool([second])
    assert len(tried) == 1  # the second did not wait for the database first
    assert gateway.inbox.spool is not None and gateway.inbox.spool.pending == 2
    assert gateway.inbox.holds(first) and gateway.inbox.holds(second)
