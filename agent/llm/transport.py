"""The HTTP edge shared by both providers: one JSON POST or one SSE stream, errors translated on entry.

Every request has one overall deadline (``timeout`` seconds) covering connect, the first byte and the whole
body or stream: httpx's own timeouts apply per read, so a server trickling one byte a second would never trip
them. Past the deadline the request ends with `DeadlineExceeded`.

Everything that can go wrong on the wire (status codes, error bodies, timeouts, dropped connections, bodies
that are not JSON) leaves this module as an `LLMError`; nothing httpx-specific escapes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from agent.jsonlimits import loads_bounded
from agent.llm.classify import classify_http_error, classify_transport_error
from agent.llm.errors import BadResponse, DeadlineExceeded, LLMError, LLMTimeout

__all__ = ["HttpTransport", "SSEEvent", "decode_event_json", "make_timeout"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One server-sent event: its ``event:`` name (None when absent) and joined ``data:`` lines."""

    event: str | None
    data: str


def make_timeout(seconds: float | httpx.Timeout) -> httpx.Timeout:
    """A read/write timeout of ``seconds`` with a shorter connect timeout, so a dead host fails fast."""
    if isinstance(seconds, httpx.Timeout):
        return seconds
    return httpx.Timeout(seconds, connect=min(10.0, seconds))


async def _sse_events(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    event: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield SSEEvent(event, "\n".join(data))
            event, data = None, []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield SSEEvent(event, "\n".join(data))


class HttpTransport:
    """POSTs JSON to one base URL over a shared or owned `httpx.AsyncClient`."""

    def __init__(
        self,
        *,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float | httpx.Timeout,
        client: httpx.AsyncClient | None,
        provider: str,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._timeout = make_timeout(timeout)
        self.deadline = timeout if isinstance(timeout, int | float) else timeout.read
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=self._timeout)
        self._provider = provider
        self._secrets = tuple(s for s in secrets if s)

    def _request(self, path: str, body: Mapping[str, Any]) -> httpx.Request:
        return self._client.build_request(
            "POST", f"{self.base_url}{path}", json=body, headers=self._headers, timeout=self._timeout
        )

    async def _raise_for_status(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        text = (await response.aread()).decode("utf-8", errors="replace")
        raise classify_http_error(response.status_code, text, response.headers, provider=self._provider,
                                  secrets=self._secrets)

    def _translate(self, exc: httpx.HTTPError) -> LLMError:
        return classify_transport_error(exc, provider=self._provider, secrets=self._secrets)

    async def _exchange(self, path: str, body: Mapping[str, Any],
                        handle: Callable[[httpx.Response], Awaitable[T]]) -> T:
        """Send the request and run ``handle`` on the 2xx response, all within the overall deadline."""
        deadline = asyncio.timeout(self.deadline)
        answered = False
        try:
            async with deadline:
                response = await self._client.send(self._request(path, body), stream=True)
                answered = True
                try:
                    await self._raise_for_status(response)
                    return await handle(response)
                finally:
                    await response.aclose()
        except httpx.HTTPError as exc:
            raise self._translate(exc) from exc
        except TimeoutError:
            if not deadline.expired():
                raise
            if answered:  # the reply was trickling in: asking again would hold the chat as long again
                raise DeadlineExceeded(f"request timed out: the reply was still arriving after {self.deadline:g} s",
                                       provider=self._provider) from None
            raise LLMTimeout(f"request timed out: no answer within {self.deadline:g} s",
                             provider=self._provider) from None

    async def post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` and return the decoded JSON object of a 2xx reply, all within the deadline."""

        async def decode(response: httpx.Response) -> dict[str, Any]:
            content = await response.aread()
            try:
                data = loads_bounded(content)
            except ValueError as exc:
                raise BadResponse(f"reply is not valid JSON ({len(content)} bytes)", status=response.status_code,
                                  provider=self._provider) from exc
            if not isinstance(data, dict):
                raise BadResponse("reply JSON is not an object", status=response.status_code,
                                  provider=self._provider)
            return data

        return await self._exchange(path, body, decode)

    async def post_sse(
        self, path: str, body: Mapping[str, Any], consume: Callable[[AsyncIterator[SSEEvent]], Awaitable[T]]
    ) -> T:
        """POST ``body`` expecting an SSE stream and return what ``consume`` makes of its events; the whole
        stream must end within the deadline."""
        return await self._exchange(path, body, lambda response: consume(_sse_events(response)))

    async def aclose(self) -> None:
        """Close the client if this transport created it; a shared client is left to its owner."""
        if self._owns_client and not self._client.is_closed:
            await self._client.aclose()


def decode_event_json(event: SSEEvent, provider: str) -> dict[str, Any]:
    """The JSON object inside one SSE event, or BadResponse."""
    try:
        data = loads_bounded(event.data)
    except ValueError as exc:
        raise BadResponse(f"stream event is not valid JSON: {event.data[:80]!r}", provider=provider) from exc
    if not isinstance(data, dict):
        raise BadResponse("stream event JSON is not an object", provider=provider)
    return data
