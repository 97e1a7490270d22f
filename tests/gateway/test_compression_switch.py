"""`compression.enabled: false` and `llm.max_iterations` as an operator sets them."""

from __future__ import annotations

import pytest

from gateway.conversation.compaction import SKIP_DISABLED
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


async def test_disabled_compression_skips_hygiene_but_compress_still_works(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(compression={"enabled": False})
    session_id = await bulk_session(gateway, "dm:c1", chatter(400, words=60), last_prompt_tokens=170_000)
    kinds = answer_by_kind(fake_llm, "fresh answer")
    await adapter.say("and now?")
    assert kinds == ["chat"]  # over 85%, yet no summary call: hygiene is off
    assert await gateway.rt.store.compactions.history(session_id) == []
    await adapter.say("/compress", user_id="boss")
    assert kinds == ["chat", "summary"]
    assert adapter.texts()[-1].startswith("Compressed:")
    assert SKIP_DISABLED.startswith("compression disabled")


@pytest.mark.parametrize(("enabled", "expected"), [(True, ["summary", "chat"]), (False, ["chat"])])
async def test_the_agent_compresses_on_its_own_only_when_enabled(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, enabled: bool, expected: list[str]) -> None:
    # ~114K tokens in a 200K window: over the agent's 100K trigger, under hygiene's 170K.
    gateway, adapter = await gateway_factory(compression={"enabled": enabled})
    session_id = await bulk_session(gateway, "dm:c1", chatter(1700, words=60))
    kinds = answer_by_kind(fake_llm, "fresh answer")
    await adapter.say("and now?")
    assert kinds == expected
    assert adapter.texts()[-1] == "fresh answer"
    assert len(await gateway.rt.store.compactions.history(session_id)) == (1 if enabled else 0)


async def test_max_iterations_bounds_a_turn(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    _, adapter = await gateway_factory(llm={"max_iterations": 2})
    for _ in range(3):
        fake_llm.reply(tool_calls=[{"name": "search_history", "arguments": '{"query": "nothing"}'}])
    await adapter.say("loop forever")
    assert len(fake_llm.requests) == 2
    assert "stopped after 2 steps" in adapter.texts()[-1]
