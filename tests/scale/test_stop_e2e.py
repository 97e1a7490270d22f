"""/stop from any worker: two real ``concord run`` workers on PostgreSQL + Redis behind the test's load
balancer (Telegram webhook mode, answers streamed by editing one message). A turn streams slowly on worker 0;
the /stop is delivered to worker 1. The turn stops within 2 s, the chat sees "⏹️ Stopped." once (under what was
written) and nothing else for the /stop, and the stored transcript keeps the partial answer marked interrupted."""

from __future__ import annotations

import asyncio
import time

from agent.turn import INTERRUPTED_MARK
from gateway.conversation.answers import STOPPED_TEXT
from gateway.store import Store
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_server import FakeTelegram
from tests.scale.conftest import ClusterFactory

STORY = "word " * 400


async def test_a_stop_delivered_to_the_other_worker_stops_the_turn(
        cluster_factory: ClusterFactory, fake_llm: FakeLLMServer, fake_telegram: FakeTelegram,
        database_url: str) -> None:
    fake_llm.reply(STORY, chunk_delay=0.05, text_pieces=400)  # 20 s of streaming
    cluster = await cluster_factory(2, CONCORD_TELEGRAM__STREAMING="true")
    chat = cluster.new_chat()
    question, _ = cluster.message(chat, "tell me a long story")
    turn = asyncio.create_task(cluster.deliver(question, prefer=0))
    deadline = time.monotonic() + 30
    while not fake_telegram.edits:  # the answer is growing on screen
        assert time.monotonic() < deadline and not turn.done(), "the turn never started streaming"
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    stop, _ = cluster.message(chat, "/stop")
    asked = time.monotonic()
    assert await cluster.deliver(stop, prefer=1) == 1
    assert await asyncio.wait_for(turn, 10) == 0  # worker 0 ran the turn
    assert time.monotonic() - asked < 2.0
    shown = [m.visible_text for m in fake_telegram.sent_messages if m.chat_id == str(chat)]
    assert len(shown) == 1  # the live answer, nothing else: no "nothing to stop", no second notice
    partial, _, notice = shown[0].rpartition("\n\n")
    assert notice == STOPPED_TEXT and 0 < len(partial) < len(STORY.strip())
    assert sum(STOPPED_TEXT in str(edit.get("text")) for edit in fake_telegram.edits) == 1
    async with await Store.open(database_url, migrate=False) as store:
        record = await store.sessions.get_active("telegram", f"dm:{chat}")
        assert record is not None
        messages = (await store.messages.load_active(record.id)).messages
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[-1]["content"] == f"{partial}\n\n{INTERRUPTED_MARK}"
