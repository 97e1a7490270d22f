"""Messages: appends, the active set and its watermark, counters, export, input validation."""

from __future__ import annotations

import asyncio

import pytest

from gateway.store import EngineState, SessionEnded, SessionNotFound, Store
from tests.store.conftest import assistant, user

TOOL_CALL = {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "terminal", "arguments": '{"cmd": "npm test", "retries": 3}'}}],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "47 passed — 通过"}
IMAGE = {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}


async def test_append_returns_increasing_sequences_and_keeps_order(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    assert await store.messages.append(session.id, [user("a"), assistant("b")], [3, 4]) == 2
    assert await store.messages.append(session.id, [TOOL_CALL, TOOL_RESULT, IMAGE], [20, 9, 770]) == 5
    active = await store.messages.load_active(session.id)
    assert active.messages == [user("a"), assistant("b"), TOOL_CALL, TOOL_RESULT, IMAGE]
    assert active.token_counts == [3, 4, 20, 9, 770]
    assert (active.watermark, active.tokens) == (5, 806)
    record = await store.sessions.require(session.id)
    assert (record.message_count, record.token_count) == (5, 806)
    assert await store.messages.count_active(session.id) == 5


async def test_loaded_messages_are_fresh_values(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    original = {"role": "user", "content": "x"}
    await store.messages.append(session.id, [original], [1])
    loaded = (await store.messages.load_active(session.id)).messages[0]
    loaded["content"] = "changed"
    assert original["content"] == "x"
    assert (await store.messages.load_active(session.id)).messages[0]["content"] == "x"


async def test_concurrent_appends_get_distinct_sequences(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    lasts = await asyncio.gather(*(store.messages.append(session.id, [user(f"m{i}")], [1]) for i in range(20)))
    assert sorted(lasts) == list(range(1, 21))
    active = await store.messages.load_active(session.id)
    assert sorted(m["content"] for m in active.messages) == sorted(f"m{i}" for i in range(20))
    assert (await store.sessions.require(session.id)).message_count == 20


async def test_empty_append_changes_nothing(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(session.id, [user("a")], [1])
    assert await store.messages.append(session.id, [], []) == 1
    assert await store.messages.count_active(session.id) == 1


@pytest.mark.parametrize(("messages", "counts"), [
    ([user("a")], [1, 2]),
    ([{"content": "no role"}], [1]),
    ([{"role": "wizard", "content": "x"}], [1]),
    ([user("a")], [-1]),
])
async def test_bad_batches_are_rejected_whole(store: Store, messages: list, counts: list[int]) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    with pytest.raises(ValueError):
        await store.messages.append(session.id, [user("ok"), *messages], [1, *counts])
    assert await store.messages.count_active(session.id) == 0


async def test_append_to_ended_or_missing_session_raises(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.sessions.end(session.id, "idle")
    with pytest.raises(SessionEnded):
        await store.messages.append(session.id, [user("late")], [1])
    with pytest.raises(SessionNotFound):
        await store.messages.append("missing", [user("x")], [1])
    with pytest.raises(SessionNotFound):
        await store.messages.load_active("missing")
    with pytest.raises(SessionNotFound):
        await store.messages.count_active("missing")
    with pytest.raises(SessionNotFound):
        await store.messages.export("missing")


async def test_export_active_and_archived(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(session.id, [user("q1"), assistant("a1"), user("q2")], [1, 1, 1])
    active = await store.messages.load_active(session.id)
    await store.compactions.replace_active(session.id, [assistant("summary"), user("q2")], [1, 1],
                                           active.watermark)
    current = await store.messages.export(session.id)
    assert [r.message for r in current] == [assistant("summary"), user("q2")]
    assert [r.compacted for r in current] == [True, True]
    everything = await store.messages.export(session.id, include_archived=True)
    assert [r.message["content"] for r in everything] == ["q1", "a1", "q2", "summary", "q2"]
    assert [r.archived_by for r in everything] == [1, 1, 1, None, None]
    assert all(r.archived_at is not None for r in everything[:3])
    assert [r.seq for r in everything] == sorted(r.seq for r in everything)


async def test_append_saves_engine_state_in_the_same_transaction(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "state")
    state = EngineState(last_prompt_tokens=1234, compression_count=2, ineffective_count=1,
                        previous_summary="earlier work", context_length=64_000)
    await store.messages.append(session.id, [user("a")], [3], engine_state=state)
    assert (await store.sessions.require(session.id)).engine == state
    # An append into an ended session saves nothing: the state travels with the messages or not at all.
    await store.sessions.end(session.id, "test")
    with pytest.raises(SessionEnded):
        await store.messages.append(session.id, [user("b")], [3], engine_state=EngineState(last_prompt_tokens=9))
    assert (await store.sessions.require(session.id)).engine == state


async def test_append_keeps_the_state_a_compaction_stored_after_the_callers_read(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    read = await store.messages.append(session.id, [user("a"), assistant("b")], [3, 4])
    await store.compactions.replace_active(session.id, [user("summary")], [2], read,
                                           engine_state=EngineState(previous_summary="the winner's"))
    stale = EngineState(previous_summary="ours, older", last_prompt_tokens=99)
    await store.messages.append(session.id, [user("late")], [1], engine_state=stale, state_watermark=read)
    record = await store.sessions.require(session.id)
    assert record.engine.previous_summary == "the winner's"
    assert [m["content"] for m in (await store.messages.load_active(session.id)).messages] == ["summary", "late"]
    fresh = (await store.messages.load_active(session.id)).watermark
    await store.messages.append(session.id, [user("next")], [1], engine_state=stale, state_watermark=fresh)
    assert (await store.sessions.require(session.id)).engine.last_prompt_tokens == 99
