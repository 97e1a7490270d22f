"""Tool registry: schemas, argument validation, garbage from the model, timeouts, size caps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agent.tools.registry import Tool, ToolRegistry, cap_text
from agent.tools.schema import validate

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


async def _add(args: dict[str, Any]) -> str:
    return str(args["a"] + args["b"])


def _call(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([Tool("add", "add two integers", ADD_SCHEMA, _add)])


async def test_valid_call_runs_the_handler(registry: ToolRegistry) -> None:
    outcome = await registry.execute(_call("add", json.dumps({"a": 2, "b": 3})))
    assert outcome.ok and outcome.content == "5"
    assert outcome.message == {"role": "tool", "tool_call_id": "c1", "content": "5"}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"a": 1, "b": ', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, got list"),
        ('{"a": "one", "b": 2}', "$.a: expected integer, got string"),
        ('{"a": 1}', "missing required property 'b'"),
        ('{"a": 1, "b": -4}', "$.b: must be >= 0"),
        ('{"a": 1, "b": 2, "c": 3}', "unexpected property 'c' (allowed: a, b)"),
        ("\x00\xff garbage", "not valid JSON"),
    ],
)
async def test_bad_arguments_become_readable_error_results(registry: ToolRegistry, arguments: str,
                                                           expected: str) -> None:
    outcome = await registry.execute(_call("add", arguments))
    assert not outcome.ok
    assert outcome.content.startswith("Error:")
    assert expected in outcome.content
    assert outcome.message["tool_call_id"] == "c1"


async def test_empty_arguments_mean_an_empty_object() -> None:
    async def ping(args: dict[str, Any]) -> str:
        return f"pong {args}"

    reg = ToolRegistry([Tool("ping", "ping", {"type": "object", "properties": {}}, ping)])
    assert (await reg.execute(_call("ping", ""))).content == "pong {}"
    assert (await reg.execute(_call("ping", None))).content == "pong {}"


async def test_unknown_tool_lists_the_available_ones(registry: ToolRegistry) -> None:
    outcome = await registry.execute(_call("delete_everything", "{}"))
    assert not outcome.ok
    assert "unknown tool 'delete_everything'" in outcome.content and "add" in outcome.content


async def test_timeout_stops_the_tool() -> None:
    started = asyncio.Event()

    async def slow(args: dict[str, Any]) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    reg = ToolRegistry([Tool("slow", "slow", {"type": "object"}, slow, timeout_s=0.05)])
    outcome = await reg.execute(_call("slow", "{}"))
    assert started.is_set() and not outcome.ok
    assert "timed out after 0.05 s" in outcome.content


async def test_a_tool_raising_timeout_itself_is_a_failure_not_our_timeout() -> None:
    async def flaky(args: dict[str, Any]) -> str:
        raise TimeoutError("upstream took too long")

    reg = ToolRegistry([Tool("flaky", "flaky", {"type": "object"}, flaky, timeout_s=10)])
    outcome = await reg.execute(_call("flaky", "{}"))
    assert "failed: TimeoutError: upstream took too long" in outcome.content


async def test_tool_exception_is_reported_without_secrets() -> None:
    async def broken(args: dict[str, Any]) -> str:
        raise RuntimeError("db refused api_key=sk-abcdefghijklmnop1234")

    reg = ToolRegistry([Tool("broken", "broken", {"type": "object"}, broken)])
    outcome = await reg.execute(_call("broken", "{}"))
    assert not outcome.ok and "RuntimeError" in outcome.content
    assert "sk-abcdefghijklmnop1234" not in outcome.content


async def test_results_are_capped_keeping_head_and_tail() -> None:
    async def big(args: dict[str, Any]) -> str:
        return "HEAD" + "x" * 50_000 + "TAIL"

    reg = ToolRegistry([Tool("big", "big", {"type": "object"}, big, max_result_chars=2_000)])
    outcome = await reg.execute(_call("big", "{}"))
    assert len(outcome.content) <= 2_000
    assert outcome.content.startswith("HEAD") and outcome.content.endswith("TAIL")
    assert "characters cut" in outcome.content


def test_cap_text_leaves_short_text_alone() -> None:
    assert cap_text("short", 100) == "short"


def test_schemas_and_duplicate_names(registry: ToolRegistry) -> None:
    assert registry.schemas() == [{"type": "function", "function": {
        "name": "add", "description": "add two integers", "parameters": ADD_SCHEMA}}]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Tool("add", "again", ADD_SCHEMA, _add))
    with pytest.raises(ValueError, match="type 'object'"):
        registry.register(Tool("bad", "bad", {"type": "string"}, _add))
    assert "add" in registry and len(registry) == 1 and registry.names() == ["add"]


async def test_engine_tools_are_registered_and_dispatched() -> None:
    class Engine:
        def tools(self) -> list[dict[str, Any]]:
            return [{"type": "function", "function": {
                "name": "recall", "description": "look up", "parameters": {
                    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]

        async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
            return f"{name}:{arguments['q']}"

    reg = ToolRegistry()
    reg.add_engine_tools(Engine())
    assert (await reg.execute(_call("recall", '{"q": "port"}'))).content == "recall:port"
    assert "missing required property 'q'" in (await reg.execute(_call("recall", "{}"))).content


@pytest.mark.parametrize(
    ("schema", "value", "error"),
    [
        ({"type": "boolean"}, 1, "expected boolean, got integer"),
        ({"type": "integer"}, True, "expected integer, got boolean"),
        ({"type": "number"}, "1", "expected number, got string"),
        ({"type": ["string", "null"]}, 3, "expected string or null"),
        ({"enum": ["a", "b"]}, "c", "must be one of 'a', 'b'"),
        ({"const": 1}, 2, "must be 1"),
        ({"type": "string", "maxLength": 2}, "abc", "at most 2 characters"),
        ({"type": "string", "minLength": 2}, "a", "at least 2 characters"),
        ({"type": "array", "items": {"type": "integer"}}, [1, "x"], "$[1]: expected integer"),
        ({"type": "array", "minItems": 1}, [], "at least 1 items"),
        ({"type": "array", "maxItems": 1}, [1, 2], "at most 1 items"),
        ({"type": "number", "maximum": 5}, 6, "must be <= 5"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, [], "matches none"),
        ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 3, "exactly one"),
        ({"type": "object", "additionalProperties": {"type": "string"}}, {"k": 1}, "$.k: expected string"),
    ],
)
def test_validator_rejects(schema: dict[str, Any], value: Any, error: str) -> None:
    errors = validate(schema, value)
    assert errors and error in errors[0]


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "integer"}, 3.0),
        ({"type": ["string", "null"]}, None),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, 3),
        ({"type": "object", "properties": {"x": {"type": "array", "items": {"type": "string"}}}}, {"x": ["a"]}),
        ({"unknownKeyword": 1}, "anything"),
    ],
)
def test_validator_accepts(schema: dict[str, Any], value: Any) -> None:
    assert validate(schema, value) == []


def _tool(name: str, priority: int, words: int = 60) -> Tool:
    async def handler(args: dict[str, Any]) -> str:
        return "ok"

    description = f"Do {name}. " + " ".join(f"detail{i}" for i in range(words))
    parameters = {"type": "object", "properties": {"query": {"type": "string", "description": "what " * words}}}
    return Tool(name, description, parameters, handler, priority=priority)


def test_schemas_within_a_budget_are_compacted_then_the_least_needed_dropped() -> None:
    from agent.tokens import get_counter

    counter = get_counter()
    registry = ToolRegistry([_tool("memory", 1), _tool("search_history", 3), _tool("pin", 0)])
    full = registry.schemas()
    assert registry.schemas(counter.count_tools(full), counter) == full  # fits: sent whole
    compact = registry.schemas(counter.count_tools(full) - 1, counter)
    assert [s["function"]["name"] for s in compact] == ["memory", "search_history", "pin"]
    assert compact[0]["function"]["description"] == "Do memory."
    assert "description" not in compact[0]["function"]["parameters"]["properties"]["query"]
    one = counter.count_tools(compact[1:2])
    assert [s["function"]["name"] for s in registry.schemas(one, counter)] == ["search_history"]
    assert registry.schemas(0, counter) == []
    assert all(counter.count_tools(registry.schemas(b, counter)) <= b for b in (0, one, one * 2, one * 3))
