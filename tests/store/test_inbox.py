"""The inbox's rows on SQLite and PostgreSQL: a batch kept in one transaction, a dead worker's rows claimed by
one worker only, a turn's messages, handled mark and answer stored together or not at all, and pruning."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from gateway.store import (
    AlreadyStored,
    Handled,
    Handling,
    InboxEntry,
    NewAnswer,
    Progress,
    SessionEnded,
    Store,
)
from tests.store.conftest import assistant, user


def _entry(n: int, at: datetime, platform: str = "telegram") -> InboxEntry:
    return InboxEntry(key=f"inbound:{platform}:5:{n}", platform=platform, session_key=f"{platform}:dm:5",
                      payload=f'{{"n": {n}}}', received_at=at)


def _handled(n: int, answer: NewAnswer | None = None) -> Handled:
    return Handled(key=f"inbound:telegram:5:{n}", platform="telegram", session_key="telegram:dm:5", answer=answer)


def _answer(text: str) -> NewAnswer:
    return NewAnswer(platform="telegram", chat_id="5", thread_id=None, reply_to="1", text=text, session_id=None,
                     worker="w1")


async def test_a_batch_is_kept_once_and_claimed_by_its_receiver(store: Store) -> None:
    now = datetime.now(UTC)
    assert await store.inbox.keep([_entry(1, now), _entry(2, now)], "w1#a", at=now) == 2
    assert await store.inbox.keep([_entry(2, now), _entry(3, now)], "w2#b", at=now) == 1  # 2 was fetched twice
    two = await store.inbox.get("inbound:telegram:5:2")
    assert two is not None and two.claimed_by == "w1#a" and two.handled_at is None and two.payload == '{"n": 2}'
    assert not (await store.inbox.handling("inbound:telegram:5:2")).handled


async def test_only_rows_of_a_worker_that_stopped_renewing_are_claimed_once(store: Store) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    await store.inbox.keep([_entry(1, start), _entry(2, start)], "dead#1", at=start)
    await store.inbox.keep([_entry(3, start)], "alive#1", at=start)
    await store.inbox.keep([_entry(4, start, platform="discord")], "dead#1", at=start)
    await store.inbox.mark_handled(_handled(2))
    now = datetime.now(UTC)
    assert await store.inbox.renew("alive#1", ["inbound:telegram:5:3", "inbound:telegram:5:1"], at=now) == 1
    claimed = await store.inbox.claim_stale(now - timedelta(seconds=30), "w2#x", platforms=("telegram",), at=now)
    assert [r.key for r in claimed] == ["inbound:telegram:5:1"]  # not handled 2, alive 3, or discord 4
    assert claimed[0].claimed_by == "w2#x" and claimed[0].payload == '{"n": 1}'
    assert await store.inbox.claim_stale(now - timedelta(seconds=30), "w3#y", platforms=("telegram",)) == []


async def test_racing_workers_split_the_stale_rows(store_url: str) -> None:
    old = datetime.now(UTC) - timedelta(minutes=5)
    async with await Store.open(store_url, migrate=False) as store:
        await store.inbox.keep([_entry(n, old) for n in range(40)], "dead#1", at=old)
    stores = [await Store.open(store_url, migrate=False) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.inbox.claim_stale(datetime.now(UTC), f"w{i}#z", platforms=("telegram",),
                                                             limit=15) for i, s in enumerate(stores)))
    finally:
        for s in stores:
            await s.aclose()
    claimed = [r.key for result in results for r in result]
    assert sorted(claimed) == sorted(f"inbound:telegram:5:{n}" for n in range(40))  # each once, none twice


async def test_a_turn_its_handled_mark_and_its_answer_are_stored_together(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    now = datetime.now(UTC)
    await store.inbox.keep([_entry(1, now)], "w1#a", at=now)
    answer = _answer("re: hi\x00")
    await store.messages.append(session.id, [user("hi"), assistant("re: hi")], [2, 3], handled=_handled(1, answer))
    row = await store.inbox.get("inbound:telegram:5:1")
    assert row is not None and row.handled_at is not None
    assert await store.inbox.handling(row.key) == Handling(handled=True, answer_id=answer.id)
    assert answer.id is not None
    delivery = await store.deliveries.get(answer.id)
    # Pending from the turn's own write; a NUL (which PostgreSQL refuses) cannot make the turn unstorable.
    assert delivery is not None and delivery.status == "pending" and delivery.text == "re: hi\ufffd"
    assert delivery.created_at == row.handled_at
    # A second settle (a mark stored again) leaves the first mark and its answer standing.
    with pytest.raises(AlreadyStored):
        await store.inbox.mark_handled(_handled(1, _answer("again")))
    assert (await store.inbox.get(row.key)).handled_at == row.handled_at  # type: ignore[union-attr]
    assert await store.deliveries.counts() == {"pending": 1}


async def test_a_turn_that_is_not_stored_leaves_its_message_unhandled_and_no_answer(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    await store.sessions.end(session.id, "new")
    now = datetime.now(UTC)
    await store.inbox.keep([_entry(1, now)], "w1#a", at=now)
    with pytest.raises(SessionEnded):
        await store.messages.append(session.id, [user("hi")], [2], handled=_handled(1, _answer("re: hi")))
    assert not (await store.inbox.handling("inbound:telegram:5:1")).handled
    assert await store.deliveries.counts() == {}  # the answer rolled back with its turn: nothing to send


async def test_a_message_never_kept_is_recorded_once_handled_and_never_claimed(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    await store.sessions.save_engine_state(session.id, session.engine, handled=_handled(7))
    row = await store.inbox.get("inbound:telegram:5:7")
    assert row is not None and row.payload is None and row.handled_at is not None
    assert await store.inbox.claim_stale(datetime.now(UTC) + timedelta(hours=1), "w2#x", platforms=("telegram",)) == []


async def test_a_compaction_carries_the_handled_mark_too(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    watermark = await store.messages.append(session.id, [user("a"), assistant("b")], [1, 1])
    await store.compactions.replace_active(session.id, [user("a b")], [2], watermark, handled=_handled(3))
    assert (await store.inbox.handling("inbound:telegram:5:3")).handled


async def test_handled_rows_are_pruned_by_age(store: Store) -> None:
    now = datetime.now(UTC)
    await store.inbox.keep([_entry(1, now), _entry(2, now)], "w1#a", at=now)
    await store.inbox.mark_handled(_handled(1))
    assert await store.inbox.prune(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert await store.inbox.prune(datetime.now(UTC) + timedelta(seconds=1)) == 1
    assert await store.inbox.get("inbound:telegram:5:1") is None
    assert await store.inbox.get("inbound:telegram:5:2") is not None  # unhandled rows are never pruned


async def test_a_turn_stored_again_after_its_commit_was_not_seen_is_refused_whole(store: Store) -> None:
    # The retry of a turn whose COMMIT reached the database while its answer was lost: the mark is there, so
    # the retry's transaction rolls back — no second copy of the turn, no second answer — and says what is stored.
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    first = _answer("re: hi")
    await store.messages.append(session.id, [user("hi"), assistant("re: hi")], [2, 3], handled=_handled(1, first))
    with pytest.raises(AlreadyStored) as refused:
        await store.messages.append(session.id, [user("hi"), assistant("re: hi")], [2, 3],
                                    handled=_handled(1, _answer("re: hi")))
    assert refused.value.handling == Handling(handled=True, answer_id=first.id)
    assert [m["content"] for m in (await store.messages.load_active(session.id)).messages] == ["hi", "re: hi"]
    assert await store.deliveries.counts() == {"pending": 1}


async def test_a_progress_step_is_stored_once_from_the_progress_its_attempt_read(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "dm:5")
    step = Progress("inbound:telegram:5:1", "telegram", "telegram:dm:5", start=0, to=1)
    await store.messages.append(session.id, [user("hi")], [2], progress=step)
    assert await store.inbox.handling(step.key) == Handling(progress=1)
    with pytest.raises(AlreadyStored) as again:  # the same step retried: it committed the first time
        await store.messages.append(session.id, [user("hi")], [2], progress=step)
    assert again.value.handling.progress == 1
    await store.messages.append(session.id, [assistant("calling a tool")], [2],
                                progress=Progress(step.key, step.platform, step.session_key, start=1, to=2))
    await store.messages.append(session.id, [assistant("done")], [1], handled=_handled(1))
    assert await store.inbox.handling(step.key) == Handling(handled=True, progress=2)
    with pytest.raises(AlreadyStored):  # nothing moves a handled message on
        await store.inbox.advance(Progress(step.key, step.platform, step.session_key, start=2, to=3))
    assert [m["content"] for m in (await store.messages.load_active(session.id)).messages] == [
        "hi", "calling a tool", "done"]


async def test_observed_lines_are_appended_once_each_with_their_marks(store: Store) -> None:
    session = await store.sessions.get_or_create_active("telegram", "group:5")
    lines = [(_handled(n), user(f"line {n}")) for n in (1, 2, 2, 3)]  # line 2 delivered twice
    last, appended = await store.messages.append_lines(session.id, lines, [1, 1, 1, 1])
    assert appended == {f"inbound:telegram:5:{n}" for n in (1, 2, 3)} and last == 3
    again = [(_handled(n), user(f"line {n}")) for n in (3, 4)]  # 3 was stored by the write above
    last, appended = await store.messages.append_lines(session.id, again, [1, 1])
    assert appended == {"inbound:telegram:5:4"} and last == 4
    active = await store.messages.load_active(session.id)
    assert [m["content"] for m in active.messages] == ["line 1", "line 2", "line 3", "line 4"]
    assert active.watermark == 4 and await store.messages.count_active(session.id) == 4
    assert [(await store.inbox.handling(f"inbound:telegram:5:{n}")).handled for n in range(1, 5)] == [True] * 4


async def test_progress_rows_of_messages_never_kept_are_pruned_once_old(store: Store) -> None:
    await store.inbox.advance(Progress("inbound:telegram:5:9", "telegram", "telegram:dm:5", start=0, to=1))
    assert await store.inbox.prune(datetime.now(UTC) - timedelta(hours=1)) == 0
    assert await store.inbox.prune(datetime.now(UTC) + timedelta(seconds=1)) == 1
