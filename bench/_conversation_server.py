"""The loopback Anthropic Messages server `bench.conversation` replays a conversation against.

It answers chat requests at once with `ScriptedModel`'s answers (streamed, as Concord asks) and summary requests
(their system prompt is the summarizer's) after a fixed delay, refuses what does not fit its window the way
Anthropic words it, and keeps every request: its body, the conversation line the replaying process was
answering when it arrived (``line``, set by that process through the benchmark), the arrival time
(``time.monotonic``, which every process on the machine shares) and its bill under `PromptCache` — computed here,
from what was received, at the simulated time of its line, so the code under test reports none of these figures.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from bench._prompt_cache import Billed, PromptCache, request_blocks
from bench._window_server import SUMMARY_SYSTEM_HINT, ScriptedModel
from tests.fakes.llm_wire import Reply, anthropic_events, anthropic_message, error_reply
from tests.fakes.loopback import serve_on_loopback

__all__ = ["LINE_SECONDS", "ConversationServer", "Received"]

# Simulated seconds between two lines of the conversation (their real pace is the replay's: see bench.conversation).
LINE_SECONDS = 10.0


@dataclass
class Received:
    """One request as the server saw it."""

    line: int
    at: float  # monotonic arrival time
    kind: str  # chat | summary
    body: dict[str, Any]
    bill: Billed | None = None  # None: refused (over the window)


class ConversationServer:
    """See the module docstring."""

    def __init__(self, window: int, summary_seconds: float) -> None:
        self.window = window
        self.summary_seconds = summary_seconds
        self.script = ScriptedModel()
        self.cache = PromptCache()
        self.received: list[Received] = []
        self.line = -1
        self.port = 0
        self._in_flight = 0
        self._last_activity = time.monotonic()
        self._runner: web.AppRunner | None = None
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        """`ScriptedModel.tokens`, remembered: a conversation's requests repeat nearly all of their blocks, and
        time spent here would show as the gateway's in the first-token figures."""
        tokens = self._counts.get(text)
        if tokens is None:
            tokens = self._counts[text] = self.script.tokens(text)
        return tokens

    async def start(self) -> ConversationServer:
        """Serve on a free loopback port."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        self._runner, self.port = await serve_on_loopback(app, access_log=None, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        """The Anthropic client's base URL."""
        return f"http://127.0.0.1:{self.port}"

    async def quiet(self, idle_s: float) -> None:
        """Return once no request is in flight and none arrived or ended for ``idle_s`` seconds."""
        while True:
            wait = self._last_activity + idle_s - time.monotonic()
            if self._in_flight == 0 and wait <= 0:
                return
            await asyncio.sleep(max(wait, 0.01))

    def _simulated_time(self) -> float:
        # Requests of one line keep their order within it, well inside the gap to the next line.
        same_line = sum(1 for r in self.received if r.line == self.line)
        return self.line * LINE_SECONDS + same_line * 1e-3

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self._in_flight += 1
        try:
            return await self._answer(request)
        finally:
            self._in_flight -= 1
            self._last_activity = time.monotonic()

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        system = "".join(str(b.get("text") or "") for b in body.get("system") or () if isinstance(b, Mapping))
        kind = "summary" if SUMMARY_SYSTEM_HINT in system else "chat"
        at = self._simulated_time()
        received = Received(self.line, time.monotonic(), kind, body)
        self.received.append(received)
        self._last_activity = received.at
        blocks = request_blocks(body, self.count)
        prompt = sum(b.tokens for b in blocks)
        max_tokens = int(body.get("max_tokens") or 0)
        if prompt + max_tokens > self.window:
            error = error_reply("anthropic", "context_output" if prompt <= self.window else "context_overflow",
                                {"limit": self.window, "prompt": prompt, "completion": max_tokens})
            return web.Response(status=error.status, text=error.body, content_type=error.content_type)
        if kind == "summary":
            await asyncio.sleep(self.summary_seconds)
            text, finish, _marker = self.script.summary(_last_text(body), max_tokens)
        else:
            text, finish = self.script.answer(_last_text(body), max_tokens)
        received.bill = self.cache.bill(blocks, self.script.tokens(text), at)
        bill = received.bill
        usage = {"prompt_tokens": bill.prompt, "completion_tokens": bill.output, "cache_read_tokens": bill.read,
                 "cache_write_tokens": bill.written}
        reply = Reply(text, finish_reason=finish)
        model, seq = str(body.get("model")), len(self.received)
        if not body.get("stream"):
            return web.json_response(anthropic_message(reply, model, usage, seq))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for name, data in anthropic_events(reply, model, usage, seq):
            await response.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        await response.write_eof()
        return response


def _last_text(body: Mapping[str, Any]) -> str:
    """The text of the request's last user message (the line to answer, or the summary prompt)."""
    for message in reversed(body.get("messages") or ()):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [str(b.get("text") or "") for b in content or () if isinstance(b, Mapping) and b.get("type") == "text"]
        if texts:
            return "\n".join(texts)
    return ""
