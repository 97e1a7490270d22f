"""The tool registry: named tools with JSON-Schema parameters, and safe execution of the model's calls.

Every request carries the schemas, so they count against the window: `ToolRegistry.schemas` given a budget
sends them whole when they fit, else in a compact form (each description's first sentence, no parameter
descriptions), and drops the tools of lowest ``priority`` first when even that is too much (a 4K model gets
its history tools, not a tenth of its window in instructions).

Whatever the model sends — arguments that are not JSON, JSON that is not an object, values that break the
schema, a tool that does not exist — becomes a tool result the model can read and act on, never an
exception that ends the turn. Each call runs under its tool's timeout and its result is capped in size, so
one runaway tool cannot stall a turn or flood the context window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.compression.redact import redact_secrets
from agent.jsonlimits import loads_bounded
from agent.storable import storable
from agent.tokens import TokenCounter
from agent.tools.schema import validate

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_TIMEOUT_S",
    "Tool",
    "ToolError",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSource",
    "cap_text",
]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_RESULT_CHARS = 20_000
_MAX_ERROR_DETAIL = 400
_MAX_LISTED_ERRORS = 8

Handler = Callable[[dict[str, Any]], Awaitable[str]]


class ToolError(Exception):
    """A failure a tool foresaw and explains itself (a service down): the model reads the message, and the log
    gets one line without a traceback."""


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool the model may call. ``parameters`` is the JSON Schema of its argument object."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    handler: Handler
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    # Which tools a small window keeps: the highest first.
    priority: int = 0

    def schema(self, compact: bool = False) -> dict[str, Any]:
        """The OpenAI function-tool schema sent with each request; ``compact``: the description's first
        sentence and no parameter descriptions (the names and types are what a call needs)."""
        description, parameters = self.description, dict(self.parameters)
        if compact:
            description = _first_sentence(description)
            properties = parameters.get("properties")
            if isinstance(properties, Mapping):
                parameters["properties"] = {
                    name: {k: v for k, v in spec.items() if k != "description"} if isinstance(spec, Mapping) else spec
                    for name, spec in properties.items()}
        return {"type": "function", "function": {"name": self.name, "description": description,
                                                 "parameters": parameters}}


def _first_sentence(text: str) -> str:
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one call produced. ``message`` is the tool-result chat message to append."""

    call_id: str
    name: str
    content: str
    ok: bool
    duration_s: float = 0.0
    message: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", {"role": "tool", "tool_call_id": self.call_id, "content": self.content})


def cap_text(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, keeping its start and end and saying how much went."""
    if len(text) <= limit:
        return text
    marker = f"\n[… {len(text) - limit:,} characters cut: result over {limit:,} characters …]\n"
    keep = max(0, limit - len(marker))
    head = keep * 3 // 4
    return text[:head] + marker + text[len(text) - (keep - head):]


# Tools that come and go with something outside the agent (an MCP server): asked each time they are needed.
ToolSource = Callable[[], Sequence[Tool]]


class ToolRegistry:
    """The tools of one agent. Names are unique; the order of registration is the order of the schemas, and
    the tools of the sources (`add_source`) follow, in their own order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        # Schemas per token budget and set of tools (the window decides the budget; sources come and go).
        self._within: dict[tuple[int, tuple[str, ...]], list[dict[str, Any]]] = {}
        for tool in tools:
            self.register(tool)

    def add_source(self, source: ToolSource) -> None:
        """Offer the tools ``source()`` returns at the time of each request and call; a name the registry
        already holds is not shadowed."""
        self._sources.append(source)

    def _all(self) -> dict[str, Tool]:
        if not self._sources:
            return self._tools
        tools = dict(self._tools)
        for source in self._sources:
            for tool in source():
                tools.setdefault(tool.name, tool)
        return tools

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a second tool with the same name is a programming error."""
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} is already registered")
        if tool.parameters.get("type", "object") != "object":
            raise ValueError(f"tool {tool.name!r}: parameters must be a JSON Schema of type 'object'")
        self._tools[tool.name] = tool
        self._within.clear()

    def add_engine_tools(self, engine: Any, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Register the tools a context engine offers (``engine.tools()``), run through ``engine.call_tool``."""
        for schema in engine.tools():
            fn = schema.get("function", schema)
            name = fn["name"]

            async def handler(args: dict[str, Any], _name: str = name) -> str:
                return str(await engine.call_tool(_name, args))

            self.register(Tool(name, fn.get("description", ""), fn.get("parameters") or {"type": "object"},
                               handler, timeout_s=timeout_s))

    def __contains__(self, name: object) -> bool:
        return name in self._all()

    def __len__(self) -> int:
        return len(self._all())

    def names(self) -> list[str]:
        """Tool names: the registered ones in registration order, then the sources'."""
        return list(self._all())

    def schemas(self, budget_tokens: int | None = None, counter: TokenCounter | None = None) -> list[dict[str, Any]]:
        """Schemas for the request (they count toward its size): every tool's, whole; with a budget, within
        ``budget_tokens`` as ``counter`` counts them — compact, then without the lowest-priority tools."""
        tools = self._all()
        full = [tool.schema() for tool in tools.values()]
        if budget_tokens is None or counter is None or counter.count_tools(full) <= budget_tokens:
            return full
        key = (budget_tokens, tuple(tools))
        if key not in self._within:
            kept = list(tools.values())
            schemas = [tool.schema(compact=True) for tool in kept]
            while kept and counter.count_tools(schemas) > budget_tokens:
                drop = min(range(len(kept)), key=lambda i: (kept[i].priority, -i))
                del kept[drop], schemas[drop]
            if len(self._within) >= 64:  # sources whose tools keep changing must not grow it without bound
                self._within.clear()
            self._within[key] = schemas
        return self._within[key]

    async def execute(self, call: Mapping[str, Any]) -> ToolOutcome:
        """Run one model tool call; every failure becomes an error result, never an exception."""
        call_id = str(call.get("id") or "")
        fn = call.get("function") or {}
        name = str(fn.get("name") or "")
        started = time.monotonic()
        tools = self._all()
        tool = tools.get(name)
        if tool is None:
            available = ", ".join(tools) or "none"
            return ToolOutcome(call_id, name, f"Error: unknown tool {name!r}. Available tools: {available}.", False)
        args, problem = _parse_arguments(tool, fn.get("arguments"))
        if problem:
            return ToolOutcome(call_id, name, problem, False)
        deadline = asyncio.timeout(tool.timeout_s)
        try:
            async with deadline:
                raw = await tool.handler(args)
        except TimeoutError as exc:
            if not deadline.expired():
                text, ok = _failure_text(name, exc), False
            else:
                text, ok = f"Error: tool {name!r} timed out after {tool.timeout_s:g} s and was stopped.", False
        except ToolError as exc:
            log.info("tool %s: %s", name, redact_secrets(str(exc)))
            text, ok = f"Error: {redact_secrets(str(exc))}", False
        except Exception as exc:  # a tool's own bug must not end the turn; the model sees what happened
            log.warning("tool %s failed: %s", name, type(exc).__name__, exc_info=True)
            text, ok = _failure_text(name, exc), False
        else:
            text, ok = (raw if isinstance(raw, str) else str(raw)), True
        return ToolOutcome(call_id, name, cap_text(text, tool.max_result_chars), ok, time.monotonic() - started)

    async def execute_all(self, calls: Sequence[Mapping[str, Any]]) -> list[ToolOutcome]:
        """Run the model's calls concurrently; outcomes come back in the order of ``calls``."""
        return list(await asyncio.gather(*(self.execute(call) for call in calls)))


def _failure_text(name: str, exc: BaseException) -> str:
    detail = redact_secrets(str(exc))[:_MAX_ERROR_DETAIL]
    return f"Error: tool {name!r} failed: {type(exc).__name__}: {detail}"


def _parse_arguments(tool: Tool, raw: Any) -> tuple[dict[str, Any], str]:
    """The argument object, or an error text telling the model what to fix."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        value: Any = {}
    elif isinstance(raw, dict):
        value = raw
    else:
        try:
            value = loads_bounded(raw)
        except (TypeError, ValueError) as exc:
            snippet = str(raw)[:120]
            return {}, (f"Error: the arguments for {tool.name!r} are not valid JSON ({exc}). "
                        f"Received: {snippet!r}. Call it again with a JSON object matching its schema.")
    if not isinstance(value, dict):
        return {}, (f"Error: the arguments for {tool.name!r} must be a JSON object, "
                    f"got {type(value).__name__}. Call it again with an object matching its schema.")
    # A model's text enters here too: a NUL in an argument must not reach a database query.
    value = storable(value)
    errors = validate(tool.parameters, value)
    if errors:
        listed = "; ".join(errors[:_MAX_LISTED_ERRORS])
        more = f" (and {len(errors) - _MAX_LISTED_ERRORS} more)" if len(errors) > _MAX_LISTED_ERRORS else ""
        return {}, f"Error: invalid arguments for {tool.name!r}: {listed}{more}. Fix them and call it again."
    return value, ""
