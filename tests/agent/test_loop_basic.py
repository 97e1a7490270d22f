"""The turn loop over real HTTP: final answers, parallel tools, garbage arguments, bounds, cancellation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agent.events import EVENT_LLM_RESPONSE, EVENT_TOOL_RESULT
from agent.loop import AgentLoop
from agent.memory import FileMemoryProvider
from agent.tokens import get_counter
from agent.tools.registry import Tool, ToolRegistry
from agent.turn import CANCELLED_TOOL_TEXT, LoopConfig, StopReason
from tests.agent.loop_support import (
    KeepTailEngine,
    Sinks,
    assert_tool_pairs_consistent,
    make_provider,
)
from tests.fakes.llm_server import FakeLLMServer, Reply

OBJ = {"type": "object", "properties": {}}


def _loop(server: FakeLLMServer, tools: ToolRegistry | None = None, sinks: Sinks | None = None,
          **kwargs: Any) -> AgentLoop:
    sinks = sinks or Sinks()
    return AgentLoop(provider=make_provider(server), engine=KeepTailEngine(context_length=200_000),
                     system_prompt="You are helpful.", session_id="s1", tools=tools,
                     notices=sinks.notice, events=sinks.event, **kwargs)


async def test_plain_answer(fake_llm: FakeLLMServer) -> None:
    fake_llm.reply("Hello there", usage={"completion_tokens": 3})
    sinks = Sinks()
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "yes"}]
    result = await _loop(fake_llm, sinks=sinks).run_turn(history, "hi")
    assert result.stop_reason is StopReason.FINAL and result.text == "Hello there"
    assert [m["role"] for m in result.appended] == ["user", "assistant"]
    assert result.messages == [*history, *result.appended]
    assert result.usage[0].prompt_tokens == fake_llm.last_request.prompt_tokens
    sent = fake_llm.last_request.messages
    assert sent[0] == {"role": "system", "content": "You are helpful."} and sent[-1]["content"] == "hi"
    assert "tools" not in fake_llm.last_request.json  # no tools registered → none sent
    assert [e.kind for e in sinks.events] == [EVENT_LLM_RESPONSE]
    assert not result.compacted and not result.history_replaced


async def test_tool_calls_run_in_parallel_and_results_keep_call_order(fake_llm: FakeLLMServer) -> None:
    both_started = asyncio.Barrier(2)

    async def waiter(args: dict[str, Any]) -> str:
        await both_started.wait()  # deadlocks (and times out) unless both calls run at once
        return f"done {args['tag']}"

    schema = {"type": "object", "properties": {"tag": {"type": "string"}}, "required": ["tag"]}
    tools = ToolRegistry([Tool("wait", "wait", schema, waiter, timeout_s=5)])
    fake_llm.reply("", tool_calls=[{"id": "a", "name": "wait", "arguments": {"tag": "A"}},
                                   {"id": "b", "name": "wait", "arguments": {"tag": "B"}}])
    fake_llm.reply("both done")
    sinks = Sinks()
    result = await _loop(fake_llm, tools, sinks).run_turn([], "go")
    assert result.text == "both done"
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_msgs] == [("a", "done A"), ("b", "done B")]
    assert fake_llm.requests[0].json["tools"][0]["function"]["name"] == "wait"
    assert [e.data["ok"] for e in sinks.events if e.kind == EVENT_TOOL_RESULT] == [True, True]
    assert_tool_pairs_consistent(result.messages)


async def test_garbage_arguments_reach_the_model_as_an_error(fake_llm: FakeLLMServer) -> None:
    async def add(args: dict[str, Any]) -> str:
        return str(args["a"] + args["b"])

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    tools = ToolRegistry([Tool("add", "add", schema, add)])
    fake_llm.reply("", tool_calls=[{"id": "x", "name": "add", "arguments": '{"a": 1, "b": tw'}])
    fake_llm.reply("", tool_calls=[{"id": "y", "name": "add", "arguments": {"a": 1, "b": 2}}])
    fake_llm.reply("3")
    result = await _loop(fake_llm, tools).run_turn([], "add 1 and 2")
    assert result.stop_reason is StopReason.FINAL and result.text == "3"
    second_request = fake_llm.requests[1].messages
    assert second_request[-1]["role"] == "tool" and "not valid JSON" in second_request[-1]["content"]
    assert fake_llm.requests[2].messages[-1]["content"] == "3"


async def test_max_iterations_stops_with_every_call_answered(fake_llm: FakeLLMServer) -> None:
    async def noop(args: dict[str, Any]) -> str:
        return "nothing yet"

    tools = ToolRegistry([Tool("poll", "poll", OBJ, noop)])
    fake_llm.responder = lambda body: _tool_reply("poll", len(body["messages"]))
    loop = _loop(fake_llm, tools, config=LoopConfig(max_iterations=3))
    result = await loop.run_turn([], "loop forever")
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert "stopped after 3 steps" in result.text
    assert len(fake_llm.requests) == 3
    assert_tool_pairs_consistent(result.messages)


def _tool_reply(name: str, n: int) -> Reply:
    return Reply("", tool_calls=[{"id": f"call{n}", "name": name, "arguments": {}}])


async def test_cancel_during_tools_keeps_finished_results_and_stubs_the_rest(fake_llm: FakeLLMServer) -> None:
    slow_started = asyncio.Event()

    async def fast(args: dict[str, Any]) -> str:
        return "fast result"

    async def slow(args: dict[str, Any]) -> str:
        slow_started.set()
        await asyncio.sleep(60)
        return "never"

    tools = ToolRegistry([Tool("fast", "f", OBJ, fast), Tool("slow", "s", OBJ, slow, timeout_s=120)])
    fake_llm.reply("", tool_calls=[{"id": "s1", "name": "slow", "arguments": {}},
                                   {"id": "f1", "name": "fast", "arguments": {}}])
    loop = _loop(fake_llm, tools)
    task = asyncio.create_task(loop.run_turn([{"role": "user", "content": "before"}], "do both"))
    await asyncio.wait_for(slow_started.wait(), 5)
    await asyncio.sleep(0.01)  # let the fast tool finish
    task.cancel()
    result = await task
    assert result.stop_reason is StopReason.CANCELLED
    assert_tool_pairs_consistent(result.messages)
    results = {m["tool_call_id"]: m["content"] for m in result.messages if m["role"] == "tool"}
    assert results == {"f1": "fast result", "s1": CANCELLED_TOOL_TEXT}
    assert result.appended == result.messages[1:]


async def test_cancel_during_the_llm_call(fake_llm: FakeLLMServer) -> None:
    arrived = asyncio.Event()

    def respond(body: dict[str, Any]) -> Reply:
        arrived.set()
        return Reply("too late", delay=30)

    fake_llm.responder = respond
    loop = _loop(fake_llm)
    task = asyncio.create_task(loop.run_turn([], "hello"))
    await asyncio.wait_for(arrived.wait(), 5)
    task.cancel()
    result = await task
    assert result.stop_reason is StopReason.CANCELLED
    assert result.messages == [{"role": "user", "content": "hello"}]


async def test_memory_and_engine_tools_are_offered_and_counted(fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    memory = FileMemoryProvider(tmp_path, "bot", "u1")
    tools = ToolRegistry(memory.tools())
    fake_llm.reply("", tool_calls=[{"id": "m", "name": "memory",
                                    "arguments": {"action": "append", "text": "likes jazz"}}])
    fake_llm.reply("noted")
    result = await _loop(fake_llm, tools, memory=memory).run_turn([], "I like jazz, remember it")
    assert result.text == "noted"
    assert await memory.read("user") == "- likes jazz\n"
    first = fake_llm.requests[0]
    assert [t["function"]["name"] for t in first.json["tools"]] == ["memory"]
    # The fake counts tools into the prompt exactly as the loop's preflight does.
    assert first.prompt_tokens == get_counter().count_request(
        first.messages[1:], system=first.messages[0]["content"], tools=first.json["tools"])
    assert json.loads(result.messages[1]["tool_calls"][0]["function"]["arguments"])["text"] == "likes jazz"
