"""A turn whose compaction loses a race, or that meets a storage outage, loses no message (issue 11).

"Another process" is a second `Store` on the same database writing in the middle of our turn: another
gateway's turn appended, then a sweep compacted. The multi-process versions are in tests/faults/.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import OperationalError

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
    assert contents[-4:] == ["from the other gateway", "its reply", "what did we decide about the cache?",
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
