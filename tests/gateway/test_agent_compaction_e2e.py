"""Compactions the agent makes mid-turn are persisted (R-S2/R-S3/R-S4); the summary never reaches chat."""

from __future__ import annotations

from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, answer_by_kind, bulk_session, chatter

# 100K window: the agent triggers at 64K (50% with the 64K floor), hygiene only at 85K.
WINDOW = {"context_length": 100_000}


async def test_agent_preflight_compaction_is_persisted_in_place(gateway_factory: GatewayFactory,
                                                                fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW)
    session_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    kinds = answer_by_kind(fake_llm, "after compaction")
    await adapter.say("what next?")
    assert kinds == ["summary", "chat"]
    assert adapter.texts() == ["🗜️ Compacting context…", "after compaction"]
    assert all(SUMMARY_MARKER not in t for t in adapter.texts())
    history = await gateway.rt.store.compactions.history(session_id)
    assert [h.reason for h in history] == ["agent: preflight"]
    active = (await gateway.rt.store.messages.load_active(session_id)).messages
    assert any(SUMMARY_MARKER in str(m.get("content")) for m in active)
    assert (active[-2]["role"], active[-2]["content"]) == ("user", "what next?")
    assert active[-1]["content"] == "after compaction"
    record = await gateway.rt.store.sessions.get(session_id)
    assert record.engine.compression_count == 1 and record.engine.last_compaction.reason == "agent: preflight"
    # The next turn runs on the compacted session, under the system prompt the compacted turn had.
    before = fake_llm.requests[1].messages[0]  # the answer after the summary
    await adapter.say("and then?")
    sent = fake_llm.requests[-1].messages
    assert sent[0] == before and "compacted" not in before["content"].lower()
    assert len(sent) < 150  # not the 330 stored before


async def test_rotation_mode_moves_the_chat_to_a_child_session(gateway_factory: GatewayFactory,
                                                               fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm=WINDOW, compression={"in_place": False})
    parent_id = await bulk_session(gateway, "dm:c1", chatter(330, words=200))
    answer_by_kind(fake_llm, "rotated answer")
    await adapter.say("what next?")
    assert adapter.texts()[-1] == "rotated answer"
    parent = await gateway.rt.store.sessions.get(parent_id)
    assert parent.end_reason == "compression"
    child = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert child.parent_session_id == parent_id
    active = (await gateway.rt.store.messages.load_active(child.id)).messages
    assert active[-2]["content"] == "what next?" and active[-1]["content"] == "rotated answer"
    parent_rows = (await gateway.rt.store.messages.load_active(parent_id)).messages
    # The parent keeps its history and the question that triggered the rotation (stored before compacting).
    assert len(parent_rows) == 331 and parent_rows[-1]["content"] == "what next?"
    await adapter.say("/status")
    assert f"Session {child.id}" in adapter.texts()[-1] and "Compressions: 1" in adapter.texts()[-1]
