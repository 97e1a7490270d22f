"""After a compaction, a model asked for an exact earlier value gets it through the tools — over HTTP, against
the fake provider playing an agent that knows only the topic: search_history finds the message, whose
snippet does not hold the value; read_history opens it whole; the answer quotes it."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import SUMMARY_MARKER, GatewayFactory, bulk_session, chatter, is_summary_request

VALUE = "54329"
CONFIG = "\n".join(["# staging replica settings, dumped by the ops script"]
                   + [f"option_{i:03d}: value number {i} for the service" for i in range(60)]
                   + [f"replica_port: {VALUE}"] + [f"trailer_{i}: x" for i in range(20)])


def agent_that_looks_things_up(body: dict[str, Any]) -> Reply:
    """The fake model: summarize when asked to; otherwise search by topic, open the best hit, quote it."""
    if is_summary_request(body):
        return Reply(f"## Goal\n{SUMMARY_MARKER} configuring the staging replica.")
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "user":
        return Reply("", [{"id": "s1", "name": "search_history", "arguments": {"query": "staging replica"}}])
    if last.get("tool_call_id") == "s1":
        number = re.search(r"\[#(\d+) ", last["content"])
        assert number, last["content"]
        return Reply("", [{"id": "r1", "name": "read_history", "arguments": {"number": int(number.group(1))}}])
    if last.get("tool_call_id") == "r1":
        port = re.search(r"replica_port: (\d+)", last["content"])
        return Reply(f"The staging replica port is {port.group(1)}." if port else "I could not find it.")
    return Reply("done")


async def test_an_exact_value_compacted_away_comes_back_through_search_and_read(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    gateway, adapter = await gateway_factory(llm={"context_length": 8_000})
    history = chatter(40, words=80)
    history[4] = {"role": "user", "content": "Here is the config dump:\n" + CONFIG}
    await bulk_session(gateway, "dm:c1", history)
    fake_llm.responder = agent_that_looks_things_up
    await adapter.say("/compress", admin_hint=True)
    assert adapter.texts()[-1].startswith("Compressed: 40 → ")

    await adapter.say("What was the staging replica port in that config dump?")
    assert adapter.texts()[-1] == f"The staging replica port is {VALUE}."
    chat = [r for r in fake_llm.requests if not is_summary_request(r.json)]
    first, after_search, after_read = chat[-3:]
    # Compacted away: the value is nowhere in what the model saw when asked, summary included …
    assert VALUE not in json.dumps(first.messages)
    summary = next(m for m in first.messages if SUMMARY_MARKER in str(m.get("content")))
    assert "with search_history" in summary["content"] and "with read_history" in summary["content"]
    # … the search snippet alone does not carry it; reading the message whole does.
    assert VALUE not in after_search.messages[-1]["content"]
    assert f"replica_port: {VALUE}" in after_read.messages[-1]["content"]
