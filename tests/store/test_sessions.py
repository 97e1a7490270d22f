"""Sessions: one open session per chat, ending, idle and hygiene queries, durable engine state."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import insert, update

from gateway.store import CompactionInfo, EngineState, SessionNotFound, Store
from gateway.store._rows import new_session_values
from gateway.store.database import write
from gateway.store.models import SessionRow
from gateway.store.sessions import hygiene_query
from tests.store.conftest import user


async def test_get_or_create_returns_the_same_open_session(store: Store) -> None:
    first = await store.sessions.get_or_create_active("discord", "guild:1:chan:2", title="t", goal="g")
    again = await store.sessions.get_or_create_active("discord", "guild:1:chan:2")
    other = await store.sessions.get_or_create_active("telegram", "guild:1:chan:2")
    assert again == first
    assert other.id != first.id
    assert (first.title, first.goal, first.active, first.message_count) == ("t", "g", True, 0)


async def test_concurrent_creation_yields_one_session(store: Store) -> None:
    records = await asyncio.gather(*(store.sessions.get_or_create_active("tg", "c") for _ in range(8)))
    assert len({r.id for r in records}) == 1
    assert len(await store.sessions.list_active()) == 1


async def test_end_keeps_history_and_opens_a_new_session_next_time(store: Store) -> None:
    first = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(first.id, [user("hi")], [3])
    ended = await store.sessions.end(first.id, "new")
    assert (ended.active, ended.end_reason, ended.message_count) == (False, "new", 1)
    assert (await store.sessions.end(first.id, "idle")).end_reason == "new"  # ending twice changes nothing
    second = await store.sessions.get_or_create_active("tg", "c")
    assert second.id != first.id
    assert len(await store.messages.export(first.id)) == 1


async def test_missing_sessions_raise(store: Store) -> None:
    assert await store.sessions.get("nope") is None
    with pytest.raises(SessionNotFound):
        await store.sessions.require("nope")
    with pytest.raises(SessionNotFound):
        await store.sessions.end("nope", "x")
    with pytest.raises(SessionNotFound):
        await store.sessions.touch("nope")


async def test_idle_listing_uses_last_activity(store: Store) -> None:
    old = await store.sessions.get_or_create_active("tg", "old")
    fresh = await store.sessions.get_or_create_active("tg", "fresh")
    ended = await store.sessions.get_or_create_active("tg", "ended")
    long_ago = datetime.now(UTC) - timedelta(hours=5)
    await store.sessions.touch(old.id, long_ago)
    await store.sessions.touch(ended.id, long_ago)
    await store.sessions.end(ended.id, "new")
    idle = await store.sessions.list_idle(datetime.now(UTC) - timedelta(hours=1))
    assert [s.id for s in idle] == [old.id]
    assert idle[0].last_active_at == long_ago
    assert fresh.id not in {s.id for s in idle}


async def test_hygiene_lists_sessions_over_either_limit(store: Store) -> None:
    small = await store.sessions.get_or_create_active("tg", "small")
    many = await store.sessions.get_or_create_active("tg", "many")
    big = await store.sessions.get_or_create_active("tg", "big")
    prompt = await store.sessions.get_or_create_active("tg", "prompt")
    await store.messages.append(small.id, [user("a")], [10])
    await store.messages.append(many.id, [user(str(i)) for i in range(6)], [1] * 6)
    await store.messages.append(big.id, [user("b")], [500])
    await store.sessions.save_engine_state(prompt.id, EngineState(last_prompt_tokens=900))
    found = await store.sessions.list_needing_hygiene(token_limit=100, message_limit=5)
    assert {s.id for s in found} == {many.id, big.id, prompt.id}
    await store.sessions.end(big.id, "new")
    found = await store.sessions.list_needing_hygiene(token_limit=100, message_limit=5)
    assert {s.id for s in found} == {many.id, prompt.id}


async def test_hygiene_query_is_served_by_indexes(store: Store) -> None:
    # 2,000 quiet sessions and statistics: the plan must use the partial indexes, never read every session.
    at = datetime.now(UTC)
    rows = [new_session_values(f"s{i:05d}", "tg", f"c{i}", at, title=None, goal=None, parent_session_id=None,
                               state=EngineState()) for i in range(2000)]
    async with write(store.engine) as conn:
        await conn.execute(insert(SessionRow), rows)
        await conn.exec_driver_sql("ANALYZE")
    statement = str(hygiene_query(100, 5).compile(dialect=store.engine.dialect,
                                                  compile_kwargs={"literal_binds": True}))
    async with write(store.engine) as conn:
        if store.dialect == "sqlite":
            plan = " | ".join(str(r[-1]) for r in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement))
            assert "SCAN sessions" not in plan.replace("SCAN sessions USING INDEX ix_", ""), plan
        else:
            plan = " | ".join(str(r[0]) for r in await conn.exec_driver_sql("EXPLAIN " + statement))
            assert "Seq Scan" not in plan, plan
    for index in ("ix_sessions_open_tokens", "ix_sessions_open_prompt", "ix_sessions_open_messages"):
        assert index in plan, plan
    assert await store.sessions.list_needing_hygiene(token_limit=100, message_limit=5) == []


async def test_engine_state_round_trips(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    until = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    info = CompactionInfo(at=until, reason="hygiene", tokens_before=1000, tokens_after=200, messages_before=40,
                          messages_after=8, number=3)
    state = EngineState(last_prompt_tokens=-1, previous_summary="## Goal\n压缩", compression_count=3,
                        ineffective_count=2, cooldown_until=until, context_length=200_000, last_compaction=info)
    await store.sessions.save_engine_state(session.id, state)
    loaded = (await store.sessions.require(session.id)).engine
    assert loaded == state
    assert loaded.last_compaction is not None and loaded.last_compaction.savings_pct == pytest.approx(0.8)


async def test_listing_and_details(store: Store) -> None:
    a = await store.sessions.get_or_create_active("discord", "a")
    b = await store.sessions.get_or_create_active("tg", "b")
    await store.sessions.touch(a.id, datetime.now(UTC) + timedelta(seconds=5))
    await store.sessions.set_details(b.id, title="Deploy", goal="ship it")
    await store.sessions.end(b.id, "idle")
    assert [s.id for s in await store.sessions.list()] == [a.id, b.id]
    assert [s.id for s in await store.sessions.list(active_only=True)] == [a.id]
    assert [s.id for s in await store.sessions.list(platform="tg")] == [b.id]
    assert [s.id for s in await store.sessions.list(limit=1, offset=1)] == [b.id]
    detailed = await store.sessions.require(b.id)
    assert (detailed.title, detailed.goal) == ("Deploy", "ship it")


async def test_stored_times_are_utc_aware(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    naive = datetime(2031, 5, 6, 7, 8, 9)
    async with write(store.engine) as conn:
        await conn.execute(update(SessionRow).where(SessionRow.id == session.id).values(last_active_at=naive))
    loaded = await store.sessions.require(session.id)
    assert loaded.last_active_at == naive.replace(tzinfo=UTC)
    assert loaded.started_at.tzinfo is not None


async def test_latest_ended_is_the_most_recently_ended_session_of_the_chat(store: Store) -> None:
    assert await store.sessions.latest_ended("tg", "chat-le") is None
    first = await store.sessions.get_or_create_active("tg", "chat-le")
    await store.sessions.end(first.id, "idle")
    second = await store.sessions.get_or_create_active("tg", "chat-le")
    await store.sessions.end(second.id, "new")
    await store.sessions.get_or_create_active("tg", "chat-le")  # open sessions are not "ended"
    other = await store.sessions.get_or_create_active("tg", "other-chat")
    await store.sessions.end(other.id, "idle")
    latest = await store.sessions.latest_ended("tg", "chat-le")
    assert latest is not None and (latest.id, latest.end_reason) == (second.id, "new")
