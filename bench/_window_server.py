"""The loopback model server `bench.windows` replays conversations against: a small window, enforced or not.

Two behaviours of real local servers, on 127.0.0.1:

* ``enforce`` — like vLLM: ``GET /v1/models`` reports ``max_model_len``, and a request whose prompt plus
  ``max_tokens`` does not fit is refused with vLLM's HTTP 400 body ("This model's maximum context length is N
  tokens. However, you requested …").
* ``truncate`` — like Ollama: ``/api/ps`` reports the loaded model's ``context_length`` (only once the model
  is loaded: before, ``/api/show`` offers the GGUF's training window of 131,072 and no ``num_ctx``), and a
  prompt that does not fit is silently cut — the oldest messages after the system prompt go first — and the
  usage reports what was kept.

The server counts every prompt itself, with tiktoken (o200k_base) and its own framing (3 tokens per message,
3 to prime the answer, the tool schemas as JSON) — not with Concord's counter — so "over the window" is the
server's finding. The model behind it is scripted: a chat answer of 20–100 tokens (fixed per line; one line in
25 gets 1,500 tokens), cut at ``max_tokens`` with ``finish_reason: length``, and a summary of the length its prompt asks for (a third of them
a third longer; padded with what it read when there is less to say, as models do), cut at ``max_tokens``,
each carrying a marker so the benchmark can tell which summaries were used. That model is `ScriptedModel`, which
`bench.conversation`'s server answers with too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tiktoken
from aiohttp import web

from agent.tokens import prime_tiktoken_cache
from tests.fakes.loopback import serve_on_loopback

__all__ = ["Call", "ScriptedModel", "WindowServer", "summary_marker"]

SUMMARY_SYSTEM_HINT = "You write handoff summaries of conversations"
_TARGET = re.compile(r"Target length: about ([\d,]+) tokens")
_TURNS = "CONVERSATION TURNS TO SUMMARIZE:"
_SECTIONS = ("Goal", "Constraints & Preferences", "Completed Actions", "Key Decisions", "Critical Context")
MARKER = "bench-summary-"
LONG_ANSWER = 1_500


class ScriptedModel:
    """What the loopback servers answer: see the module docstring. Counts with its own tiktoken (o200k_base)."""

    def __init__(self) -> None:
        prime_tiktoken_cache()
        self.enc = tiktoken.get_encoding("o200k_base")
        self.summaries = 0

    def tokens(self, text: str) -> int:
        """This model's count of ``text``."""
        return len(self.enc.encode_ordinary(text)) if text else 0

    def _cut(self, words: list[str], max_tokens: int | None) -> tuple[str, str]:
        text = " ".join(words)
        if max_tokens is None or self.tokens(text) <= max_tokens:
            return text, "stop"
        return self.enc.decode(self.enc.encode_ordinary(text)[:max_tokens]), "length"

    def answer(self, line: str, max_tokens: int | None) -> tuple[str, str]:
        """The answer to the user's ``line`` and its finish reason (``length`` when cut at ``max_tokens``)."""
        digest = int(hashlib.sha256(line.encode()).hexdigest()[:8], 16)
        # One line in 25 gets a long answer, longer than a 4K model's reserve: it is cut at max_tokens.
        length = LONG_ANSWER if digest % 25 == 0 else 20 + digest % 81
        words = ["Noted:", *line.split()[:12]]
        filler = "and that is worth keeping in mind for what comes next in this conversation".split()
        start = len(words)
        return self._cut(self._grow(words, lambda k: [filler[(start + i) % len(filler)] for i in range(k)], length),
                         max_tokens)

    def summary(self, prompt: str, max_tokens: int | None) -> tuple[str, str, str]:
        """A summary for the summary ``prompt`` (of the length it asks for), its finish reason and its marker."""
        found = _TARGET.search(prompt)
        target = int(found.group(1).replace(",", "")) if found else 500
        self.summaries += 1
        if self.summaries % 3 == 0:
            target = target * 4 // 3  # a model that does not keep to its target exactly
        marker = f"{MARKER}{self.summaries}"
        # A model writes about what it is asked for, however little there is to say: the turns it read, then
        # the same again in other words, until the target.
        turns = [" ".join(block.split()[:14]) for block in prompt.split(_TURNS, 1)[-1].split("\n\n") if block.strip()]
        turns = turns or ["the conversation went on"]
        words: list[str] = [f"[{marker}]"]
        for n, section in enumerate(_SECTIONS):
            words += ["\n##", *section.split(), "\n-", *turns[n % len(turns)].split()]

        def more(k: int) -> list[str]:
            return [w for j in range(k) for w in ["\n-", *turns[(len(_SECTIONS) + j) % len(turns)].split()]]

        return (*self._cut(self._grow(words, more, target), max_tokens), marker)

    def _grow(self, words: list[str], more: Callable[[int], list[str]], target: int) -> list[str]:
        """``words + more(k)`` for the smallest k whose text has ``target`` tokens — what adding one piece at a
        time would stop at (the count only grows with k), found with a few counts instead of one per piece:
        a long answer counted piece by piece took half a second, which a server answering at once must not."""
        if self.tokens(" ".join(words)) >= target:
            return words
        low, high = 0, 1
        while self.tokens(" ".join(words + more(high))) < target:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            if self.tokens(" ".join(words + more(middle))) < target:
                low = middle
            else:
                high = middle
        return words + more(high)


@dataclass
class Call:
    """One request as the server saw it."""

    kind: str  # chat | summary
    line: int  # the conversation line being answered when it arrived
    prompt_tokens: int  # the server's count of what was sent
    max_tokens: int | None
    over: bool  # prompt + max_tokens beyond the window
    outcome: str  # ok | rejected | truncated
    finish_reason: str = "stop"
    kept_tokens: int = 0  # what the model read (after a silent truncation)
    summary_seen: str = ""  # the handoff summary's marker in a chat request ("static:…" for another one); in a
    # summary request, the markers of the summaries it updates
    live_text: str = ""  # the last user message as sent
    marker: str = ""  # the marker this summary answer carries
    started: float = 0.0  # monotonic time the request arrived
    ended: float = 0.0  # monotonic time its answer was sent


@dataclass
class WindowServer:
    """See the module docstring. ``line`` is set by the driver before each message."""

    window: int
    mode: str  # enforce | truncate
    model: str = "local"
    calls: list[Call] = field(default_factory=list)
    line: int = 0
    # Seconds each summary call takes to answer (a small local model: 20-35 s for 1K tokens).
    summary_seconds: float = 0.0
    port: int = 0
    _runner: web.AppRunner | None = None
    _loaded: bool = False

    def __post_init__(self) -> None:
        self.script = ScriptedModel()

    # ----- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> WindowServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        if self.mode == "truncate":
            app.router.add_get("/api/ps", self._ollama_ps)
            app.router.add_post("/api/show", self._ollama_show)
            app.router.add_post("/api/generate", self._ollama_generate)
        self._runner, self.port = await serve_on_loopback(app, access_log=None)
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # ----- counting ----------------------------------------------------------------------------------------
    def _message_tokens(self, message: Mapping[str, Any]) -> int:
        count = self.script.tokens
        tokens = 3 + count(str(message.get("role") or "")) + count(_text(message.get("content")))
        if message.get("name"):
            tokens += 1 + count(str(message["name"]))
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            tokens += 3 + count(str(fn.get("name") or "")) + count(str(fn.get("arguments") or ""))
        return tokens

    def count(self, messages: Sequence[Mapping[str, Any]], tools: Any) -> int:
        """The server's count of a request's prompt."""
        return 3 + sum(self._message_tokens(m) for m in messages) + (self.script.tokens(json.dumps(tools)) if tools else 0)

    # ----- the window endpoints ---------------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "enforce":
            entry = {"id": self.model, "object": "model", "owned_by": "vllm", "max_model_len": self.window}
        else:
            entry = {"id": f"{self.model}:latest", "object": "model", "owned_by": "library"}
        return web.json_response({"object": "list", "data": [entry]})

    async def _ollama_ps(self, request: web.Request) -> web.StreamResponse:
        name = f"{self.model}:latest"
        loaded = [{"name": name, "model": name, "context_length": self.window}] if self._loaded else []
        return web.json_response({"models": loaded})

    async def _ollama_show(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"parameters": 'stop "<|im_end|>"',
                                  "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 131_072}})

    async def _ollama_generate(self, request: web.Request) -> web.StreamResponse:
        self._loaded = True
        return web.json_response({"model": self.model, "response": "", "done": True, "done_reason": "load"})

    # ----- chat completions ---------------------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        body = await request.json()
        self._loaded = True
        messages: list[dict[str, Any]] = list(body.get("messages") or [])
        tools = body.get("tools")
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        prompt = self.count(messages, tools)
        over = prompt + (max_tokens or 0) > self.window
        summary = bool(messages) and SUMMARY_SYSTEM_HINT in _text(messages[0].get("content"))
        call = Call("summary" if summary else "chat", self.line, prompt, max_tokens, over, "ok", kept_tokens=prompt,
                    started=started)
        self.calls.append(call)
        try:
            return await self._reply(request, body, call, messages, tools)
        finally:
            call.ended = time.monotonic()

    async def _reply(self, request: web.Request, body: dict[str, Any], call: Call, messages: list[dict[str, Any]],
                     tools: Any) -> web.StreamResponse:
        prompt, max_tokens, over, summary = call.prompt_tokens, call.max_tokens, call.over, call.kind == "summary"
        if summary and self.summary_seconds:
            await asyncio.sleep(self.summary_seconds)
        if over and self.mode == "enforce":
            call.outcome = "rejected"
            return web.json_response(status=400, data={
                "object": "error", "type": "BadRequestError", "param": None, "code": 400,
                "message": f"This model's maximum context length is {self.window} tokens. However, you requested "
                           f"{prompt + (max_tokens or 0)} tokens ({prompt} in the messages, {max_tokens or 0} in "
                           "the completion). Please reduce the length of the messages or completion."})
        if over:
            messages, call.kept_tokens = self._truncate(messages, tools, self.window - (max_tokens or 0))
            call.outcome = "truncated"
        if summary:
            # A summary updating an earlier one (the next part, the next compaction) carries its marker.
            call.summary_seen = " ".join(re.findall(rf"\[({MARKER}\d+)\]", _text(messages[-1].get("content"))))
            text, finish, call.marker = self.script.summary(_text(messages[-1].get("content")), max_tokens)
        else:
            call.summary_seen = summary_marker(messages)
            call.live_text = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
            text, finish = self.script.answer(call.live_text, max_tokens)
        call.finish_reason = finish
        usage = {"prompt_tokens": call.kept_tokens, "completion_tokens": self.script.tokens(text),
                 "total_tokens": call.kept_tokens + self.script.tokens(text)}
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        if not body.get("stream"):
            return web.json_response({"id": f"c{len(self.calls)}", "object": "chat.completion", "model": self.model,
                                      "choices": [choice], "usage": usage})
        return await self._stream(request, text, finish, usage)

    def _truncate(self, messages: list[dict[str, Any]], tools: Any, room: int) -> tuple[list[dict[str, Any]], int]:
        """Drop the oldest messages after the system prompt (never the last one) until the prompt fits."""
        kept = list(messages)
        first = 1 if kept and kept[0].get("role") == "system" else 0
        total = self.count(kept, tools)
        while len(kept) > first + 1 and total > room:
            total -= self._message_tokens(kept.pop(first))
        return kept, total

    async def _stream(self, request: web.Request, text: str, finish: str, usage: dict[str, int]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in ({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
                      {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                      {"choices": [], "usage": usage}):
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, Mapping))
    return ""


def summary_marker(messages: list[dict[str, Any]]) -> str:
    """Which summary a chat request carries: its marker, "static" for one without, "" for none."""
    for message in messages:
        text = _text(message.get("content"))
        if "[CONTEXT COMPACTION" in text:
            found = re.search(rf"\[({MARKER}\d+)\]", text)
            return found.group(1) if found else "static:" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return ""
