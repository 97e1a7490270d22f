"""A turn whose compaction loses a race, or that meets a storage outage, loses no message.

"Another process" is a second `Store` on the same database writing in the middle of our turn: another
gateway's turn appended, then a sweep compacted. The multi-process versions are in tests/faults/.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.exc import OperationalError

from gateway.intake.holding import UNAVAILABLE_TEXT
from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, answer_by_kind, bulk_session, chatter

WINDOW = {"context_length": 100_000}  # the agent's preflight compacts 330 long messages


async def _other_process(url: str, session_id: str, *, compact: bool) -> None:
    other = await Store.open(url, migrate=False)
    try:
        await other.messages.append(session_id, [{"role": "user", "content": "from the other gateway"},
                                                 {"role": "assistant", "content": "its reply"}], [5, 5])
        if compact:
            active = await other.messages.load_active(session_id)
            kept = [{"role": "user", "content": "[summary written by the cron sweep]"}, *active.messages[-4:]]
            await other.compactions.replace_active(session_id, kept, [10] * len(kept), active.watermark,
                                                   reason="sweep")
    finally:
        await other.aclose()


async def test_a_turn_whose_compaction_lost_appends_after_the_winner(gateway_factory: GatewayFactory,
                                                                    fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    answer_by_kind(fake_llm, "fresh answer")
    store = gateway.rt.store
    ours = store.compactions.replace_active

    async def others_win_first(sid: str, *args: Any, **kwargs: Any) -> int:
        store.compactions.replace_active = ours  # race only once
        await _other_process(gateway.rt.settings.storage.url, sid, compact=True)
        return await ours(sid, *args, **kwargs)

    store.compactions.replace_active = others_win_first  # type: ignore[method-assign]
    await adapter.say("what did we decide about the cache?")

    assert adapter.texts()[-1] == "fresh answer"
    active = (await store.messages.load_active(session_id)).messages
    contents = [m["content"] for m in active]
    assert contents[0] == "[summary written by the cron sweep]"
    # The winner's set (with the other gateway's turn), then ours, in order; nothing of ours summarized away.
    # Our question was stored before our compaction ran (so a compaction never holds the only copy of it),
    # hence before the other gateway's turn, as it happened.
    assert contents[-4:] == ["what did we decide about the cache?", "from the other gateway", "its reply",
                             "fresh answer"]
    assert not any(SUMMARY_MARKER in str(c) for c in contents)  # our stale compressed list was not written
    assert [h.reason for h in await store.compactions.history(session_id)] == ["sweep"]


async def test_a_won_compaction_keeps_what_another_gateway_appended_meanwhile(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    answer_by_kind(fake_llm, "fresh answer")
    store = gateway.rt.store
    ours = store.compactions.replace_active

    async def other_appends_first(sid: str, *args: Any, **kwargs: Any) -> int:
        store.compactions.replace_active = ours
        await _other_process(gateway.rt.settings.storage.url, sid, compact=False)
        return await ours(sid, *args, **kwargs)

    store.compactions.replace_active = other_appends_first  # type: ignore[method-assign]
    await adapter.say("what next?")

    active = [m["content"] for m in (await store.messages.load_active(session_id)).messages]
    assert any(SUMMARY_MARKER in str(c) for c in active)  # ours won
    # The rows appended after our read were carried after our set, and the turn's reply still follows.
    assert active[-3:] == ["from the other gateway", "its reply", "fresh answer"]
    assert "what next?" in active
    assert [h.reason for h in await store.compactions.history(session_id)] == ["agent: preflight"]


async def test_a_session_ended_during_the_turn_gets_its_messages_in_the_open_one(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    await adapter.say("hello")
    store = gateway.rt.store
    first = await store.sessions.get_active("discord", "dm:c1")

    def respond(body: dict[str, Any]) -> str:
        return "late answer"

    fake_llm.responder = respond
    real = store.messages.append

    async def expired_first(sid: str, *args: Any, **kwargs: Any) -> int:
        store.messages.append = real
        await store.sessions.end(sid, "idle")  # another worker's idle expiry
        return await real(sid, *args, **kwargs)

    store.messages.append = expired_first  # type: ignore[method-assign]
    await adapter.say("still there?")
    assert adapter.texts()[-1] == "late answer"
    now = await store.sessions.get_active("discord", "dm:c1")
    assert now.id != first.id
    assert [m["content"] for m in (await store.messages.load_active(now.id)).messages] == [
        "still there?", "late answer"]


def _outage() -> OperationalError:
    return OperationalError("INSERT …", {}, Exception("database or disk is full"))


async def test_an_outage_at_the_end_of_a_turn_holds_the_answer_until_it_is_stored(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    store = gateway.rt.store
    real = store.messages.append
    failures = {"left": 3}

    async def full_disk(*args: Any, **kwargs: Any) -> int:
        if failures["left"]:
            failures["left"] -= 1
            raise _outage()
        return await real(*args, **kwargs)

    store.messages.append = full_disk  # type: ignore[method-assign]
    await adapter.say("keep this")
    assert adapter.texts() == ["ok"]
    assert len(fake_llm.requests) == 1  # the answer was kept, not asked for again
    record = await store.sessions.get_active("discord", "dm:c1")
    assert [m["content"] for m in (await store.messages.load_active(record.id)).messages] == ["keep this", "ok"]
    assert not gateway.rt.storage.down


async def test_a_rotation_that_lost_follows_the_winners_child(gateway_factory: GatewayFactory,
                                                             fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW, compression={"in_place": False})
    parent_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    answer_by_kind(fake_llm, "fresh answer")
    store = gateway.rt.store
    ours = store.compactions.rotate

    async def other_rotates_first(sid: str, *args: Any, **kwargs: Any) -> Any:
        store.compactions.rotate = ours
        other = await Store.open(gateway.rt.settings.storage.url, migrate=False)
        try:
            active = await other.messages.load_active(sid)
            await other.compactions.rotate(sid, [{"role": "user", "content": "[the sweep's summary]"}], [10],
                                           active.watermark)
        finally:
            await other.aclose()
        return await ours(sid, *args, **kwargs)

    store.compactions.rotate = other_rotates_first  # type: ignore[method-assign]
    await adapter.say("what next?")
    assert adapter.texts()[-1] == "fresh answer"
    child = await store.sessions.get_active("discord", "dm:c1")
    assert child.parent_session_id == parent_id
    assert [m["content"] for m in (await store.messages.load_active(child.id)).messages] == [
        "[the sweep's summary]", "what next?", "fresh answer"]


async def test_an_outage_during_the_turns_compaction_keeps_every_message(gateway_factory: GatewayFactory,
                                                                       fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    answer_by_kind(fake_llm, "fresh answer")
    store = gateway.rt.store
    ours = store.compactions.replace_active

    async def disk_full_once(*args: Any, **kwargs: Any) -> int:
        store.compactions.replace_active = ours
        raise _outage()

    store.compactions.replace_active = disk_full_once  # type: ignore[method-assign]
    await adapter.say("what next?")
    assert adapter.texts()[-1] == "fresh answer"
    active = [m["content"] for m in (await store.messages.load_active(session_id)).messages]
    assert len(active) == 332 and active[-2:] == ["what next?", "fresh answer"]  # not compacted, nothing lost
    assert await store.compactions.history(session_id) == []


async def test_messages_wait_out_an_outage_in_order_and_the_bound_is_told(gateway_factory: GatewayFactory,
                                                                        fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(gateway={"held_messages_per_session": 2})
    back = asyncio.Event()
    real_open = gateway.sessions.open_for_message

    async def down_until_back(*args: Any, **kwargs: Any) -> Any:
        if not back.is_set():
            raise _outage()
        return await real_open(*args, **kwargs)

    gateway.sessions.open_for_message = down_until_back  # type: ignore[method-assign]
    fake_llm.responder = lambda body: f"re {body['messages'][-1]['content']}"
    first = asyncio.create_task(adapter.say("one"))
    await asyncio.sleep(0.3)  # "one" is held and retried
    second = asyncio.create_task(adapter.say("two"))  # held behind it: the bound is two held messages
    await asyncio.sleep(0.1)
    await adapter.say("three")
    assert adapter.texts() == [UNAVAILABLE_TEXT]
    back.set()
    await asyncio.gather(first, second)
    assert adapter.texts() == [UNAVAILABLE_TEXT, "re one", "re two"]
    assert not gateway.rt.storage.down
