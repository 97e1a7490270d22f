"""Compaction ahead of need with real ``concord run`` workers on PostgreSQL + Redis:

* one worker SIGKILLed in the middle of a compaction ahead of need (`gateway.ops.faults` ``ahead-summarized``: its
  summary written, its result not stored), after a message arrived and was answered meanwhile: started again,
  the next compaction is stored, and every message is stored once and answered once, in order;
* two workers, the compaction running on one while the session's next messages go to the other: they are
  answered at once from the context as it stands, follow the compacted set in order, and nobody compacts twice.

The fake model holds each summary until the test releases it, so "meanwhile" is a fact, not a race."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from sqlalchemy import func, select

from bench.cluster import Cluster, Sent
from bench.crash_campaign import restart_unarmed
from gateway.ops.faults import ENV as KILL_AT
from gateway.store import Store
from gateway.store.database import create_engine
from gateway.store.models import MessageRow, SessionRow
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway.conftest import SUMMARY_MARKER, is_summary_request
from tests.scale.conftest import ClusterFactory
from tests.scale.test_loss_windows import _until

# A small window (the threshold at 6,375 tokens; the soft mark three turns below it) and hygiene out of the way.
SMALL = {"CONCORD_LLM__CONTEXT_LENGTH": 8000, "CONCORD_LLM__MAX_TOKENS": 500,
         "CONCORD_GATEWAY__HYGIENE_THRESHOLD": 1.0, "CONCORD_REDIS__LOCK_TIMEOUT_SECONDS": 3}
FILL = " ".join(f"the migration plan step {n} moves shard {n % 7} after the schema check" for n in range(24))


class Model:
    """Answers chat calls at once (``re: <line>``); holds each summary until ``release`` is set."""

    def __init__(self, server: FakeLLMServer) -> None:
        self.calls: list[str] = []  # "summary", or the line a chat call answered
        self.chats: list[str] = []  # each chat request's messages, as text
        self.release = asyncio.Event()
        server.responder = self._respond

    def _respond(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.calls.append("summary")
            return Reply(f"## Goal\n{SUMMARY_MARKER} the migration plan.", gate=self.release)
        line = str(body["messages"][-1]["content"])
        self.calls.append(line)
        self.chats.append(json.dumps(body["messages"]))
        return Reply(f"re: {line[:60]}")


class Chat:
    """One private chat: what it sent, in order."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.id = cluster.new_chat()
        self.sent: list[Sent] = []

    async def say(self, text: str, prefer: int = 0) -> None:
        """Send ``text`` to worker ``prefer`` and return once a worker has handled it."""
        update, item = self.cluster.message(self.id, text)
        self.sent.append(item)
        await self.cluster.deliver(update, prefer=prefer)

    async def past_the_soft_mark(self, model: Model, prefer: int = 0) -> None:
        """Long lines until a compaction ahead of need starts (its summary call arrives)."""
        for n in range(40):
            await self.say(f"plan {n}: {FILL}", prefer)
            for _ in range(20):  # an answer's compaction starts once the answer was delivered
                if "summary" in model.calls:
                    return
                await asyncio.sleep(0.05)
        raise AssertionError("no compaction ahead of need")


async def stored_lines(database_url: str, chat_key: str) -> list[str]:
    """The chat's user messages as first stored, in order: the copies a compaction kept in its tail (marked
    compacted) or carried over after its set (same time, same text) are not counted again."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(
                select(MessageRow.payload).join(SessionRow, SessionRow.id == MessageRow.session_id)
                .where(SessionRow.chat_key == chat_key, MessageRow.role == "user", MessageRow.compacted.is_(False))
                .group_by(MessageRow.payload, MessageRow.created_at).order_by(func.min(MessageRow.id)))
            return [str(json.loads(payload)["content"]) for (payload,) in rows]
    finally:
        await engine.dispose()


def answered(telegram: FakeTelegram, chat: Chat) -> list[int]:
    """The messages of ``chat`` the bot answered, in the order the answers were sent."""
    return [m.reply_to_message_id for m in telegram.sent_messages
            if int(m.chat_id) == chat.id and m.reply_to_message_id is not None]


async def reasons(database_url: str, chat: Chat) -> list[str]:
    async with await Store.open(database_url, migrate=False) as store:
        record = await store.sessions.get_active("telegram", f"dm:{chat.id}")
        assert record is not None
        return [c.reason for c in await store.compactions.history(record.id)]


async def test_a_worker_killed_mid_compaction_ahead_of_need_loses_and_doubles_nothing(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    model = Model(fake_llm)
    cluster = await cluster_factory(1, worker_env=[{KILL_AT: "ahead-summarized"}], **SMALL)
    chat = Chat(cluster)
    await chat.past_the_soft_mark(model)
    await chat.say("a question while the summary is written")  # answered by the worker that is summarizing
    assert model.calls[-2:] == ["summary", "a question while the summary is written"]
    model.release.set()  # the summary returns: the worker dies before storing its result
    await restart_unarmed(cluster, 0)
    assert await reasons(database_url, chat) == []
    # The dead worker cannot release its compression lock: it frees the session when its TTL runs out. A restart
    # quicker than that would see the session "compacted elsewhere" and, rightly, leave it to the next turn.
    await asyncio.sleep(float(SMALL["CONCORD_REDIS__LOCK_TIMEOUT_SECONDS"]))

    await chat.say("after the restart")  # its answer starts the next compaction ahead of need, stored this time
    await _until(lambda: model.calls.count("summary") == 2, 60, "a second compaction ahead of need")
    await _until(lambda: reasons(database_url, chat), 60, "the compaction stored")
    assert await reasons(database_url, chat) == ["ahead of need"]
    await chat.say("and one more")
    assert SUMMARY_MARKER in model.chats[-1]
    await fake_telegram.wait_for_messages(len(chat.sent), within_s=30)
    assert answered(fake_telegram, chat) == [s.message_id for s in chat.sent]  # each once, in order
    assert await stored_lines(database_url, f"dm:{chat.id}") == [s.text for s in chat.sent]


async def test_two_workers_answer_during_a_compaction_ahead_of_need_and_keep_the_order(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    model = Model(fake_llm)
    cluster = await cluster_factory(2, **SMALL)
    chat = Chat(cluster)
    await chat.past_the_soft_mark(model, prefer=0)  # worker 0 compacts (the summary is held)
    for n in range(3):  # the session's next messages reach the other worker, which answers them at once
        await chat.say(f"meanwhile {n}", prefer=1)
    assert model.calls[-4:] == ["summary", "meanwhile 0", "meanwhile 1", "meanwhile 2"]
    assert not any(SUMMARY_MARKER in chat_ for chat_ in model.chats)
    model.release.set()
    await _until(lambda: reasons(database_url, chat), 60, "the compaction stored")
    await chat.say("after the compaction", prefer=1)
    assert SUMMARY_MARKER in model.chats[-1]  # worker 1 runs on the compacted set
    await chat.say("last", prefer=0)
    assert model.calls.count("summary") == 1  # nobody compacted it a second time
    assert await reasons(database_url, chat) == ["ahead of need"]
    await fake_telegram.wait_for_messages(len(chat.sent), within_s=30)
    assert answered(fake_telegram, chat) == [s.message_id for s in chat.sent]
    assert await stored_lines(database_url, f"dm:{chat.id}") == [s.text for s in chat.sent]
    async with await Store.open(database_url, migrate=False) as store:
        record = await store.sessions.get_active("telegram", f"dm:{chat.id}")
        assert record is not None
        active = [str(m["content"]) for m in (await store.messages.load_active(record.id)).messages
                  if m["role"] == "user"]
    # The messages answered meanwhile follow the compacted set, in order, each once.
    assert active[-5:] == ["meanwhile 0", "meanwhile 1", "meanwhile 2", "after the compaction", "last"]
