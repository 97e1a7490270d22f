"""One replay of `bench.conversation`: a conversation through Concord's gateway, in a process of its own.

    python bench/_revision.py ROOT bench/_conversation_replay.py --base-url URL --window N --lines FILE [--off]

Started by `bench.conversation` through `bench/_revision.py`, so the gateway, agent and adapters it imports are
ROOT's — this checkout's or the baseline's — while this file is the same for both (it imports only what every
revision has). The gateway is built as ``concord run`` builds it (`build_runtime`, `Gateway`, the router,
hygiene, the agent loop, compression, the SQLite store), in this process, with an adapter that hands it one
line at a time and shows the answer as it streams (``live_reply``), as Discord and Telegram do, so the first
answer token is seen when it arrives. The model is Claude on the native Anthropic API (so Concord sends its
``cache_control`` markers), at the benchmark's loopback server, with the window it is told.

It talks to the benchmark over stdin/stdout, one line each way: ``@line N`` (the server is told which line is
answered; the benchmark says ``ok``), ``@quiet`` (wait until the server has been idle: the gap to the next
message), and last ``@result JSON``: per line the monotonic times it was sent, its first answer token arrived
and its handling ended, and whether it was answered.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gateway as gateway_package
from adapters.base import Inbound, LiveReply
from bench.windows import PacedAdapter

# Both names through gateway.app, which every revision has (gateway/app.py before it became a package).
from gateway.app import Gateway, build_runtime
from gateway.config import load_settings

MODEL = "claude-sonnet-4-5"


class StreamingAdapter(PacedAdapter):
    """`PacedAdapter` whose answers stream into a live reply, timing the first token of each."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None
        self.answer = ""

    def live_reply(self, target: Inbound) -> LiveReply | None:
        return _Timed(self)


class _Timed(LiveReply):
    def __init__(self, adapter: StreamingAdapter) -> None:
        self.adapter = adapter

    async def text(self, text: str) -> None:
        if text and self.adapter.first is None:
            self.adapter.first = time.monotonic()

    async def status(self, text: str) -> None:
        return None

    async def finish(self, text: str) -> None:
        self.adapter.answer = text


async def _ask(request: str) -> None:
    """Send one protocol line and wait for the benchmark's ``ok``."""
    print(request, flush=True)
    reply = await asyncio.to_thread(sys.stdin.readline)
    if reply.strip() != "ok":
        raise SystemExit(f"the benchmark answered {reply!r} to {request!r}")


async def replay(base_url: str, window: int, lines: list[str], compaction: bool, *,
                 ahead: bool = True) -> list[dict[str, Any]]:
    """Replay ``lines``; per line its times and whether it was answered. ``ahead=False`` turns compaction ahead of
    need off (a revision without it takes no such setting, so it is named only when off)."""
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="concord-conversation-") as tmp:
        settings = load_settings(
            llm={"provider": "anthropic", "base_url": base_url, "api_key": "bench-key", "model": MODEL,
                 "context_length": window},
            storage={"data_dir": tmp}, gateway={"sweep_cron": None}, memory={"directory": str(Path(tmp) / "memory")},
            compression={"enabled": compaction, **({} if ahead else {"ahead_of_need": False})})
        adapter = StreamingAdapter()
        gateway = Gateway(await build_runtime(settings), [adapter])
        await gateway.start()
        try:
            for number, line in enumerate(lines):
                await _ask(f"@line {number}")
                adapter.first, adapter.answer = None, ""
                sent = time.monotonic()
                await adapter.say(line)
                done = time.monotonic()
                results.append({"sent": sent, "first": adapter.first or done, "done": done,
                                "answered": bool(adapter.answer) and not adapter.answer.startswith("⚠️")})
                await _ask("@quiet")
        finally:
            await gateway.aclose(grace_seconds=5)
    return results


def main() -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--lines", type=Path, required=True, help="a JSON list of the lines to send")
    parser.add_argument("--off", action="store_true", help="compaction off (compression.enabled: false)")
    parser.add_argument("--no-ahead", action="store_true",
                        help="compaction only when a message needs it (compression.ahead_of_need: false)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    lines = json.loads(args.lines.read_text("utf-8"))
    results = asyncio.run(replay(args.base_url, args.window, lines, not args.off, ahead=not args.no_ahead))
    print("@result " + json.dumps({"lines": results, "gateway": gateway_package.__file__}), flush=True)


if __name__ == "__main__":
    main()
