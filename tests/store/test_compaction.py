"""In-place compaction (R-S2), restore, and rotation (R-S3): atomic, ordered, lossless."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

import gateway.store.compaction as compaction_module
from gateway.store import (
    CompactionInfo,
    CompactionNotFound,
    EngineState,
    SessionEnded,
    StaleWatermark,
    Store,
)
from gateway.store._rows import active_rows_query
from gateway.store.database import write
from tests.store.conftest import assistant, user


async def _session_with(store: Store, count: int, chat: str = "c") -> str:
    session = await store.sessions.get_or_create_active("tg", chat)
    await store.messages.append(session.id, [user(f"m{i}") for i in range(count)], [10] * count)
    return session.id


async def test_replace_active_archives_old_rows_and_activates_new(store: Store) -> None:
    sid = await _session_with(store, 6)
    active = await store.messages.load_active(sid)
    number = await store.compactions.replace_active(sid, [assistant("S"), user("m5")], [4, 10],
                                                    active.watermark)
    assert number == 1
    after = await store.messages.load_active(sid)
    assert after.messages == [assistant("S"), user("m5")]
    assert after.watermark > active.watermark
    record = await store.sessions.require(sid)
    assert (record.message_count, record.token_count, record.compactions) == (2, 14, 1)
    assert record.engine.last_compaction is not None
    assert (record.engine.last_compaction.tokens_before, record.engine.last_compaction.tokens_after) == (60, 14)
    [history] = await store.compactions.history(sid)
    assert (history.number, history.reason, history.messages_before, history.messages_after,
            history.carried) == (1, "compression", 6, 2, 0)


async def test_rows_appended_after_the_watermark_are_carried_after_the_summary(store: Store) -> None:
    sid = await _session_with(store, 4)
    active = await store.messages.load_active(sid)
    await store.messages.append(sid, [user("late1"), assistant("late2")], [1, 2])  # while summarizing
    await store.compactions.replace_active(sid, [assistant("S")], [5], active.watermark)
    after = await store.messages.load_active(sid)
    assert after.messages == [assistant("S"), user("late1"), assistant("late2")]
    assert after.token_counts == [5, 1, 2]
    [history] = await store.compactions.history(sid)
    assert history.carried == 2
    await store.messages.append(sid, [user("next")], [1])
    assert (await store.messages.load_active(sid)).messages[-1] == user("next")


async def test_concurrent_appends_during_compaction_are_all_kept_in_order(store: Store) -> None:
    sid = await _session_with(store, 10)
    active = await store.messages.load_active(sid)

    async def appender() -> None:
        for i in range(15):
            await store.messages.append(sid, [user(f"live{i}")], [1])
            await asyncio.sleep(0)

    task = asyncio.create_task(appender())
    await asyncio.sleep(0.01)
    await store.compactions.replace_active(sid, [assistant("S")], [3], active.watermark)
    await task
    after = (await store.messages.load_active(sid)).messages
    assert after[0] == assistant("S")
    assert after[1:] == [user(f"live{i}") for i in range(15)]
    everything = await store.messages.export(sid, include_archived=True)
    assert {f"m{i}" for i in range(10)} <= {r.message["content"] for r in everything}
    record = await store.sessions.require(sid)
    assert (record.message_count, record.token_count) == (16, 18)


async def test_stale_watermark_is_refused(store: Store) -> None:
    sid = await _session_with(store, 5)
    first = await store.messages.load_active(sid)
    second = await store.messages.load_active(sid)
    await store.compactions.replace_active(sid, [assistant("S1")], [1], first.watermark)
    with pytest.raises(StaleWatermark):
        await store.compactions.replace_active(sid, [assistant("S2")], [1], second.watermark)
    assert (await store.messages.load_active(sid)).messages == [assistant("S1")]
    with pytest.raises(ValueError):
        await store.compactions.replace_active(sid, [assistant("S")], [1], 10_000)


async def test_empty_replacement_still_fences_older_watermarks(store: Store) -> None:
    sid = await _session_with(store, 3)
    stale = await store.messages.load_active(sid)
    await store.compactions.replace_active(sid, [], [], stale.watermark)
    fresh = await store.messages.load_active(sid)
    assert fresh.messages == []
    with pytest.raises(StaleWatermark):
        await store.compactions.replace_active(sid, [assistant("x")], [1], stale.watermark)
    assert await store.compactions.replace_active(sid, [assistant("y")], [1], fresh.watermark) == 2


async def test_engine_state_saved_with_the_compaction(store: Store) -> None:
    sid = await _session_with(store, 4)
    active = await store.messages.load_active(sid)
    info = CompactionInfo(at=datetime(2030, 1, 1, tzinfo=UTC), reason="manual", tokens_before=5000, tokens_after=900)
    state = EngineState(last_prompt_tokens=-1, previous_summary="S", compression_count=1, last_compaction=info)
    number = await store.compactions.replace_active(sid, [assistant("S")], [9], active.watermark,
                                                    reason="manual", engine_state=state)
    saved = (await store.sessions.require(sid)).engine
    assert (saved.last_prompt_tokens, saved.previous_summary, saved.compression_count) == (-1, "S", 1)
    assert saved.last_compaction == CompactionInfo(at=info.at, reason="manual", tokens_before=5000,
                                                   tokens_after=900, number=number, active_after=1)


async def test_the_stored_info_says_where_the_replacement_ended_carried_rows_included(store: Store) -> None:
    sid = await _session_with(store, 6)
    read = await store.messages.load_active(sid)
    # Two messages arrive while the summary is written: they follow the new set, and count as part of it.
    await store.messages.append(sid, [user("late 1"), assistant("late 2")], [3, 3])
    await store.compactions.replace_active(sid, [assistant("summary"), user("tail")], [5, 2], read.watermark)
    saved = (await store.sessions.require(sid)).engine.last_compaction
    assert saved is not None and saved.active_after == 4
    assert [m["content"] for m in (await store.messages.load_active(sid)).messages] == \
        ["summary", "tail", "late 1", "late 2"]


async def test_failure_inside_the_transaction_changes_nothing(store: Store,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sid = await _session_with(store, 4)
    active = await store.messages.load_active(sid)

    async def broken_insert(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(compaction_module, "insert_rows", broken_insert)  # after the archive UPDATE ran
    with pytest.raises(RuntimeError):
        await store.compactions.replace_active(sid, [assistant("S")], [1], active.watermark)
    with pytest.raises(RuntimeError):
        await store.compactions.rotate(sid, [assistant("S")], [1])
    monkeypatch.undo()
    assert (await store.messages.load_active(sid)).messages == active.messages
    record = await store.sessions.require(sid)
    assert (record.active, record.compactions, record.message_count) == (True, 0, 4)
    assert await store.compactions.history(sid) == []
    assert [s.id for s in await store.sessions.list()] == [sid]  # no orphan child


async def test_restore_brings_back_an_earlier_active_set(store: Store) -> None:
    sid = await _session_with(store, 4)
    original = await store.messages.load_active(sid)
    await store.compactions.replace_active(sid, [assistant("S1")], [1], original.watermark)
    await store.messages.append(sid, [user("after1")], [1])
    second = await store.messages.load_active(sid)
    await store.compactions.replace_active(sid, [assistant("S2")], [1], second.watermark)

    number = await store.compactions.restore(sid, before_compaction=1)
    assert number == 3
    # The turn added after compaction 1 stays in view, after the restored set (summarized by 2 or not).
    assert (await store.messages.load_active(sid)).messages == [*original.messages, user("after1")]
    record = await store.sessions.require(sid)
    assert (record.message_count, record.token_count) == (5, 41)
    assert await store.compactions.restore(sid, before_compaction=2) == 4
    assert (await store.messages.load_active(sid)).messages == [assistant("S1"), user("after1")]
    assert await store.compactions.restore(sid, before_compaction=4) == 5  # undoes restore 4
    assert (await store.messages.load_active(sid)).messages == [*original.messages, user("after1")]
    assert [h.reason for h in await store.compactions.history(sid)] == [
        "compression", "compression", "restore", "restore", "restore"]
    with pytest.raises(CompactionNotFound):
        await store.compactions.restore(sid, before_compaction=99)


async def test_rotation_ends_parent_and_opens_child(store: Store) -> None:
    session = await store.sessions.get_or_create_active("discord", "chan", title="Deploy", goal="ship v2")
    await store.messages.append(session.id, [user(f"m{i}") for i in range(5)], [10] * 5)
    active = await store.messages.load_active(session.id)
    await store.messages.append(session.id, [user("late")], [2])
    state = EngineState(last_prompt_tokens=-1, compression_count=1)
    child = await store.compactions.rotate(session.id, [assistant("S")], [7], active.watermark,
                                           engine_state=state)
    parent = await store.sessions.require(session.id)
    assert (parent.active, parent.end_reason) == (False, "compression")
    assert (child.parent_session_id, child.title, child.goal, child.platform, child.chat_key) == (
        session.id, "Deploy", "ship v2", "discord", "chan")
    assert (child.active, child.message_count, child.token_count) == (True, 2, 9)
    assert (child.engine.last_prompt_tokens, child.engine.compression_count) == (-1, 1)
    assert (await store.messages.load_active(child.id)).messages == [assistant("S"), user("late")]
    assert (await store.sessions.get_or_create_active("discord", "chan")).id == child.id
    assert len(await store.messages.export(session.id)) == 6  # the parent's history stays
    with pytest.raises(SessionEnded):
        await store.compactions.rotate(session.id, [assistant("again")], [1])
    with pytest.raises(SessionEnded):
        await store.compactions.replace_active(session.id, [assistant("x")], [1], active.watermark)


async def test_rotation_defaults_to_parent_engine_state(store: Store) -> None:
    sid = await _session_with(store, 2)
    await store.sessions.save_engine_state(sid, EngineState(compression_count=4, ineffective_count=2,
                                                            context_length=64_000))
    child = await store.compactions.rotate(sid, [assistant("S")], [1])
    assert (child.engine.compression_count, child.engine.ineffective_count, child.engine.context_length) == (
        4, 2, 64_000)
    assert child.engine.last_compaction is not None and child.engine.last_compaction.reason == "rotation"


async def test_active_rows_are_read_through_the_partial_index(store: Store) -> None:
    # A long-lived session holds many archived rows and few active ones: loading the active set (every turn)
    # must walk the active rows only, in order, not every row the session ever had and then sort them.
    if store.dialect != "sqlite":
        pytest.skip("PostgreSQL chooses by cost, and a sequential scan is cheapest at this size")
    sid = await _session_with(store, 400)
    active = await store.messages.load_active(sid)
    await store.compactions.replace_active(sid, [assistant("S"), user("m399")], [4, 10], active.watermark)
    statement = str(active_rows_query(sid).compile(dialect=store.engine.dialect,
                                                   compile_kwargs={"literal_binds": True}))
    async with write(store.engine) as conn:
        await conn.exec_driver_sql("ANALYZE")
        plan = " | ".join(str(r[-1]) for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement))
    assert "ix_messages_active" in plan and "TEMP B-TREE" not in plan, plan
    assert (await store.messages.load_active(sid)).messages == [assistant("S"), user("m399")]
