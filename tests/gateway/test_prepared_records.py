"""What the engine prepares for each stored message once the answer is sent goes into the store with the
session's next write (no write of its own), and a compaction after a restart adopts it from there instead of
finding every fact and tokenizing every block again."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from agent.compression import compressor, prune, registry
from agent.compression.compressor import ContextCompressor
from agent.compression.prepared import forget_prepared
from agent.compression.prune import ARGUMENTS_MAX_CHARS
from agent.tokens import TokenCounter, get_counter
from gateway.conversation.session_commands import MANUAL_REASON
from gateway.store._rows import payload_of
from gateway.store.records import PreparedRecord
from tests.compression.helpers import call, coding_session, result
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter

# Small enough that /compress has a middle to summarize, the history short of any compaction of its own.
WINDOW = {"context_length": 8_192}
# Long enough to be worth a record each (`RECORD_MIN_CHARS`), as the answer below is.
DETAIL = " Keep the logs, the exit status and the paths of every file it touched, in order, for the report."
TURNS = ("deploy /srv/app/main.py with `make release`." + DETAIL * 2,
         "what did make release print? exit 2 again." + DETAIL * 2,
         "thanks, that is all for today." + DETAIL * 2)
ANSWER = "make release failed: see /srv/app/build.log (exit status 2)." + DETAIL * 2


async def test_a_compaction_after_a_restart_adopts_what_was_prepared_before_it(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    answer_by_kind(fake_llm, ANSWER)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await bulk_session(gateway, "dm:c1", chatter(30, words=30))
    for line in TURNS:
        await adapter.say(line)
    store = gateway.rt.store
    active = await store.messages.load_active(session_id)
    kept = [record is not None for record in await store.messages.prepared_of_active(session_id, active.watermark)]
    # Rows stored around the gateway were never handed to an engine; each turn's records went with the next
    # turn's write, and the last turn's wait for the next one.
    assert kept == [False] * 30 + [True] * 4 + [False] * 2
    await gateway.aclose(grace_seconds=5)

    # A restarted process: nothing prepared or counted in memory.
    forget_prepared()
    get_counter()._cache.clear()
    adopted: list[int] = []
    adopt = compressor.adopt_records

    def counted(*args: Any) -> int:
        adopted.append(adopt(*args))
        return adopted[-1]

    monkeypatch.setattr(compressor, "adopt_records", counted)
    restarted, adapter = await gateway_factory(llm=WINDOW)
    await adapter.say("/compress", user_id="boss")
    # Handed to each step that plans the compaction: /compress's check, the announcement's, the compaction.
    assert adopted == [4, 4, 4]
    assert [c.reason for c in await restarted.rt.store.compactions.history(session_id)] == [MANUAL_REASON]


class HookReturnsNothing(ContextCompressor):
    """A third-party engine written before the hook returned records: it prepares, and returns nothing."""

    def on_messages_stored(self, messages: Sequence[Mapping[str, Any]]) -> None:  # type: ignore[override]
        super().on_messages_stored(messages)


async def test_an_engine_whose_hook_returns_nothing_keeps_nothing_and_answers_as_before(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._registry, "returns-nothing", HookReturnsNothing)
    answer_by_kind(fake_llm, "noted")
    gateway, adapter = await gateway_factory(llm=WINDOW, context={"engine": "returns-nothing"})
    for line in TURNS:
        await adapter.say(line)
    assert adapter.texts() == ["noted"] * len(TURNS)
    store = gateway.rt.store
    record = await store.sessions.get_or_create_active("discord", "dm:c1")
    active = await store.messages.load_active(record.id)
    assert len(active.messages) == 2 * len(TURNS)
    assert await store.messages.prepared_of_active(record.id, active.watermark) == [None] * len(active.messages)


async def test_a_coding_history_is_pruned_from_its_records_after_a_restart(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # What pruning makes of old tool results and large writes travels in the store's records too: after a restart,
    # /compress neither describes an old output nor parses a large write's arguments again.
    answer_by_kind(fake_llm, ANSWER)
    gateway, _ = await gateway_factory(llm=WINDOW)
    # (Outputs short enough that this window clips none: a clipped output is another text, described anew.)
    history = coding_session(16, output_lines=8)[1:]
    history[1:1] = [call("w0", "write_file", {"path": "src/big.py", "content": "y = 2\n" * 2_000}),
                    result("w0", "written")]
    session_id, kept = await _stored_with_records(gateway, history)
    store = gateway.rt.store
    watermark = (await store.messages.load_active(session_id)).watermark
    assert sum(r is not None for r in await store.messages.prepared_of_active(session_id, watermark)) == kept > 16
    await gateway.aclose(grace_seconds=5)

    forget_prepared()
    get_counter()._cache.clear()
    described: list[Any] = []
    parsed: list[str] = []
    describe, shrink = prune.describe_tool_result, prune.shrink_arguments
    monkeypatch.setattr(prune, "describe_tool_result", lambda *args: described.append(args) or describe(*args))
    monkeypatch.setattr(prune, "shrink_arguments", lambda raw: parsed.append(raw) or shrink(raw))
    restarted, adapter = await gateway_factory(llm=WINDOW)
    await adapter.say("/compress", user_id="boss")
    assert [c.reason for c in await restarted.rt.store.compactions.history(session_id)] == [MANUAL_REASON]
    assert described == []
    assert parsed and all(len(raw) <= ARGUMENTS_MAX_CHARS for raw in parsed)


async def test_compress_after_a_restart_tokenizes_no_stored_message_again(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # The store keeps every message's count: /compress's check, like the compaction, takes them from there rather
    # than tokenizing the whole session again after a restart.
    answer_by_kind(fake_llm, ANSWER)
    gateway, adapter = await gateway_factory(llm=WINDOW)
    history = chatter(30, words=30)
    session_id = await bulk_session(gateway, "dm:c1", history)
    for line in TURNS:
        await adapter.say(line)
    stored = {str(m.get("content")) for m in (await gateway.rt.store.messages.load_active(session_id)).messages}
    await gateway.aclose(grace_seconds=5)

    forget_prepared()
    get_counter()._cache.clear()
    tokenized: list[str] = []
    uncached = TokenCounter._uncached_message
    monkeypatch.setattr(TokenCounter, "_uncached_message",
                        lambda self, message: tokenized.append(str(message.get("content"))) or uncached(self, message))
    restarted, adapter = await gateway_factory(llm=WINDOW)
    await adapter.say("/compress", user_id="boss")
    assert [c.reason for c in await restarted.rt.store.compactions.history(session_id)] == [MANUAL_REASON]
    assert tokenized and not stored & set(tokenized)  # (the system prompt and the summary are new texts)


async def _stored_with_records(gateway: Any, history: list[dict[str, Any]]) -> tuple[str, int]:
    """A session of ``history`` stored with the records the engine makes for it; its id and how many it has."""
    session_id = await bulk_session(gateway, "dm:c1", history)
    store = gateway.rt.store
    records = ContextCompressor(context_length=WINDOW["context_length"], summary_provider=None) \
        .on_messages_stored(history)
    watermark = (await store.messages.load_active(session_id)).watermark
    first = watermark - len(history) + 1
    await store.messages.append(session_id, [], [], prepared=[
        PreparedRecord(first + i, payload_of(message), record)
        for i, (message, record) in enumerate(zip(history, records, strict=True)) if record is not None])
    return session_id, sum(record is not None for record in records)


async def test_a_compaction_inside_a_turn_after_a_restart_adopts_the_stored_records(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    answer_by_kind(fake_llm, ANSWER)
    gateway, _ = await gateway_factory(llm=WINDOW)
    # Over the agent's threshold (half the window) and under hygiene's: the turn itself compacts.
    session_id, kept = await _stored_with_records(gateway, chatter(110, words=40))
    assert kept == 110
    await gateway.aclose(grace_seconds=5)

    forget_prepared()
    get_counter()._cache.clear()
    adopted: list[int] = []
    adopt = compressor.adopt_records
    monkeypatch.setattr(compressor, "adopt_records", lambda *args: adopted.append(adopt(*args)) or adopted[-1])
    restarted, adapter = await gateway_factory(llm=WINDOW)
    await adapter.say("and where do we stand now?")
    assert adapter.texts()[-1] == ANSWER
    assert [c.reason for c in await restarted.rt.store.compactions.history(session_id)][:1] == ["agent: preflight"]
    # The announcement's check and the compaction, each handed every stored message's record.
    assert adopted == [kept, kept]


async def test_a_turn_whose_records_cannot_be_read_compacts_without_them(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    answer_by_kind(fake_llm, ANSWER)
    gateway, _ = await gateway_factory(llm=WINDOW)
    session_id, _ = await _stored_with_records(gateway, chatter(110, words=40))
    await gateway.aclose(grace_seconds=5)

    forget_prepared()
    get_counter()._cache.clear()
    restarted, adapter = await gateway_factory(llm=WINDOW)

    async def down(*args: Any) -> list[str | None]:
        raise ConnectionRefusedError("the store is down")

    monkeypatch.setattr(restarted.rt.store.messages, "prepared_of_active", down)
    with caplog.at_level(logging.WARNING):
        await adapter.say("and where do we stand now?")
    # Records only spare work: the turn is answered and its compaction stored, the facts found anew.
    assert adapter.texts()[-1] == ANSWER
    assert [c.reason for c in await restarted.rt.store.compactions.history(session_id)][:1] == ["agent: preflight"]
    assert f"the prepared records of session {session_id} could not be read (ConnectionRefusedError)" in caplog.text
