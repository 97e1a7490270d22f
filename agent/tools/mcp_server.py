"""One MCP server, kept connected: started, listed, called, and restarted with backoff when it fails or dies.

Built on the official SDK (``mcp`` ≥ 2.3, the ``concord[mcp]`` extra): `mcp.Client` over the stdio
transport (the server is a child process; it inherits only the SDK's short list of safe environment variables
plus the configured ``env``, never Concord's own settings) or over streamable HTTP. A supervisor task owns the
client — the SDK's task groups must be entered and left in one task — and other tasks only await calls on it.

A server that cannot be started, or whose connection ends (its process exited, its stream closed, a call
found the connection gone), is reported once in the log and started again after 1 s, doubling up to 60 s;
meanwhile its tools stay listed as they were last seen, and calls to them return at once with an error the
model can read. When it is back that is logged once too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from agent.tools.registry import ToolError

__all__ = ["McpServer", "McpServerSpec", "McpToolInfo", "McpUnavailable", "render_result"]

log = logging.getLogger(__name__)

FIRST_RETRY_S = 1.0
MAX_RETRY_S = 60.0
_MAX_PAGES = 50


@dataclass(frozen=True)
class McpServerSpec:
    """How to reach one MCP server and what of it to offer (see ``tools.mcp_servers`` in the README)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # The server's tool names offered to the model (empty: all of them).
    tools: frozenset[str] = frozenset()
    # Where its tools are offered: ``platform:chat id`` entries and platform names (both empty: everywhere).
    allow_chats: frozenset[str] = frozenset()
    allow_platforms: frozenset[str] = frozenset()
    timeout_s: float = 30.0
    max_output_tokens: int = 4_000
    connect_timeout_s: float = 30.0

    def __repr__(self) -> str:  # env values and headers may hold secrets
        where = self.url if self.url else " ".join((self.command or "", *self.args))
        return f"McpServerSpec(name={self.name!r}, {where!r})"


@dataclass(frozen=True)
class McpToolInfo:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


class McpUnavailable(ToolError):
    """The server is not connected right now (it is being started again)."""


class _EndWatch:
    """A transport's read stream that sets ``ended`` when the stream ends: the server process exited or the
    connection closed, so the supervisor restarts it without waiting for a call to fail."""

    def __init__(self, inner: Any, ended: asyncio.Event) -> None:
        self._inner = inner
        self._ended = ended

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        import anyio

        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended.set()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def render_result(result: Any) -> str:
    """A `CallToolResult` as text: its text blocks, other blocks named, structured content as JSON."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({getattr(block, 'mime_type', None) or getattr(block, 'mimeType', '?')}) not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '?')}]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(str(text) if text is not None else f"[resource: {getattr(resource, 'uri', '?')}]")
    structured = getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts) or "(no output)"
    if getattr(result, "is_error", None) or getattr(result, "isError", None):
        return f"The tool reported an error:\n{text}"
    return text


class McpServer:
    """One configured server under supervision; `start` launches it, `aclose` stops it."""

    def __init__(self, spec: McpServerSpec, *, errlog: IO[str] | None = None) -> None:
        self.spec = spec
        # The tools as last listed: kept while the server is down so the model's tool list stays stable.
        self.tools: tuple[McpToolInfo, ...] = ()
        self.listing_version = 0
        self._errlog = errlog
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._closing = asyncio.Event()
        self._attempted = asyncio.Event()
        self._down_since: float | None = None
        self._failures = 0
        self._why = "not started yet"

    @property
    def connected(self) -> bool:
        """Whether calls can be made now."""
        return self._client is not None

    def start(self) -> None:
        """Launch the supervisor (idempotent)."""
        if self._task is None:
            self._task = asyncio.create_task(self._supervise(), name=f"mcp:{self.spec.name}")

    async def wait_attempted(self, timeout_s: float) -> None:
        """Return once the first connection attempt has ended either way, or after ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._attempted.wait()

    async def aclose(self) -> None:
        """Stop the server (a stdio child is shut down and, failing that, killed by the SDK)."""
        self._closing.set()
        self._lost.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task
            self._task = None

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` and return its result as text; `McpUnavailable` when the server is down."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        client = self._client
        if client is None:
            raise McpUnavailable(f"MCP server {self.spec.name!r} is not running ({self._why}); it is being "
                                 "started again")
        try:
            # The registry enforces the deadline (Tool.timeout_s); the SDK's own is the backstop behind it.
            result = await client.call_tool(tool, arguments, read_timeout_seconds=self.spec.timeout_s + 1)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise ToolError(f"MCP server {self.spec.name!r} did not answer within {self.spec.timeout_s:g} s; "
                                "the call was abandoned") from None
            if exc.code != CONNECTION_CLOSED:
                raise
            self._lose("its connection closed")
            raise McpUnavailable(f"MCP server {self.spec.name!r} went away during the call; it is being "
                                 "started again") from None
        except (OSError, ConnectionError) as exc:
            self._lose(f"{type(exc).__name__}: {exc}")
            raise McpUnavailable(f"MCP server {self.spec.name!r} could not be reached; it is being started "
                                 "again") from None
        return render_result(result)

    def _lose(self, why: str) -> None:
        if self._client is not None:
            self._why = why
            self._lost.set()

    async def _supervise(self) -> None:
        delay = FIRST_RETRY_S
        while not self._closing.is_set():
            self._lost.clear()
            try:
                async with self._connected() as client:
                    self._client = client
                    self._back_up()
                    self._attempted.set()
                    delay = FIRST_RETRY_S
                    await self._lost.wait()
            except Exception as exc:  # every failure of a foreign server ends the same way: retry later
                self._failed(exc, delay)
            finally:
                self._client = None
                self._attempted.set()
            if self._closing.is_set():
                return
            if self._down_since is None:  # the connection ended after it was up
                self._failed(None, delay)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._closing.wait()
            delay = min(delay * 2, MAX_RETRY_S)

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[Any]:
        """A connected, listed client for the supervisor's lifetime of one connection."""
        from mcp import Client

        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.spec.connect_timeout_s):
                transport = await self._transport(stack)
                client = await stack.enter_async_context(Client(transport, read_timeout_seconds=self.spec.timeout_s))
                await self._list(client)
            yield client

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.client.streamable_http import streamable_http_client

        spec = self.spec
        if spec.url:
            import httpx2

            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=dict(spec.headers), timeout=httpx2.Timeout(spec.connect_timeout_s, read=300.0)))
            inner = streamable_http_client(spec.url, http_client=http)
        else:
            params = StdioServerParameters(command=spec.command or "", args=list(spec.args), env=dict(spec.env),
                                           cwd=spec.cwd)
            inner = stdio_client(params, **({"errlog": self._errlog} if self._errlog is not None else {}))
        return _watched(inner, self._lost)

    async def _list(self, client: Any) -> None:
        tools: list[McpToolInfo] = []
        cursor = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(McpToolInfo(t.name, t.description or "", dict(t.input_schema or {"type": "object"}))
                         for t in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        if tuple(tools) != self.tools:
            self.tools = tuple(tools)
            self.listing_version += 1

    def _back_up(self) -> None:
        if self._down_since is not None:
            log.warning("MCP server %s is back after %.0f s (%d failed attempts); %d tools", self.spec.name,
                        time.monotonic() - self._down_since, self._failures, len(self.tools))
        else:
            log.info("MCP server %s started; %d tools", self.spec.name, len(self.tools))
        self._down_since, self._failures, self._why = None, 0, "running"

    def _failed(self, exc: BaseException | None, delay: float) -> None:
        why = "its connection ended" if exc is None else _describe(exc)
        if self._down_since is None:
            self._down_since = time.monotonic()
            self._why = why
            log.error("MCP server %s %s (%s); retrying in %.0f s, doubling up to %.0f s; the bot answers without "
                      "its tools meanwhile", self.spec.name, "stopped" if exc is None else "failed", why, delay,
                      MAX_RETRY_S)
        else:
            log.debug("MCP server %s still failing (%s); next try in %.0f s", self.spec.name, why, delay)
        if exc is not None:
            self._failures += 1


@contextlib.asynccontextmanager
async def _watched(transport: Any, ended: asyncio.Event) -> AsyncIterator[tuple[Any, Any]]:
    async with transport as (read, write):
        yield _EndWatch(read, ended), write


def _describe(exc: BaseException) -> str:
    """A one-line cause, looking inside the task groups the SDK raises from."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "no answer to the handshake in time"
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
