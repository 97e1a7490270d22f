"""Guarantees with several real ``concord run`` workers on PostgreSQL + Redis behind a load balancer:
each session's messages handled one at a time and in arrival order, none lost, none answered twice — also
when a worker is SIGKILLed mid-turn (its lock expires, another worker handles the message) or between storing
an answer and the platform's confirmation (the delivery ledger sends it, once)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from bench.cluster import Sent, check_exactly_once
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.scale.conftest import ClusterFactory


def echo(fake_llm: FakeLLMServer, slow: dict[str, float] | None = None) -> list[str]:
    """Answer each request at once with ``re: <last message>``; a text in ``slow`` waits that long the first
    time it is seen. Returns the texts in the order the model was asked."""
    asked: list[str] = []
    slow = dict(slow or {})

    def respond(body: dict[str, Any]) -> Reply:
        text = str(body["messages"][-1]["content"])
        asked.append(text)
        return Reply(f"re: {text}", delay=slow.pop(text, 0.0))

    fake_llm.responder = respond
    return asked


async def test_three_workers_keep_order_and_answer_each_message_once(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    cluster = await cluster_factory(3)
    sent: list[Sent] = []
    rng = random.Random(18)

    async def conversation(chat_id: int, start: int) -> None:
        for n in range(6):
            update, item = cluster.message(chat_id, f"chat {chat_id} message {n}")
            sent.append(item)
            # Each message to another worker than the last; every fourth also delivered twice at once (a
            # load balancer retrying, or Telegram redelivering).
            first = cluster.deliver(update, prefer=(start + n) % 3)
            if rng.random() < 0.25:
                await asyncio.gather(first, cluster.deliver(update, prefer=(start + n + 1) % 3))
            else:
                await first

    await asyncio.gather(*(conversation(cluster.new_chat(), c) for c in range(8)))
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
    handled = [await cluster.metric(i, "concord_messages_received_total") for i in range(3)]
    assert sum(handled) == len(sent) and all(handled)  # every worker took part


async def test_a_worker_killed_mid_turn_leaves_the_message_to_another(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    asked = echo(fake_llm, slow={"the slow one": 60.0})
    cluster = await cluster_factory(2, CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    chat = cluster.new_chat()
    sent: list[Sent] = []
    for text in ("before", "the slow one"):
        update, item = cluster.message(chat, text)
        sent.append(item)
        if text == "before":
            await cluster.deliver(update, prefer=0)
            continue
        delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
        while "the slow one" not in asked:  # noqa: ASYNC110 — the fake LLM has no event to wait on
            await asyncio.sleep(0.02)
        cluster.kill(0)  # mid-turn, holding the session's turn lock
        killed_at = time.monotonic()
        assert await delivery == 1  # the load balancer's retry went to the other worker
        waited = time.monotonic() - killed_at
    update, item = cluster.message(chat, "after")
    sent.append(item)
    await cluster.deliver(update, prefer=1)
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
    assert 2.0 <= waited <= 15.0  # the dead worker's lock expired (3 s), then the retry ran


async def test_a_worker_killed_before_the_platform_confirmed_loses_no_answer(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    cluster = await cluster_factory(2, CONCORD_DELIVERY__RESEND_AFTER_SECONDS=2)
    chat = cluster.new_chat()
    update, item = cluster.message(chat, "answer me")
    fake_telegram.stall_texts.add("re: answer me")  # worker 0 stores the answer, then hangs in sendMessage
    delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
    while fake_telegram.calls.count("sendMessage") == 0:  # noqa: ASYNC110 — nothing to wait on but the fake
        await asyncio.sleep(0.02)
    cluster.kill(0)
    fake_telegram.stall_texts.clear()
    assert await delivery == 1  # worker 1 finds the message handled: no second turn
    deadline = time.monotonic() + 20
    while not fake_telegram.sent_messages and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.5)  # time for a (wrong) second resend
    assert await check_exactly_once([item], fake_telegram.sent_messages, database_url) == []
    assert await cluster.metric(1, "concord_answers_redelivered_total") == 1
    assert len(fake_llm.requests) == 1


async def test_one_worker_polls_and_another_takes_over_when_it_dies(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    cluster = await cluster_factory(2, CONCORD_TELEGRAM__MODE="polling", CONCORD_TELEGRAM__POLLING_LEASE_SECONDS=3)
    chat = cluster.new_chat()
    sent: list[Sent] = []

    async def say(text: str) -> None:
        message = fake_telegram.inject_message(text, chat_type="private", chat_id=chat, user_id=chat)
        sent.append(Sent(chat, message["message_id"], text))
        await fake_telegram.wait_for_messages(len(sent), within_s=30)

    await say("who polls?")
    received = [await cluster.metric(i, "concord_messages_received_total") for i in range(2)]
    assert sorted(received) == [0, 1]  # exactly one worker polls
    poller = received.index(1)
    cluster.kill(poller)  # no release: the lease expires (3 s) and the other worker takes it
    killed_at = time.monotonic()
    await say("still there?")
    takeover = time.monotonic() - killed_at
    await say("and again")
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
    assert await cluster.metric(1 - poller, "concord_messages_received_total") == 2
    assert takeover <= 3 + 1 + 5  # the lease's expiry, one retry interval, a poll round trip
