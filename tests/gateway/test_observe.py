"""gateway.group_history=observe: group lines stored in batches, kept across a restart, and a night of chatter
compacted by hygiene (with the group summary template) before the next mention is answered within the window."""

from __future__ import annotations

import asyncio
from typing import Any

from agent.compression.parts import MAX_PARTS
from agent.compression.summary import GROUP_SECTIONS
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, is_summary_request

GROUP = {"chat_type": "group", "chat_id": "g1"}
NAMES = ["Ann", "Bob", "Cy", "Dee", "Eve"]
TOPICS = ["the deploy", "lunch", "the flaky test", "the release notes", "the on-call rota", "the new laptop"]


async def _until(condition: Any, within_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not condition():
        assert loop.time() < deadline, "condition not met"
        await asyncio.sleep(0.02)


async def test_lines_are_stored_in_batches_and_survive_a_restart(gateway_factory: GatewayFactory,
                                                                 fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    gateway.router.observer.flush_seconds = 0.2
    for i in range(40):
        adapter.post(f"line {i} about {TOPICS[i % len(TOPICS)]}", user_name=NAMES[i % 5], **GROUP)
    observer = gateway.router.observer
    await _until(lambda: observer.batches_written >= 1 and not observer._pending and not adapter._tasks)
    record = await gateway.rt.store.sessions.get_active("discord", "group:g1")
    assert record is not None and record.message_count == 40
    assert gateway.router.observer.batches_written <= 3  # one transaction per batch, not per line
    adapter.post("late line, written at shutdown", user_name="Bob", **GROUP)
    await asyncio.sleep(0)  # taken, its batch not written yet
    await gateway.aclose()

    fake_llm.reply("you talked about lunch")
    _, again = await gateway_factory()
    await again.say("what did we talk about?", user_name="Ann", mentions_bot=True, **GROUP)
    assert again.texts() == ["you talked about lunch"]
    sent = [str(m["content"]) for m in fake_llm.requests[-1].messages[1:]]
    assert sent[0] == "[Ann] line 0 about the deploy"
    assert sent[-2:] == ["[Bob] late line, written at shutdown", "[Ann] what did we talk about?"]
    assert len(sent) == 42


async def test_addressed_mode_stores_nothing_between_mentions(gateway_factory: GatewayFactory) -> None:
    gateway, adapter = await gateway_factory(gateway={"group_history": "addressed"})
    await adapter.say("chatter", user_name="Bob", **GROUP)
    assert await gateway.rt.store.sessions.get_active("discord", "group:g1") is None


async def test_a_night_of_chatter_is_compacted_before_the_next_mention(gateway_factory: GatewayFactory,
                                                                       fake_llm: FakeLLMServer) -> None:
    window = 32_000
    fake_llm.context_window = window
    kinds: list[str] = []

    def respond(body: dict[str, Any]) -> str:
        if is_summary_request(body):
            kinds.append("summary")
            return f"## Participants\n{SUMMARY_MARKER} Ann, Bob, Cy, Dee, Eve\n## Decisions\nship v2 on Friday — Dee"
        kinds.append("chat")
        return "Dee decided to ship v2 on Friday."

    fake_llm.responder = respond
    gateway, adapter = await gateway_factory(llm={"context_length": window})
    observer = gateway.router.observer
    observer.flush_seconds = 0.3
    for i in range(6000):
        text = "we decide: ship v2 on Friday, final" if i == 1234 else f"msg {i}: {TOPICS[i % len(TOPICS)]} again"
        adapter.post(text, user_name=NAMES[i % 5], **GROUP)
        if i % 1500 == 1499:  # the night goes on: what was said so far is written while people keep talking
            written = (i + 1) // 1500
            await _until(lambda written=written: observer.batches_written == written, within_s=30)
    assert fake_llm.requests == [] and adapter.sent == []
    assert observer.batches_written == 4  # four transactions for 6,000 lines

    await adapter.say("what did we decide yesterday?", user_name="Ann", mentions_bot=True, **GROUP)
    assert adapter.texts() == ["🗜️ Compacting context…", "Dee decided to ship v2 on Friday."]
    # The hygiene compaction ran before the agent's call; the night is larger than the window, so it was
    # summarized in parts, each request within the window (none of it dropped).
    assert kinds[-1] == "chat" and 1 < kinds.count("summary") == len(kinds) - 1 <= MAX_PARTS
    summary_request = str(fake_llm.requests[0].json)
    assert all(f"## {title}" in summary_request for title, _ in GROUP_SECTIONS)
    assert all(r.prompt_tokens + r.json["max_tokens"] <= window for r in fake_llm.requests)
    record = await gateway.rt.store.sessions.get_active("discord", "group:g1")
    assert record is not None and record.compactions == 1
    rows = await gateway.rt.store.messages.export(record.id, include_archived=True)
    observed = [r for r in rows if r.role == "user" and not str(r.message["content"]).startswith("[Ann] what")]
    assert len({str(r.message["content"]) for r in observed if "msg " in str(r.message["content"])
                or "ship v2" in str(r.message["content"])}) == 6000
    # The decision line itself was compacted out of view, and is found word for word (what search_history does).
    hits = await gateway.rt.store.search("ship v2 Friday final", session_id=record.id)
    [hit] = [h for h in hits if h.match == "all words"]  # then messages with some of the words
    assert hits[0] == hit and hit.archived and "ship v2 on Friday, final" in hit.snippet


async def test_a_failed_write_keeps_the_batch_and_retries_it(gateway_factory: GatewayFactory,
                                                             caplog: Any) -> None:
    gateway, adapter = await gateway_factory()
    observer = gateway.router.observer
    observer.flush_seconds = 0.1
    store = gateway.rt.store.messages
    real_append, failures = store.append_lines, [1]

    async def flaky_append(*args: Any, **kwargs: Any) -> tuple[int, set[str]]:
        if failures:
            failures.pop()
            raise OSError("disk unavailable")
        return await real_append(*args, **kwargs)

    store.append_lines = flaky_append  # type: ignore[method-assign]
    for i in range(5):
        adapter.post(f"line {i}", user_name="Bob", **GROUP)
    await _until(lambda: observer.batches_written == 1, within_s=5)
    record = await gateway.rt.store.sessions.get_active("discord", "group:g1")
    assert record is not None and record.message_count == 5
    rows = await gateway.rt.store.messages.export(record.id)
    assert [r.message["content"] for r in rows] == [f"[Bob] line {i}" for i in range(5)]
    assert "could not store 5 observed lines (OSError)" in caplog.text
