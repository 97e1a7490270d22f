"""The last loss windows, each hit with real ``concord run`` workers on PostgreSQL + Redis: a
connection lost inside a turn's COMMIT (a proxy between the worker and PostgreSQL cuts it once the COMMIT went
through), and a worker SIGKILLed at a named crash point (`gateway.ops.faults`) — after a compaction stored the
request, in the middle of a command, between an inbox write and its handling, with an observed group line not
yet written — and a Discord worker SIGKILLed in the middle of a database outage (a private PostgreSQL cluster,
stopped). Each time every message is stored once and answered once, in order.

A killed worker is started again without the crash point (the other windows' tests in test_crash_windows.py
use a second worker instead)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from bench.cluster import Sent, check_exactly_once
from bench.crash_campaign import FILLER
from bench.crash_rig import restart_unarmed, stored_counts
from gateway.conversation.commands import INTERRUPTED_COMMAND
from gateway.ops.faults import ENV as KILL_AT
from gateway.store import Store, upgrade_database
from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscord, SentMessage
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegram
from tests.faults.pgproxy import CommitCutter
from tests.faults.services import private_postgres
from tests.scale.conftest import ClusterFactory
from tests.scale.test_crash_windows import _poller
from tests.scale.test_workers_e2e import echo


async def _until(condition: Callable[[], Awaitable[bool] | bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while True:
        value = condition()
        if await value if isinstance(value, Awaitable) else value:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def test_a_connection_lost_inside_the_turns_commit_stores_and_answers_it_once(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    proxy = CommitCutter(database_url, (b"INSERT INTO messages", b"ON CONFLICT (key) DO UPDATE"))
    await proxy.start()
    try:
        cluster = await cluster_factory(1, CONCORD_STORAGE__DATABASE_URL=proxy.url())
        proxy.armed = 1  # the first turn's COMMIT goes through, and its answer never reaches the worker
        chat = cluster.new_chat()
        sent = []
        for text in ("first question", "second question"):
            update, item = cluster.message(chat, text)
            sent.append(item)
            await cluster.deliver(update, prefer=0)
        await fake_telegram.wait_for_messages(2, within_s=30)
        await asyncio.sleep(0.5)  # time for a (wrong) second answer
        assert proxy.cuts == 1
        assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []
        async with await Store.open(database_url, migrate=False) as store:
            assert await store.deliveries.counts() == {"sent": 2}  # the unseen COMMIT's answer was the one sent
        assert len(fake_llm.requests) == 2
    finally:
        await proxy.aclose()


async def test_a_worker_killed_after_a_compaction_stored_the_request_resumes_it_once(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    # A small window, and hygiene out of the way: the agent compacts inside a turn, storing its request first.
    cluster = await cluster_factory(1, worker_env=[{KILL_AT: "request-stored"}], CONCORD_LLM__CONTEXT_LENGTH=8000,
                                    CONCORD_LLM__MAX_TOKENS=500, CONCORD_GATEWAY__HYGIENE_THRESHOLD=1.0,
                                    CONCORD_COMPRESSION__PROTECT_LAST_N=4, CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    chat = cluster.new_chat()
    sent: list[Sent] = []
    process = cluster.workers[0].process
    assert process is not None
    died = asyncio.ensure_future(process.wait())
    for n in range(12):
        update, item = cluster.message(chat, f"message {n}: {FILLER}")
        sent.append(item)
        delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
        await asyncio.wait([delivery, died], return_when=asyncio.FIRST_COMPLETED)
        if died.done() and not delivery.done():  # killed mid-turn: the platform's retry reaches the restart
            await restart_unarmed(cluster, 0)
            await delivery
            break
        await delivery
    assert died.done(), "no compaction inside a turn"
    update, item = cluster.message(chat, "and one more")
    sent.append(item)
    await cluster.deliver(update, prefer=0)
    await fake_telegram.wait_for_messages(len(sent), within_s=30)
    answered = [m.reply_to_message_id for m in fake_telegram.sent_messages if m.reply_to_message_id is not None]
    assert answered == [s.message_id for s in sent]  # each once, in order, the killed one included
    assert set((await stored_counts(database_url, sent)).values()) == {1}  # each request stored once


async def test_a_worker_killed_in_the_middle_of_a_command_does_not_run_it_twice(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    echo(fake_llm)
    cluster = await cluster_factory(1, worker_env=[{KILL_AT: "command-applied"}],
                                    CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    chat = cluster.new_chat()
    update, item = cluster.message(chat, "/pin never force-push to main")
    delivery = asyncio.create_task(cluster.deliver(update, prefer=0))
    await restart_unarmed(cluster, 0)  # the pin is stored, its reply is not
    await delivery
    await fake_telegram.wait_for_messages(1, within_s=20)
    await asyncio.sleep(1.0)
    replies = [m.text for m in fake_telegram.sent_messages if m.reply_to_message_id == item.message_id]
    assert replies == [INTERRUPTED_COMMAND.format(name="pin")]
    async with await Store.open(database_url, migrate=False) as store:
        assert [p.text for p in await store.pins.list("telegram", f"dm:{chat}")] == ["never force-push to main"]
        assert await store.deliveries.counts() == {"sent": 1}


@pytest.mark.parametrize("point", ["inbox-kept", "observed-queued"])
async def test_a_poller_killed_before_handling_what_it_kept_leaves_it_to_its_restart(
        point: str, cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str, redis_url: str) -> None:
    # A SIGKILL right after the inbox write, or while an observed group line waits for its batch: what Telegram
    # was told it got lives on in the inbox (what it was not told it sends again), and the restarted worker's
    # recovery handles it — once, however it comes back.
    echo(fake_llm)
    cluster = await cluster_factory(1, worker_env=[{KILL_AT: point}], CONCORD_TELEGRAM__MODE="polling",
                                    CONCORD_TELEGRAM__POLLING_LEASE_SECONDS=3, CONCORD_INBOX__STALE_AFTER_SECONDS=3,
                                    CONCORD_REDIS__LOCK_TIMEOUT_SECONDS=3)
    await _poller(cluster, redis_url)
    group = -100_000 - cluster.new_chat()
    lines = ["we ship on friday", "the cache moves first"]
    chat = cluster.new_chat()
    sent = [Sent(chat, fake_telegram.inject_message("before anything", chat_type="private", chat_id=chat,
                                                    user_id=chat)["message_id"], "before anything")]
    for n, line in enumerate(lines):
        fake_telegram.inject_message(line, chat_id=group, user_id=7 + n, user_name=f"u{n}")
    await restart_unarmed(cluster, 0)
    await fake_telegram.wait_for_messages(1, within_s=40)
    async with await Store.open(database_url, migrate=False) as store:
        async def observed() -> bool:
            record = await store.sessions.get_active("telegram", f"group:{group}")
            if record is None:
                return False
            return len((await store.messages.load_active(record.id)).messages) >= len(lines)

        await _until(observed, 40, "the observed lines were never stored")
        record = await store.sessions.get_active("telegram", f"group:{group}")
        assert record is not None
        stored = [m["content"] for m in (await store.messages.load_active(record.id)).messages]
        assert stored == ["[u0] we ship on friday", "[u1] the cache moves first"]
    assert await check_exactly_once(sent, fake_telegram.sent_messages, database_url) == []


def _discord_reply(reply: SentMessage) -> tuple[int, int | None]:
    return reply.channel_id, reply.reference_id


async def test_discord_messages_of_a_worker_killed_mid_outage_are_answered_once_in_order(
        cluster_factory: ClusterFactory, fake_discord: FakeDiscord, fake_llm: FakeLLMServer) -> None:
    # Discord never sends them again: during the outage they are in the worker's spool on disk, not just memory.
    with private_postgres() as server:
        if isinstance(server, str):
            pytest.skip(server)
        await upgrade_database(server.url)
        echo(fake_llm)
        cluster = await cluster_factory(1, discord=fake_discord, CONCORD_STORAGE__DATABASE_URL=server.url,
                                        CONCORD_DISCORD__STREAMING="false", CONCORD_INBOX__STALE_AFTER_SECONDS=3)
        await asyncio.to_thread(server.stop)
        sent = []
        for n in range(5):
            message = await fake_discord.inject_message(f"asked during the outage {n}", channel_id=DM_CHANNEL_ID)
            sent.append(Sent(DM_CHANNEL_ID, int(message["id"]), f"asked during the outage {n}",
                             chat_key=f"dm:{DM_CHANNEL_ID}"))
        spool = cluster.workdir / "worker-0" / "spool"

        def spooled() -> bool:
            return sum(p.read_bytes().count(b"\n") for p in spool.glob("*.jsonl")) == len(sent)

        await _until(spooled, 30, "the messages were never spooled")
        cluster.kill(0)
        process = cluster.workers[0].process
        assert process is not None
        await process.wait()
        await asyncio.to_thread(server.start)
        await cluster.spawn(cluster.workers[0])
        await _until(lambda: len(fake_discord.sent_messages) >= len(sent), 60, "not every message was answered")
        await asyncio.sleep(1.0)
        assert await check_exactly_once(sent, fake_discord.sent_messages, server.url, platform="discord",
                                        reply_of=_discord_reply) == []
        assert list(spool.glob("*.jsonl")) == []

