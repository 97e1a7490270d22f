"""/stop and gateway.busy_mode (queue / interrupt / collect) through the router, with the fake LLM server."""

from __future__ import annotations

import asyncio

from agent.turn import INTERRUPTED_MARK
from gateway.conversation.answers import INTERRUPTED_BY_NEW_TEXT, STOPPED_TEXT
from gateway.conversation.commands import NOT_YOURS, NOTHING_TO_STOP
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.llm_wire import Reply
from tests.gateway.conftest import GatewayFactory, ScriptedAdapter


async def _until(condition: object, within_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not condition():  # type: ignore[operator]
        assert loop.time() < deadline, "condition not met"
        await asyncio.sleep(0.02)


def _start(adapter: ScriptedAdapter, text: str, **kw: object) -> asyncio.Task[None]:
    return asyncio.create_task(adapter.say(text, **kw))


async def test_stop_cancels_the_running_turn_and_keeps_the_transcript_valid(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("too slow to wait for", delay=30)
    fake_llm.reply("fresh answer")
    gateway, adapter = await gateway_factory()
    await adapter.say("/stop", chat_id="d1")
    assert adapter.texts() == [NOTHING_TO_STOP]
    turn = _start(adapter, "write me an epic", chat_id="d1")
    await _until(lambda: len(fake_llm.requests) == 1)
    started = asyncio.get_running_loop().time()
    await adapter.say("/stop", chat_id="d1")
    await asyncio.wait_for(turn, 5)
    assert asyncio.get_running_loop().time() - started < 5  # not the 30 s the model would have taken
    assert adapter.texts()[1:] == [STOPPED_TEXT]
    await adapter.say("try again", chat_id="d1")
    assert adapter.texts()[-1] == "fresh answer"
    # The stopped question is in the transcript the next call saw, answered by nothing (no dangling call).
    sent = fake_llm.requests[-1].messages
    assert [m["content"] for m in sent if m["role"] == "user"][-2:] == ["write me an epic", "try again"]
    record = await gateway.rt.store.sessions.get_active("discord", "dm:d1")
    assert record is not None and record.message_count == 3
    # Both calls were made (the stopped one was streaming a paid answer): /stats counts both.
    await adapter.say("/stats", chat_id="d1", user_id="boss")
    assert "LLM calls: 2 (2 agent, 0 summary" in adapter.texts()[-1]


async def test_only_the_sender_or_an_admin_may_stop(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("slow", delay=30)
    _, adapter = await gateway_factory()
    turn = _start(adapter, "question", chat_type="group", chat_id="g", user_id="u1", user_name="Ann",
                  mentions_bot=True)
    await _until(lambda: len(fake_llm.requests) == 1)
    await adapter.say("/stop", chat_type="group", chat_id="g", user_id="u2", user_name="Bob")
    assert adapter.texts() == [NOT_YOURS.format(name="Ann")]
    assert not turn.done()
    await adapter.say("/stop", chat_type="group", chat_id="g", user_id="boss", user_name="Boss")
    await asyncio.wait_for(turn, 5)
    assert adapter.texts()[-1] == STOPPED_TEXT


async def test_interrupt_mode_answers_the_new_message_with_the_interrupted_context(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("never finished", delay=30)
    fake_llm.reply("answer to the correction")
    _, adapter = await gateway_factory(gateway={"busy_mode": "interrupt"})
    first = _start(adapter, "summarise the logs", chat_id="d1")
    await _until(lambda: len(fake_llm.requests) == 1)
    await asyncio.wait_for(adapter.say("actually, only the errors", chat_id="d1"), 5)
    await first
    assert adapter.texts() == [INTERRUPTED_BY_NEW_TEXT, "answer to the correction"]
    users = [m["content"] for m in fake_llm.requests[-1].messages if m["role"] == "user"]
    assert users == ["summarise the logs", "actually, only the errors"]


async def test_queue_mode_answers_both_in_order(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("one", delay=0.3)
    fake_llm.reply("two")
    _, adapter = await gateway_factory()
    first = _start(adapter, "q1", chat_id="d1")
    await _until(lambda: len(fake_llm.requests) == 1)
    await adapter.say("q2", chat_id="d1")
    await first
    assert adapter.texts() == ["one", "two"]


async def test_collect_mode_makes_one_turn_of_a_burst(gateway_factory: GatewayFactory,
                                                      fake_llm: FakeLLMServer) -> None:
    fake_llm.responder = lambda body: Reply("got it all")
    _, adapter = await gateway_factory(gateway={"busy_mode": "collect", "collect_window_seconds": 0.3})
    burst = [_start(adapter, text, chat_id="d1") for text in ("my server", "is down", "since noon")]
    other = _start(adapter, "unrelated", chat_id="d2", user_id="u9")
    await asyncio.wait_for(asyncio.gather(*burst, other), 10)
    assert sorted(adapter.texts()) == ["got it all", "got it all"]
    asked = sorted(str(r.messages[-1]["content"]) for r in fake_llm.requests)
    assert asked == ["my server\nis down\nsince noon", "unrelated"]


async def test_partial_text_is_kept_marked_when_a_streamed_turn_is_stopped(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    """A streaming adapter (here a recording one) keeps the words already shown; the transcript ends with them,
    marked as interrupted, so the model knows it was cut off."""
    fake_llm.reply("word " * 200, chunk_delay=0.05, text_pieces=200)
    gateway, adapter = await gateway_factory()
    shown: list[str] = []

    class Live:
        async def text(self, text: str) -> None:
            shown.append(text)

        async def status(self, text: str) -> None:
            shown.append(text)

        async def finish(self, text: str) -> None:
            shown.append(f"FINAL:{text}")

    adapter.live_reply = lambda target: Live()  # type: ignore[method-assign]
    turn = _start(adapter, "tell me a long story", chat_id="d1")
    await _until(lambda: len(shown) >= 5)
    await adapter.say("/stop", chat_id="d1")
    await asyncio.wait_for(turn, 5)
    partial = shown[-2]
    assert 0 < len(partial) < len("word " * 200)
    assert shown[-1] == f"FINAL:{partial}\n\n{STOPPED_TEXT}"
    record = await gateway.rt.store.sessions.get_active("discord", "dm:d1")
    assert record is not None
    rows = await gateway.rt.store.messages.export(record.id)
    assert rows[-1].message["content"] == f"{partial}\n\n{INTERRUPTED_MARK}"
