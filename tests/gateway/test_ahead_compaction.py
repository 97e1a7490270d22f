"""Compaction ahead of need through the real gateway: after an answer is sent, a session past its soft
mark is compacted in the background; a message arriving meanwhile is answered from the context as it stands if
it fits (and waits for the compaction only if it would not), and everything ends stored once, in order.

The fake model holds each summary back until the test lets it go (`Reply.gate`), so "meanwhile" is a fact of
the test, not a race against a clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent.compression.pacing import soft_mark, turn_tokens
from agent.compression.threshold import output_reserve, request_room
from gateway.app import Gateway
from gateway.conversation.session_commands import AFTER_RUNNING, BUSY, MANUAL_REASON
from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import Fail, FakeLLMServer, Reply
from tests.gateway.conftest import (
    SUMMARY_MARKER,
    GatewayFactory,
    ScriptedAdapter,
    chatter,
    is_summary_request,
)
from tests.gateway.test_console_adapter import until

WINDOW = {"context_length": 8_192}
# Long enough that one turn takes the session over its soft mark.
FILLER = " ".join(["and that is worth keeping in mind"] * 8)


class Model:
    """The fake model: answers chat calls at once (``answer to <the line>``), holds summaries until released."""

    def __init__(self, server: FakeLLMServer, *, summary: Callable[[], Reply | Fail] | None = None) -> None:
        self.calls: list[str] = []  # "summary", or the last line a chat call answered
        self.chats: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self._summary: Callable[[], Reply | Fail] = summary or (lambda: Reply(f"## Goal\n{SUMMARY_MARKER} the user chatted.", gate=self.release))
        server.responder = self._respond

    def _respond(self, body: dict[str, Any]) -> Reply | Fail:
        if is_summary_request(body):
            self.calls.append("summary")
            return self._summary()
        line = str(body["messages"][-1]["content"])
        self.calls.append(line)
        self.chats.append(body)
        return Reply(f"answer to {line[:40]} {FILLER}")


async def near_the_soft_mark(gateway: Gateway, chat_key: str = "dm:c1", *, threshold: bool = False) -> str:
    """A stored session whose next request is just under its soft mark — or its ``threshold`` — so that one more
    turn takes it over; its id."""
    rt = gateway.rt
    record = await rt.store.sessions.get_or_create_active("discord", chat_key)
    live = await gateway.sessions.open(SessionKey("discord", chat_key), "u1")
    limit = live.engine.threshold_tokens
    used = rt.counter.count_request([], system=live.system_prompt, tools=live.loop.schemas())
    history, counts = [], []
    for message in chatter(600):
        count = rt.counter.count_message(message)
        # The soft mark at the pace of the conversation so far (chatter: every turn about the same).
        mark = limit if threshold else soft_mark(limit, turn_tokens(counts, len(counts) // 2))
        if used + count > mark - 40:
            break
        history.append(message)
        counts.append(count)
        used += count
    if len(history) % 2:  # end on an answer
        history.pop()
        counts.pop()
    await rt.store.messages.append(record.id, history, counts)
    return record.id


def room_left(gateway: Gateway, chat_key: str = "dm:c1") -> int:
    """Tokens a next message may take before its request (and the answer's reserve) no longer fits the window."""
    live = gateway.sessions.cached(SessionKey("discord", chat_key))
    assert live is not None
    window = live.engine.context_length
    used = gateway.rt.counter.count_request(live.messages, system=live.system_prompt, tools=live.loop.schemas())
    return request_room(window, used) - (output_reserve(None, window) or 0)


def user_lines(messages: list[dict[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "user"]


async def start_compaction(gateway: Gateway, adapter: ScriptedAdapter, model: Model, *,
                           threshold: bool = False) -> str:
    """A session past its soft mark (or its threshold) after one answer, its compaction ahead of need started (its
    summary held)."""
    session_id = await near_the_soft_mark(gateway, threshold=threshold)
    await adapter.say("first question")
    assert adapter.texts()[-1].startswith("answer to first question")
    await until(lambda: "summary" in model.calls, 20)
    assert gateway.router.ahead.running(session_id)
    return session_id


async def test_a_message_arriving_mid_compaction_is_answered_at_once_and_everything_ends_in_order(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    model = Model(fake_llm)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await start_compaction(gateway, adapter, model)
    before = (await gateway.rt.store.messages.load_active(session_id)).messages

    await adapter.say("second question")  # returns once answered: the summary is still held
    assert adapter.texts()[-1].startswith("answer to second question")
    assert gateway.router.ahead.running(session_id)
    assert model.calls[-2:] == ["summary", "second question"]  # no summary of its own in that turn
    assert SUMMARY_MARKER not in str(model.chats[-1]["messages"])  # answered from the context as it stood

    model.release.set()
    await until(lambda: not gateway.router.ahead.running(session_id), 20)
    store = gateway.rt.store
    active = (await store.messages.load_active(session_id)).messages
    assert any(SUMMARY_MARKER in str(m["content"]) for m in active)
    # The turn that arrived meanwhile follows the compacted set, in order, once.
    lines = user_lines(active)
    assert lines[-2:] == ["first question", "second question"]
    assert [str(m["content"]).split(" ")[:4] for m in active[-3:]] == [
        ["answer", "to", "first", "question"], ["second", "question"], ["answer", "to", "second", "question"]]
    assert sum(line == "second question" for line in lines) == 1
    # Nothing lost: every message of the session before the compaction is still stored (archived).
    everything = [r.message["content"] for r in await store.messages.export(session_id, include_archived=True)]
    assert all(m["content"] in everything for m in before)
    [compaction] = await store.compactions.history(session_id)
    assert (compaction.reason, compaction.carried) == ("ahead of need", 2)

    await adapter.say("third question")  # runs on the compacted context, with no summary call of its own
    assert SUMMARY_MARKER in str(model.chats[-1]["messages"])
    assert model.calls.count("summary") == 1
    assert gateway.rt.metrics.compressions["ahead of need"].count == 1


async def test_past_the_threshold_a_message_that_fits_is_answered_without_a_compaction_of_its_own(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    model = Model(fake_llm)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await start_compaction(gateway, adapter, model, threshold=True)
    live = gateway.sessions.cached(SessionKey("discord", "dm:c1"))
    assert live is not None  # the next request, as stored, is over the threshold: its preflight would compact
    assert gateway.rt.counter.count_request(live.messages, system=live.system_prompt,
                                            tools=live.loop.schemas()) >= live.engine.threshold_tokens
    assert room_left(gateway) > 50

    await adapter.say("second question")  # over the threshold, but it fits: the compaction running does the rest
    assert model.calls[-2:] == ["summary", "second question"]
    assert gateway.router.ahead.running(session_id)
    model.release.set()
    await until(lambda: not gateway.router.ahead.running(session_id), 20)
    active = (await gateway.rt.store.messages.load_active(session_id)).messages
    assert user_lines(active)[-2:] == ["first question", "second question"]
    assert model.calls.count("summary") == 1


async def test_a_message_that_would_not_fit_waits_for_the_compaction_and_runs_on_its_result(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    model = Model(fake_llm)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await start_compaction(gateway, adapter, model)
    paste = "a long paste " + " ".join(["word"] * (room_left(gateway) + 100))  # beyond the window's room now

    waiting = asyncio.create_task(adapter.say(paste))
    await asyncio.sleep(0.5)
    assert not waiting.done() and model.calls[-1] == "summary"  # not asked: it waits for the compaction
    model.release.set()
    await waiting
    assert model.calls.count("summary") == 1  # its turn did not compact again
    assert SUMMARY_MARKER in str(model.chats[-1]["messages"])  # it ran on the compaction's result
    assert adapter.texts()[-1].startswith("answer to a long paste")
    active = (await gateway.rt.store.messages.load_active(session_id)).messages
    assert user_lines(active)[-2:] == ["first question", paste]


async def test_compress_during_a_compaction_ahead_of_need_waits_for_it_and_then_compresses(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    model = Model(fake_llm)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await start_compaction(gateway, adapter, model)

    command = asyncio.create_task(adapter.say("/compress the deadlines", user_id="boss"))
    await asyncio.sleep(0.5)
    assert not command.done() and model.calls.count("summary") == 1  # waits; no "try again"
    model.release.set()
    await command
    reply = adapter.texts()[-1]
    assert reply.startswith(AFTER_RUNNING) and BUSY not in reply
    store = gateway.rt.store
    reasons = [c.reason for c in await store.compactions.history(session_id)]
    # It acted on what the running compaction left: that one stored first, then its own (or nothing to do).
    assert reasons[0] == "ahead of need" and reasons[1:] in ([], [MANUAL_REASON])
    assert model.calls.count("summary") == len(reasons)


async def test_a_compaction_ahead_of_need_that_fails_changes_nothing_and_is_not_retried_at_once(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    # The summary model refuses the key: a compaction freezes then (R-C8), and nothing is stored.
    model = Model(fake_llm, summary=lambda: Fail("auth", {}))
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await near_the_soft_mark(gateway)
    before = (await gateway.rt.store.messages.load_active(session_id)).messages
    await adapter.say("first question")
    await until(lambda: "summary" in model.calls, 20)
    await until(lambda: not gateway.router.ahead.running(session_id), 20)
    await adapter.say("second question")
    active = (await gateway.rt.store.messages.load_active(session_id)).messages
    assert active[:len(before)] == before
    assert user_lines(active)[-2:] == ["first question", "second question"]
    assert await gateway.rt.store.compactions.history(session_id) == []
    # Not tried again after the very next answer: a few turns later, while the threshold stays the safety net.
    assert model.calls.count("summary") == 1
