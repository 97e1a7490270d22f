"""A cache-stable prompt (R-K1/R-K2/R-C5): the system prompt is byte-identical before and after every
compaction, and a request is laid out stable prefix first (system prompt with its pins, tool schemas), then the
summary, then the verbatim tail — through the real gateway, every request read back from the fake LLM server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from agent.compression.summary import SUMMARIZER_SYSTEM, SUMMARY_PREFIX
from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import FakeLLMServer, RecordedRequest
from tests.gateway.conftest import GatewayFactory, answer_by_kind

FACT = "my build server is atlas-7"
TOPICS = "kernel cache build deploy schema index query shard ledger window budget replica".split()


def line(n: int) -> str:
    """A long, distinct chat line (about 170 tokens), so that an 8K window compacts every few turns."""
    return f"turn {n}: " + " ".join(f"{TOPICS[(n + i) % len(TOPICS)]}-{n}-{i}" for i in range(60))


def chats(server: FakeLLMServer) -> list[RecordedRequest]:
    """The chat requests (not the summary calls) the server received, in order."""
    return [r for r in server.requests if SUMMARIZER_SYSTEM not in json.dumps(r.json)]


def summary_index(messages: list[dict[str, Any]]) -> int | None:
    """Where the handoff summary sits in a request's messages (None before the first compaction)."""
    found = [i for i, m in enumerate(messages) if str(m.get("content") or "").startswith(SUMMARY_PREFIX)]
    assert len(found) <= 1, "one summary at most"
    return found[0] if found else None


async def test_the_system_prompt_is_byte_identical_across_every_compaction(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    _gateway, adapter = await gateway_factory(llm={"context_length": 8_000})
    kinds = answer_by_kind(fake_llm, "noted, carry on")
    await adapter.say(f"remember that {FACT}")
    await adapter.say("/pin always answer in English")
    for n in range(40):
        await adapter.say(line(n))
    assert kinds.count("summary") >= 3, kinds
    # The rescue before the first compaction wrote the fact to memory (R-S6) ...
    [user_file] = list((tmp_path / "memory" / "users").glob("*/USER.md"))
    assert FACT in user_file.read_text("utf-8")
    requests = chats(fake_llm)
    prompts = {json.dumps(r.messages[0]) for r in requests[1:]}  # the first was sent before the pin
    # ... and yet one system prompt (pins included) carried every request: no note, no fresh memory snapshot.
    assert len(prompts) == 1, prompts
    system = requests[-1].messages[0]["content"]
    assert "always answer in English" in system and FACT not in system and "compacted" not in system.lower()
    assert len({json.dumps(r.json["tools"]) for r in requests}) == 1  # the tool schemas never change either
    compacted = [r for r in requests if summary_index(r.messages) is not None]
    assert len(compacted) >= 3
    for request in compacted:
        messages = request.messages
        at = summary_index(messages)
        assert at is not None and messages[0]["role"] == "system"
        # Stable prefix first — the system prompt, then at most the protected head the first compaction kept —
        # then the summary, then the tail.
        assert all(m["role"] in ("user", "assistant") for m in messages[1:at]) and at <= 4
        assert messages[-1]["role"] == "user" and not str(messages[-1]["content"]).startswith(SUMMARY_PREFIX)
        summary = str(messages[at]["content"])
        assert "search_history" in summary and "read_history" in summary  # how to look compacted turns up
    # The memory is not lost: a new session reads it into its (new) snapshot.
    await adapter.say("/new")
    await adapter.say("hello again")
    assert FACT in chats(fake_llm)[-1].messages[0]["content"]


async def test_another_workers_compaction_keeps_this_workers_prompt(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    first, a = await gateway_factory(llm={"context_length": 8_000})
    second, b = await gateway_factory(llm={"context_length": 8_000})
    answer_by_kind(fake_llm, "noted")
    for n in range(6):
        await a.say(line(n))
    prompt = chats(fake_llm)[-1].messages[0]
    # Worker b compacts the session; its memory rescue writes a fact on the way.
    await b.say(f"remember that {FACT}")
    await b.say("/compress", user_id="boss")
    assert b.texts()[-1].startswith("Compressed:"), b.texts()[-1]
    key = SessionKey("discord", "dm:c1")
    record = await first.rt.store.sessions.get_active("discord", "dm:c1")
    assert record is not None and record.compactions == 1
    await a.say("and now?")
    after = chats(fake_llm)[-1].messages
    assert summary_index(after) is not None  # worker a took the compacted set ...
    assert after[0] == prompt  # ... under the prompt it had: one compaction is no reason to read memory again
    assert first.sessions.cached(key) is not None and second.sessions.cached(key) is not None


def marked(blocks: Any) -> list[bool]:
    """Which of a request's blocks (system, or one message's content) carry a cache breakpoint."""
    return ["cache_control" in b for b in blocks] if isinstance(blocks, list) else [False]


async def test_cache_breakpoints_end_the_stable_prefix_and_move_with_the_tail(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer) -> None:
    claude = {"provider": "anthropic", "base_url": fake_llm.base_url, "api_key": "sk-ant-test-key-1",
                    "model": "claude-sonnet-4-5", "context_length": 8_000}
    _gateway, adapter = await gateway_factory(llm=claude)

    def respond(body: dict[str, Any]) -> str:
        return "## Goal\nthe user chatted." if SUMMARIZER_SYSTEM in json.dumps(body.get("system")) else "noted"

    fake_llm.responder = respond
    for n in range(40):
        await adapter.say(line(n))
    requests = [r.json for r in fake_llm.requests if SUMMARIZER_SYSTEM not in json.dumps(r.json.get("system"))]
    firsts = []  # the first request after each compaction
    for previous, request in itertools.pairwise(requests):
        messages = request["messages"]
        points = [m for m in messages for _ in range(sum(marked(m["content"])))]
        assert sum(marked(request["system"])) == 1 and marked(request["system"])[-1]  # the stable prefix's end
        assert 1 + len(points) <= 4 and marked(messages[-1]["content"])[-1]  # ... and the tail's
        assert not any("cache_control" in t for t in request["tools"])  # tools come first: the system mark covers them
        summary = [m for m in messages if SUMMARY_PREFIX in json.dumps(m["content"], ensure_ascii=False)]
        if summary and summary != [m for m in previous["messages"]
                                   if SUMMARY_PREFIX in json.dumps(m["content"], ensure_ascii=False)]:
            firsts.append(request)
            # The stable prefix is the one the request before the compaction sent, byte for byte.
            assert (request["tools"], request["system"]) == (previous["tools"], previous["system"])
    assert len(firsts) >= 2
