"""The delivery ledger's rows on SQLite and PostgreSQL: pending → sent, claims that go to one worker only,
and expiry of answers too old to send."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from gateway.store import NewAnswer, Store


async def _record(store: Store, text: str, at: datetime, platform: str = "telegram") -> int:
    return await store.deliveries.record(NewAnswer(platform=platform, chat_id="-100", thread_id=None, reply_to="7",
                                                   text=text, session_id="s1", worker="w1"), at=at)


async def test_an_answer_is_pending_until_confirmed(store: Store) -> None:
    now = datetime.now(UTC)
    delivery_id = await _record(store, "hello", now)
    pending = await store.deliveries.get(delivery_id)
    assert pending is not None and pending.status == "pending" and pending.text == "hello"
    assert pending.reply_to == "7" and pending.worker == "w1" and pending.sent_at is None
    await store.deliveries.mark_sent(delivery_id)
    sent = await store.deliveries.get(delivery_id)
    assert sent is not None and sent.status == "sent" and sent.sent_at is not None
    assert await store.deliveries.claim_unconfirmed(now + timedelta(hours=1), "w2") == []


async def test_unconfirmed_answers_are_claimed_once_oldest_first(store: Store) -> None:
    now = datetime.now(UTC)
    old = [await _record(store, f"old {i}", now - timedelta(minutes=10 - i)) for i in range(3)]
    await _record(store, "fresh", now)  # its sender may still be sending: not claimed yet
    await _record(store, "elsewhere", now - timedelta(minutes=5), platform="discord")
    claimed = await store.deliveries.claim_unconfirmed(now - timedelta(minutes=1), "w2", platforms=("telegram",))
    assert [d.id for d in claimed] == old
    assert all(d.status == "resending" and d.recovered_by == "w2" for d in claimed)
    assert await store.deliveries.claim_unconfirmed(now - timedelta(minutes=1), "w3", platforms=("telegram",)) == []
    counts = await store.deliveries.counts()
    assert counts == {"resending": 3, "pending": 2}


async def test_racing_workers_split_the_unconfirmed_answers(store_url: str) -> None:
    now = datetime.now(UTC)
    async with await Store.open(store_url, migrate=False) as store:
        ids = {await _record(store, f"lost {i}", now - timedelta(minutes=5)) for i in range(40)}
    stores = [await Store.open(store_url, migrate=False) for _ in range(3)]
    try:
        results = await asyncio.gather(*(s.deliveries.claim_unconfirmed(now, f"w{i}", limit=100)
                                         for i, s in enumerate(stores)))
    finally:
        for s in stores:
            await s.aclose()
    claimed = [d.id for result in results for d in result]
    assert sorted(claimed) == sorted(ids)  # every lost answer claimed, none by two workers


async def test_answers_past_the_freshness_window_expire(store: Store) -> None:
    now = datetime.now(UTC)
    stale = await _record(store, "yesterday", now - timedelta(days=1))
    recent = await _record(store, "a minute ago", now - timedelta(minutes=1))
    assert await store.deliveries.expire_older_than(now - timedelta(hours=1)) == 1
    assert (await store.deliveries.get(stale)).status == "expired"  # type: ignore[union-attr]
    assert (await store.deliveries.get(recent)).status == "pending"  # type: ignore[union-attr]


async def test_pruning_forgets_only_old_answers_no_longer_pending(store: Store) -> None:
    now = datetime.now(UTC)
    old_sent = await _record(store, "sent last week", now - timedelta(days=8))
    await store.deliveries.mark_sent(old_sent)
    old_pending = await _record(store, "still pending", now - timedelta(days=8))
    recent_sent = await _record(store, "sent today", now - timedelta(hours=1))
    await store.deliveries.mark_sent(recent_sent)
    assert await store.deliveries.prune(now - timedelta(days=7)) == 1
    assert await store.deliveries.get(old_sent) is None
    assert (await store.deliveries.get(old_pending)).status == "pending"  # type: ignore[union-attr]
    assert (await store.deliveries.get(recent_sent)).status == "sent"  # type: ignore[union-attr]
