"""Real ``concord run`` workers on PostgreSQL + Redis SIGKILLed where a message used to be lost or doubled
(issue 18):

* polling mode — the poller is killed while a turn is in flight, after Telegram was told (the offset) that
  the update arrived: the message lives on in the inbox and the worker that takes the lease over answers it;
* webhook mode — a worker is killed after its turn was stored but before the message was marked handled in
  Redis (the live reply's first post stalls on the fake Bot API): the retry finds the turn stored, does not
  run it again, and the ledger sends the stored answer.

``CONCORD_TEST_KILL_ROUNDS`` (default 2) sets how many pollers the first test kills one after another.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from sqlalchemy import func, select

from bench.cluster import Cluster, Sent, check_exactly_once
from gateway.store.database import create_engine
from gateway.store.models import DeliveryRow, MessageRow
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegram
from tests.scale.conftest import ClusterFactory
from tests.scale.test_workers_e2e import echo

ROUNDS = int(os.environ.get("CONCORD_TEST_KILL_ROUNDS", "2"))


async def _poller(cluster: Cluster, redis_url: str) -> int:
    """The index of the worker holding the polling lease (waiting until one does)."""
    client = Redis.from_url(redis_url)
    try:
        for _ in range(300):
            holder = await client.get(f"{cluster.key_prefix}lease:telegram-polling")
            if holder is not None:
                return int(holder.decode().removeprefix("worker-").partition("#")[0])
            await asyncio.sleep(0.05)
    finally:
        await client.aclose()
    raise TimeoutError("no worker took the polling lease")


def _private_chat(cluster: Cluster, fake_telegram: FakeTelegram, sent: list[Sent]) -> Callable[[str], None]:
    """A new private chat: what it says is injected into the fake Telegram and noted in ``sent``."""
    chat = cluster.new_chat()

    def say(text: str) -> None:
        message = fake_telegram.inject_message(text, chat_type="private", chat_id=chat, user_id=chat)
        sent.append(Sent(chat, message["message_id"], text))

    return say


async def _until(condition: Callable[[], Awaitable[bool] | bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await _value(condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def _value(result: Awaitable[bool] | bool) -> bool:
    return await result if inspect.isawaitable(result) else bool(result)


async def test_a_poller_killed_mid_turn_leaves_its_message_to_the_next_poller(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str, redis_url: str) -> None:
    slow = {f"slow {n}": 60.0 for n in range(ROUNDS)}
    asked = echo(fake_llm, slow=slow)
    cluster = await cluster_factory(2, CONCORD_TELEGRAM__MODE="polling", CONCORD_TELEGRAM__POLLING_LEASE_SECONDS=3,
                                    CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3, CONCORD_INBOX__STALE_AFTER_SECONDS=3)
    sent: list[Sent] = []
    say = _private_chat(cluster, fake_telegram, sent)
    say("before")
    await fake_telegram.wait_for_messages(1, within_s=30)
    recovered: list[float] = []
    for n in range(ROUNDS):
        poller = await _poller(cluster, redis_url)
        say(f"slow {n}")
        await _until(lambda n=n: f"slow {n}" in asked, 30, "the slow turn never started")
        assert not fake_telegram._updates  # Telegram was told the update arrived: only the inbox has it now
        cluster.kill(poller)
        killed_at = time.monotonic()
        await fake_telegram.wait_for_messages(len(sent), within_s=30)
        recovered.append(time.monotonic() - killed_at)
        process = cluster.workers[poller].process
        assert process is not None
        await process.wait()
        if n + 1 < ROUNDS:
            await cluster.spawn(cluster.workers[poller])  # the killed worker comes back and stands by
    say("after")
    await fake_telegram.wait_for_messages(len(sent), within_s=30)
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
    # Each slow message asked twice (the killed turn, then its retry), every other message once.
    assert sorted(asked) == sorted([m.text for m in sent] + [f"slow {n}" for n in range(ROUNDS)])
    # The claim goes stale (3 s) as the lease and the lock expire (3 s each); one recovery interval on top.
    assert all(2.0 <= waited <= 15.0 for waited in recovered), recovered


async def test_a_worker_killed_after_storing_its_turn_does_not_get_it_stored_twice(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    cluster = await cluster_factory(2, CONCORD_TELEGRAM__STREAMING="true", CONCORD_DELIVERY__RESEND_AFTER_SECONDS=2,
                                    CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    chat = cluster.new_chat()
    update, item = cluster.message(chat, "answer me")
    fake_telegram.stall_texts.add("re: ")  # the live reply's first post hangs: worker 0 is stuck after the turn
    delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
    engine = create_engine(database_url)
    try:
        async def stored() -> bool:
            async with engine.connect() as conn:
                messages = (await conn.execute(select(func.count()).select_from(MessageRow))).scalar_one()
                pending = (await conn.execute(select(func.count()).select_from(DeliveryRow)
                                              .where(DeliveryRow.status == "pending"))).scalar_one()
            return messages == 2 and pending == 1

        await _until(stored, 30, "the turn and its answer were never stored")  # one transaction: both or none
    finally:
        await engine.dispose()
    cluster.kill(0)  # the turn is stored, the message not yet marked handled in Redis, the answer not sent
    fake_telegram.stall_texts.clear()
    assert await delivery == 1  # Telegram's retry went to worker 1, which found the turn stored
    await fake_telegram.wait_for_messages(1, within_s=20)  # the ledger's recovery sends the stored answer
    await asyncio.sleep(1.5)  # time for a (wrong) second answer
    assert await check_exactly_once([item], fake_telegram.sent_messages, database_url) == []
    assert len(fake_llm.requests) == 1  # the turn ran once
    assert await cluster.metric(1, "concord_answers_redelivered_total") == 1
    assert await cluster.metric(1, "concord_inbound_duplicates_total") == 1


async def test_a_message_taken_over_is_answered_before_the_ones_that_came_after_it(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str, redis_url: str) -> None:
    asked = echo(fake_llm, slow={"slow": 60.0})
    # The killed poller's message goes stale in the inbox (5 s) well before its arrival ticket would be given up
    # (a lock's lifetime, 10 s), and the next poller takes the lease (3 s) and draws the next ticket in between.
    cluster = await cluster_factory(2, CONCORD_TELEGRAM__MODE="polling", CONCORD_TELEGRAM__POLLING_LEASE_SECONDS=3,
                                    CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=10, CONCORD_INBOX__STALE_AFTER_SECONDS=5)
    sent: list[Sent] = []
    say = _private_chat(cluster, fake_telegram, sent)
    say("before")
    await fake_telegram.wait_for_messages(1, within_s=30)
    poller = await _poller(cluster, redis_url)
    say("slow")
    await _until(lambda: "slow" in asked, 30, "the slow turn never started")
    cluster.kill(poller)
    killed_at = time.monotonic()
    say("next")  # fetched by the next poller while the dead one's ticket is still the one being served
    await _until(lambda: "next" in asked or asked.count("slow") == 2, 30, "nothing was handled after the kill")
    await fake_telegram.wait_for_messages(len(sent), within_s=30)
    waited = time.monotonic() - killed_at
    # In order ("slow", taken over, before "next"), each once; without rejoining, "slow" drew a ticket after
    # "next", which waited for the dead ticket to be skipped (10 s after it was first seen) and went first.
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
    assert asked[-2:] == ["slow", "next"]
    assert waited < 25.0, waited
