"""A streamed turn through the router: tool rounds show a status line, the final text goes to the live reply."""

from __future__ import annotations

from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory


class Recorder:
    def __init__(self) -> None:
        self.shown: list[str] = []

    async def text(self, text: str) -> None:
        self.shown.append(text)

    async def status(self, text: str) -> None:
        self.shown.append(f"STATUS:{text}")

    async def finish(self, text: str) -> None:
        self.shown.append(f"FINAL:{text}")


async def test_tool_rounds_show_a_status_and_the_answer_streams(gateway_factory: GatewayFactory,
                                                                fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("Let me look.", tool_calls=[{"name": "search_history", "arguments": {"query": "deploy"}}])
    fake_llm.reply("We deployed on Tuesday.", text_pieces=3)
    _, adapter = await gateway_factory()
    live = Recorder()
    adapter.live_reply = lambda target: live  # type: ignore[method-assign]
    await adapter.say("when did we deploy?")
    assert live.shown[-1] == "FINAL:We deployed on Tuesday."
    assert "STATUS:🔎 searching history…" in live.shown
    status_at = live.shown.index("STATUS:🔎 searching history…")
    assert live.shown[status_at + 1:-1] == ["We deplo", "We deployed on T", "We deployed on Tuesday."]
    assert adapter.texts() == []  # everything went through the live reply
    assert all(r.json.get("stream") for r in fake_llm.requests)
