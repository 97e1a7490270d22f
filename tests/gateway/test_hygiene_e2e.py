"""Session hygiene before the agent (R-G3), end to end: 85% of the window and the 5,001st message."""

from __future__ import annotations

from gateway.conversation.hygiene import REASON_MESSAGES, REASON_TOKENS
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, answer_by_kind, bulk_session, chatter


async def test_hygiene_compresses_at_85_percent_of_the_window_before_the_agent(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=170_000)
    kinds = answer_by_kind(fake_llm, "fresh answer")
    await adapter.say("and now?")
    assert kinds == ["summary", "chat"]  # compressed first, then the agent ran on the smaller session
    assert adapter.texts()[-1] == "fresh answer"
    assert adapter.texts()[0] == "🗜️ Compacting context…"
    assert all(SUMMARY_MARKER not in t for t in adapter.texts())
    history = await gateway.rt.store.compactions.history(session_id)
    assert [h.reason for h in history] == [REASON_TOKENS]
    record = await gateway.rt.store.sessions.get(session_id)
    assert record.engine.last_compaction.reason == REASON_TOKENS
    assert record.message_count < 402
    chat_request = fake_llm.requests[-1].messages
    assert any(SUMMARY_MARKER in str(m["content"]) for m in chat_request)  # the model sees the summary


async def test_hygiene_leaves_a_session_under_85_percent_alone(gateway_factory: GatewayFactory,
                                                               fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=169_999)
    kinds = answer_by_kind(fake_llm)
    await adapter.say("and now?")
    assert kinds == ["chat"]
    assert await gateway.rt.store.compactions.history(session_id) == []


async def test_hygiene_compresses_the_5001st_message_session_regardless_of_tokens(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(5_001, words=4), last_prompt_tokens=1_000)
    kinds = answer_by_kind(fake_llm)
    await adapter.say("still there?")
    assert kinds[0] == "summary" and kinds[-1] == "chat"
    history = await gateway.rt.store.compactions.history(session_id)
    assert [h.reason for h in history] == [REASON_MESSAGES]
    assert history[0].messages_before == 5_001
    record = await gateway.rt.store.sessions.get(session_id)
    assert record.message_count < 5_000  # back under the hard limit (the tail is bounded by tokens)
    exported = await gateway.rt.store.messages.export(session_id, include_archived=True)
    assert sum(1 for m in exported if not m.active) == 5_001  # nothing lost


async def test_hygiene_at_5000_messages_does_nothing(gateway_factory: GatewayFactory,
                                                     fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(4_999, words=2))
    kinds = answer_by_kind(fake_llm)
    await adapter.say("x")  # the 5,000th message: at the limit, not over it
    assert kinds == ["chat"]
    assert await gateway.rt.store.compactions.history(session_id) == []


async def test_hygiene_skips_cleanly_when_the_compression_lock_is_held(gateway_factory: GatewayFactory,
                                                                       fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=180_000)
    kinds = answer_by_kind(fake_llm)
    async with gateway.rt.locks.try_compression_lock(session_id) as held:
        assert held
        await adapter.say("go")
    assert kinds == ["chat"]  # answered without compressing; the holder finishes its own work
    assert await gateway.rt.store.compactions.history(session_id) == []


async def test_after_a_restart_an_escalated_engine_compresses_harder_never_not_at_all(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    from gateway.store import EngineState

    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60))
    # Two compressions that did not help were stored before the restart: that is a level, not "off".
    await gateway.rt.store.sessions.save_engine_state(
        session_id, EngineState(last_prompt_tokens=180_000, ineffective_count=2))
    kinds = answer_by_kind(fake_llm)
    await adapter.say("go")
    assert kinds == ["summary", "chat"]
    [compaction] = await gateway.rt.store.compactions.history(session_id)
    assert compaction.reason == REASON_TOKENS
    record = await gateway.rt.store.sessions.require(session_id)
    assert record.engine.ineffective_count == 0  # it helped: back to the configured tail
    # Level 2: the tail is the last user message on (the protected head, 3 messages, stays).
    active = (await gateway.rt.store.messages.load_active(session_id)).messages
    assert SUMMARY_MARKER in str(active[3]) and len(active) <= 3 + 1 + 2 + 2  # head, summary, tail, the turn


async def test_hygiene_during_a_summary_cooldown_compresses_without_announcing_a_summary_call(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    from datetime import UTC, datetime, timedelta

    from gateway.store import EngineState

    gateway, adapter = await gateway_factory()
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60))
    # The summary model failed a minute ago and is cooling down (state survives restarts, R-S1).
    await gateway.rt.store.sessions.save_engine_state(session_id, EngineState(
        last_prompt_tokens=170_000, cooldown_until=datetime.now(UTC) + timedelta(minutes=5)))
    kinds = answer_by_kind(fake_llm, "fresh answer")
    await adapter.say("and now?")
    assert kinds == ["chat"]  # no summary call was made: the static fallback summary was used
    assert "🗜️ Compacting context…" not in adapter.texts()
    assert adapter.texts()[-1] == "fresh answer"
    history = await gateway.rt.store.compactions.history(session_id)
    assert [h.reason for h in history] == [REASON_TOKENS]
