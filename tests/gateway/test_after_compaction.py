"""R-S4 after a gateway compaction (/compress, hygiene, sweep), in place and by rotation: the system prompt rebuilt
and byte-identical (memory's snapshot kept), engine and memory told, last_prompt_tokens = −1 in the engine and
the store."""

from __future__ import annotations

import dataclasses

import pytest

from agent.memory import MemoryProvider
from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


class RecordingMemory(MemoryProvider):
    """Remembers every hook call; each snapshot it takes reads differently (as a memory written meanwhile would)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    async def start_session(self, session_id: str) -> None:
        self.calls.append(("start", session_id))

    def system_prompt_block(self) -> str:
        return f"## Memory snapshot {len([c for c in self.calls if c[0] == 'start'])}"

    async def on_pre_compress(self, messages: object) -> None:
        self.calls.append(("pre_compress",))

    async def on_session_switch(self, old_session_id: str, new_session_id: str) -> None:
        self.calls.append(("switch", old_session_id, new_session_id))


@pytest.mark.parametrize("in_place", [True, False])
async def test_compress_command_ends_like_every_compaction(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer,
                                                           in_place: bool) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000}, compression={"in_place": in_place})
    memory = RecordingMemory()
    gateway.sessions.rt = dataclasses.replace(gateway.rt, new_memory=lambda key, user: memory)
    old_id = await bulk_session(gateway, "dm:c1", chatter(60, words=80), last_prompt_tokens=5_000)
    prompt_before = (await gateway.sessions.open(SessionKey("discord", "dm:c1"), "u1")).system_prompt
    assert "## Memory snapshot 1" in prompt_before
    answer_by_kind(fake_llm)
    await adapter.say("/compress", admin_hint=True)
    assert adapter.texts()[-1].startswith("Compressed: 60 → ")  # the conversation, as /status counts it

    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None and (record.id == old_id) is in_place
    live = gateway.sessions._live[SessionKey("discord", "dm:c1")]
    assert live.id == record.id
    assert live.system_prompt == prompt_before  # no note, no fresh memory snapshot: the cache's stable prefix
    assert live.engine.last_prompt_tokens == -1 and record.engine.last_prompt_tokens == -1
    assert ("pre_compress",) in memory.calls
    assert [c for c in memory.calls if c[0] == "start"] == [("start", old_id)]  # taken once, at session start
    assert memory.calls[-1] == ("switch", old_id, record.id)
