"""R-S4 after a gateway compaction (/compress, hygiene, sweep), in place and by rotation: fresh system prompt,
engine and memory told, last_prompt_tokens = −1 in the engine and the store."""

from __future__ import annotations

import dataclasses

import pytest

from agent.memory import MemoryProvider
from gateway.keys import SessionKey
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory, answer_by_kind, bulk_session, chatter


class RecordingMemory(MemoryProvider):
    """Remembers every hook call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    async def start_session(self, session_id: str) -> None:
        self.calls.append(("start", session_id))

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
    answer_by_kind(fake_llm)
    await adapter.say("/compress", admin_hint=True)
    assert adapter.texts()[-1].startswith("Compressed: 60 → ")  # the conversation, as /status counts it

    record = await gateway.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None and (record.id == old_id) is in_place
    live = gateway.sessions._live[SessionKey("discord", "dm:c1")]
    assert live.id == record.id
    assert "compacted" in live.system_prompt.lower()  # rebuilt with the one-time compaction note
    assert live.engine.last_prompt_tokens == -1 and record.engine.last_prompt_tokens == -1
    assert ("pre_compress",) in memory.calls
    assert memory.calls[-2:] == [("start", record.id), ("switch", old_id, record.id)]
