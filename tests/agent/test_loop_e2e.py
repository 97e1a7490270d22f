"""End to end: the real `ContextCompressor` and `OpenAICompatProvider` over HTTP against the fake provider.

The fake counts every request with the project's tokenizer, reports that as usage, enforces an 80K window
(refusing anything over it in OpenAI's words) and writes summaries when the compressor asks. A scripted
300-turn tool-using conversation must run to the end without one request over the window, and every
compaction must have been called for by the rules: at or over the threshold, never below it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.compression.summary import SUMMARIZER_SYSTEM
from agent.loop import AgentLoop
from agent.memory import FileMemoryProvider
from agent.tokens import get_counter
from agent.tools.registry import Tool, ToolRegistry
from agent.turn import StopReason
from tests.agent.loop_support import Sinks, assert_tool_pairs_consistent, filler, make_provider
from tests.fakes.llm_server import Fail, FakeLLMServer, Reply

WINDOW = 80_000
MAX_TOKENS = 2_000
TURNS = 300


def _is_summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and messages[0].get("content") == SUMMARIZER_SYSTEM


def _turn_number(messages: list[dict[str, Any]]) -> int:
    """The number in the newest "turn N: …" user message."""
    for message in reversed(messages):
        text = str(message.get("content"))
        if message["role"] == "user" and text.startswith("turn "):
            return int(text.split()[1].rstrip(":"))
    raise AssertionError("no user turn in the request")


def _responder(body: dict[str, Any]) -> Reply:
    """The scripted model: per user turn, tool calls first (sometimes two, sometimes garbage), then an answer."""
    if _is_summary_request(body):
        return Reply("## Historical Task Snapshot\nReading project files.\n## Goal\nReview the code base.\n"
                     "## Completed Actions\n1. READ files — done [tool: read_file]\n## Critical Context\n"
                     + filler(300, 9))
    messages = body["messages"]
    number = _turn_number(messages)
    if messages[-1]["role"] == "tool":
        return Reply(f"Summary of what I read for turn {number}: " + filler(60, number))
    if number % 50 == 7:
        return Reply(f"Plain answer without tools for turn {number}.")
    if number % 37 == 5:
        return Reply("", tool_calls=[{"id": f"g{number}", "name": "read_file", "arguments": '{"path": '}])
    calls = [{"id": f"r{number}", "name": "read_file", "arguments": {"path": f"src/mod_{number}.py"}}]
    if number % 23 == 3:
        calls.append({"id": f"s{number}", "name": "read_file", "arguments": {"path": f"src/extra_{number}.py"}})
    return Reply("", tool_calls=calls)


async def _read_file(args: dict[str, Any]) -> str:
    seed = sum(map(ord, args["path"]))
    return f"# {args['path']}\n" + filler(8_300 if args["path"] == "big.log" else 350, seed)


READ_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"],
               "additionalProperties": False}


# Provider errors injected into the first main-model request of these turns, and how each turn must end.
INJECTED: dict[int, tuple[str, dict[str, Any]]] = {
    90: ("payload_too_large", {}),
    130: ("rate_limit", {}),
    170: ("context_overflow", {"limit": WINDOW, "prompt": WINDOW + 1}),
    210: ("server_error", {}),
    250: ("long_context_tier", {}),
    260: ("auth", {"key": "sk-live-secret-never-shown-123456"}),
}
RECOVERED = {90, 170, 250}


def _with_injected_errors(responder: Any) -> Any:
    done: set[int] = set()

    def respond(body: dict[str, Any]) -> Reply | Fail:
        if not _is_summary_request(body):
            number = _turn_number(body["messages"])
            if number in INJECTED and number not in done:
                done.add(number)
                kind, params = INJECTED[number]
                return Fail(kind, params)
        return responder(body)

    return respond


def _setup(fake_llm: FakeLLMServer, tmp_path: Path, responder: Any) -> tuple[AgentLoop, ContextCompressor, Sinks]:
    fake_llm.context_window = WINDOW
    fake_llm.responder = responder
    provider = make_provider(fake_llm)
    engine = ContextCompressor(context_length=WINDOW, max_tokens=MAX_TOKENS, summary_provider=provider,
                               main_provider=provider)
    memory = FileMemoryProvider(tmp_path, "bot", "user-1")
    read_file = Tool("read_file", "read a source file", READ_SCHEMA, _read_file, max_result_chars=200_000)
    tools = ToolRegistry([read_file, *memory.tools()])
    sinks = Sinks()
    loop = AgentLoop(provider=provider, engine=engine, system_prompt="You review code.", session_id="s-e2e",
                     tools=tools, memory=memory, max_tokens=MAX_TOKENS, notices=sinks.notice, events=sinks.event)
    return loop, engine, sinks


async def test_300_turn_tool_conversation_stays_inside_the_window(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    loop, engine, sinks = _setup(fake_llm, tmp_path, _with_injected_errors(_responder))
    overhead = get_counter().count_tools(loop.tools.schemas()) + 3
    messages: list[dict[str, Any]] = []
    triggers: list[str] = []
    for turn in range(TURNS):
        result = await loop.run_turn(messages, f"turn {turn}: please review the next module")
        if turn in INJECTED and turn not in RECOVERED:
            assert result.stop_reason is StopReason.ERROR and result.error_text.startswith("⚠️"), turn
            assert "sk-live-secret" not in result.error_text
        else:
            assert result.stop_reason is StopReason.FINAL, (turn, result.error_text)
        for compaction in result.compactions:
            triggers.append(compaction.trigger)
            if compaction.trigger == "recovery":
                assert turn in RECOVERED
            else:  # called for by the rules: the request it replaced was at or over the threshold
                assert compaction.result.tokens_before + overhead >= engine.threshold_tokens, turn
        messages = result.messages
        assert_tool_pairs_consistent(messages)

    threshold = engine.threshold_tokens
    assert threshold == 64_000
    main = [r for r in fake_llm.requests if not _is_summary_request(r.json)]
    summaries = [r for r in fake_llm.requests if _is_summary_request(r.json)]
    # Never a request over the window (the fake would have refused it) — not even over the threshold.
    assert max(r.prompt_tokens for r in main) < threshold
    assert max(r.prompt_tokens for r in summaries) + MAX_TOKENS <= WINDOW
    assert triggers.count("recovery") == len(RECOVERED)
    assert 4 <= triggers.count("preflight") + triggers.count("post_response") <= 10
    assert len(triggers) == engine.compression_count == len(summaries)
    assert [e.kind for e in sinks.events].count("session:compress") == len(triggers)
    assert engine.ineffective_count == 0 and engine.context_length == WINDOW
    many = [n.data["count"] for n in sinks.notices if n.kind == "compressed_many_times"]
    assert many == list(range(2, engine.compression_count + 1))
    assert loop.system_prompt == "You review code."  # no compaction changes it (the cache's stable prefix)
    assert {json.dumps(r.messages[0]) for r in main} == {json.dumps({"role": "system", "content": "You review code."})}
    garbage = [r for r in main if "not valid JSON" in str(r.messages[-1].get("content"))]
    assert len(garbage) >= 5
    json.dumps(messages)  # the session stays plain JSON for the store


INFLATION = 1.5
BIG_READ_AT = 38_000  # real prompt tokens at which the scripted model opens the big log


async def test_provider_counting_more_than_us_is_judged_in_its_own_units(fake_llm: FakeLLMServer,
                                                                         tmp_path: Path) -> None:
    """A provider whose tokenizer counts 50% more than ours: its real usage drives compression.

    The preflight anchors on the last real figure and counts what came after with our tokenizer, scaled by
    what the provider counted for the growth between earlier requests (here 1.5): when the model reads a
    ~20K-token log at ~38K real tokens, the preflight sees the ~68K the provider will measure and compresses
    before the request is sent. Where it cannot know yet, the post-response check compresses on the real
    figure. Either way no request comes near the window.
    """
    opened: list[int] = []

    def scripted(body: dict[str, Any]) -> Reply:
        if _is_summary_request(body):
            return _responder(body)
        messages = body["messages"]
        real = int(fake_llm.count_prompt("openai", body) * INFLATION)
        number = _turn_number(messages)
        last = messages[-1]
        if last["role"] == "user" and real >= BIG_READ_AT and not opened:
            opened.append(number)
            reply = Reply("", [{"id": "big", "name": "read_file", "arguments": {"path": "big.log"}}])
        elif last["role"] == "tool" and last.get("tool_call_id") == "big":
            reply = Reply("", [{"id": "after", "name": "read_file", "arguments": {"path": "notes.md"}}])
        else:
            reply = _responder(body)
        return Reply(reply.text, reply.tool_calls, {"prompt_tokens": real})

    loop, engine, sinks = _setup(fake_llm, tmp_path, scripted)
    messages: list[dict[str, Any]] = []
    for turn in range(120):
        result = await loop.run_turn(messages, f"turn {turn}: please review the next module")
        assert result.stop_reason is StopReason.FINAL
        messages = result.messages
    assert opened
    last_real = 0
    triggers = []
    for event in sinks.events:
        if event.kind == "llm:response":
            last_real = event.data["usage"].prompt_tokens
        elif event.kind == "session:compress":
            trigger = event.data["compaction"].trigger
            triggers.append(trigger)
            if trigger == "post_response":
                assert last_real >= engine.threshold_tokens  # the real prompt figure, never completion
    assert triggers and set(triggers) <= {"preflight", "post_response"}
    reported = [e.data["usage"].prompt_tokens for e in sinks.events if e.kind == "llm:response"]
    assert max(reported) + MAX_TOKENS <= WINDOW
