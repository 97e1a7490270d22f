"""Every window: a real long conversation replayed through the gateway against servers of 4K to 200K tokens.

    python -m bench.windows [--corpus locomo:1] [--lines N] [--windows 4096,8192,...] [--servers enforce,truncate]

Each line of the conversation is one message, sent when the previous one was answered, through the same path
``concord run`` takes — `build_runtime`, `Gateway`, the router, hygiene, the agent loop, compression and the
SQLite store — in this process, with an adapter that hands over one line at a time and keeps the answers
(the console adapter would only add its stdin thread; in-process, the benchmark can pace the lines and know
which line each request belongs to). The model server is `bench._window_server`: it counts every prompt
itself with tiktoken and either refuses what does not fit (vLLM's 400) or truncates it silently (Ollama);
Concord is told nothing about the window (``llm.model: local``, no ``llm.context_length``) and must find it.

Printed per window and server: lines answered (not a warning), requests over the window (the server's own
count: prompt + max_tokens), turns that waited for a summary call (by the server's clock: a summary call
ended after the line was sent and before the line's first chat request came), summary calls and how many were
used (their marker reached a later request),
turns between compactions (median), mean / max prompt share of the window, replies cut by ``max_tokens``
and how many of them reached the user without a word about it, and live messages clipped although they fit
(at most half the window).

Pacing: by default each line is sent as soon as the previous one is answered and summaries answer at once.
``--summary-seconds S`` makes every summary call take S seconds (a small local model takes 20-35 s for 1K
tokens), ``--gap G`` waits G seconds after each answer before the next line (people do not answer at once), and
``--ahead on,off`` runs each window with compaction ahead of need (``compression.ahead_of_need``) and without
— the same code, so the waits can be compared in one run.

Corpora (from the corpus folder, ``$CONCORD_CORPUS_DIR``; ``a+b`` replays one after the other): ``locomo:N`` (LoCoMo conversation
N, "Speaker: text" per line; default conversation 1, 369 lines), ``irc:NAME`` (an IRC log, "nick: text"),
``claude_code:N`` (the user's messages of a Claude Code session), ``miniswe:NAME`` (a mini-swe-agent task and
its command outputs pasted as messages — up to 151,582 characters each, for the large windows). The default
run (369 lines × 6 windows × 2 servers) takes a few minutes on two cores; ``--lines`` goes shorter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from adapters.base import ChatRef, Inbound
from bench._window_server import Call, WindowServer
from bench.corpus import corpus_dir, load_claude_code, load_irc, load_locomo, load_miniswe
from bench.gateway import SilentAdapter
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.config import load_settings

__all__ = ["Figures", "main", "replay"]

WINDOWS = (4_096, 8_192, 16_384, 32_768, 131_072, 200_000)
SERVERS = ("enforce", "truncate")
_CUT_WORDS = ("cut off", "cut short", "length limit")


class PacedAdapter(SilentAdapter):
    """Hands the gateway one message at a time and keeps what it sends back."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[str] = []
        self._ids = itertools.count(1)

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        self.replies.append(text)

    async def say(self, text: str) -> str:
        """Send one line and return everything the gateway answered to it."""
        assert self._handler is not None
        before = len(self.replies)
        await self._handler(Inbound(platform="discord", chat_id="bench", chat_type="dm", thread_id=None,
                                    user_id="u1", user_name="Reader", message_id=str(next(self._ids)), text=text))
        return "\n".join(self.replies[before:])


@dataclass(frozen=True)
class Figures:
    """What one replay measured."""

    window: int
    server: str
    lines: int
    answered: int
    over: int
    summaries: int
    summaries_used: int
    turns_between: float | None
    compactions: int
    mean_share: float
    max_share: float
    cut: int
    cut_silently: int
    live_clipped: int
    found: str
    seconds: float
    ahead: bool = True
    waited: int = 0


def load_lines(spec: str, limit: int | None) -> list[str]:
    """The conversation ``spec`` names (``a+b`` for one after the other), one message per line."""
    lines = [line for part in spec.split("+") for line in _corpus_lines(part)]
    return lines[:limit] if limit else lines


def _corpus_lines(spec: str) -> list[str]:
    root = corpus_dir()
    if root is None:
        raise SystemExit("bench.windows needs the corpus: set CONCORD_CORPUS_DIR")
    kind, _, which = spec.partition(":")
    if kind == "locomo":
        [path] = list(root.glob("*locomo*/*.json"))
        transcript = load_locomo(path)[int(which or 1)]
        lines = [f"{m['name']}: {m['content']}" for m in transcript.messages if m["role"] == "user"]
    elif kind == "irc":
        paths = sorted(root.glob(f"*irc*/**/*{which}*.raw.txt")) or sorted(root.glob(f"*irc*/**/*{which}*.ascii.txt"))
        if not paths:
            raise SystemExit(f"no IRC log matches {which!r}")
        lines = [f"{m['name']}: {m['content']}" for m in load_irc(paths[0])[0].messages if m["content"].strip()]
    elif kind == "claude_code":
        paths = sorted(root.glob("*claude-code*/**/*.jsonl"))
        transcript = load_claude_code(paths[int(which or 0)])[0]
        lines = [m["content"] for m in transcript.messages if m["role"] == "user" and isinstance(m["content"], str)
                 and m["content"].strip()]
    elif kind == "miniswe":
        # The task and every command output, as if the user pasted them: long messages, up to 151,582
        # characters (django__django-15629's last one).
        paths = sorted(root.glob(f"*miniswe*/**/*{which}*.traj.json"))
        if not paths:
            raise SystemExit(f"no mini-swe-agent trajectory matches {which!r}")
        lines = [str(m["content"]) for m in load_miniswe(paths[0])[0].messages
                 if m["role"] in ("user", "tool") and str(m.get("content") or "").strip()]
    else:
        raise SystemExit(f"unknown corpus {spec!r} (locomo:N, irc:NAME, claude_code:N, miniswe:NAME)")
    return lines


@contextlib.asynccontextmanager
async def _gateway(server: WindowServer, data_dir: Path, ahead: bool) -> AsyncIterator[tuple[Gateway, PacedAdapter]]:
    settings = load_settings(llm={"base_url": server.base_url, "model": "local"},
                             storage={"data_dir": str(data_dir)}, gateway={"sweep_cron": None},
                             memory={"directory": str(data_dir / "memory")},
                             compression={"ahead_of_need": ahead})
    adapter = PacedAdapter()
    gateway = Gateway(await build_runtime(settings), [adapter])
    await gateway.start()
    try:
        yield gateway, adapter
    finally:
        await gateway.aclose(grace_seconds=5)


async def replay(lines: Sequence[str], window: int, mode: str, *, ahead: bool = True, gap_s: float = 0.0,
                 summary_s: float = 0.0) -> Figures:
    """Replay ``lines`` against a ``mode`` server serving ``window`` tokens, each line ``gap_s`` after the
    previous answer, every summary call taking ``summary_s``; ``ahead``: compaction ahead of need on."""
    server = await WindowServer(window, mode, summary_seconds=summary_s).start()
    answered = cut_silently = 0
    sent_at: list[float] = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="concord-windows-") as tmp:
            async with _gateway(server, Path(tmp), ahead) as (gateway, adapter):
                found = gateway.rt.window.describe() if gateway.rt.window is not None else "?"
                for number, line in enumerate(lines):
                    if number and gap_s:
                        await asyncio.sleep(gap_s)
                    server.line = number
                    seen = len(server.calls)
                    sent_at.append(time.monotonic())
                    reply = await adapter.say(line)
                    answered += bool(reply) and not reply.startswith("⚠️")
                    cut = any(c.kind == "chat" and c.finish_reason == "length" for c in server.calls[seen:])
                    cut_silently += cut and not any(word in reply for word in _CUT_WORDS)
    finally:
        await server.stop()
    figures = _figures(server, lines, window, mode, answered, cut_silently, found, time.perf_counter() - started)
    return dataclasses.replace(figures, ahead=ahead, waited=waited_turns(server.calls, sent_at))


def waited_turns(calls: Sequence[Call], sent_at: Sequence[float]) -> int:
    """Lines whose first chat request came after a summary call that ended while the line was waiting: the
    server's own clock says a turn waited for a summary (one that ran beside it, in the background, does not
    end before the turn's request)."""
    first_chat: dict[int, float] = {}
    for call in calls:
        if call.kind == "chat":
            first_chat.setdefault(call.line, call.started)
    ends = [c.ended for c in calls if c.kind == "summary"]
    return sum(1 for line, asked in first_chat.items()
               if any(sent_at[line] < end <= asked for end in ends))


def _figures(server: WindowServer, lines: Sequence[str], window: int, mode: str, answered: int, cut_silently: int,
             found: str, seconds: float) -> Figures:
    calls = server.calls
    chats = [c for c in calls if c.kind == "chat" and c.outcome != "rejected"]
    summaries = [c for c in calls if c.kind == "summary"]  # made (a refused one is made, and never used)
    # Used: its marker reached a later request — a chat request's handoff, or the next summary it was updated by.
    used = {c.summary_seen for c in chats} | {m for c in summaries for m in c.summary_seen.split()}
    # A compaction shows as a new handoff summary in the next request; count the lines between them.
    starts = [c.line for previous, c in itertools.pairwise(chats) if c.summary_seen != previous.summary_seen]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    shares = [c.prompt_tokens / window for c in chats]
    # A line that takes at most half the window fits beside everything else a request carries; clipping it
    # would be the fault. (Longer ones must be clipped, with a note, at small windows.)
    fits = {n for n, line in enumerate(lines) if server.count([{"role": "user", "content": line}], None) <= window // 2}
    live_clipped = sum(1 for c in chats if c.line in fits and c.live_text and c.live_text != lines[c.line])
    return Figures(
        window=window, server=mode, lines=len(lines), answered=answered, over=sum(c.over for c in calls),
        summaries=len(summaries), summaries_used=sum(c.marker in used for c in summaries),
        turns_between=statistics.median(gaps) if gaps else None, compactions=len(starts),
        mean_share=statistics.fmean(shares) if shares else 0.0, max_share=max(shares, default=0.0),
        cut=sum(c.finish_reason == "length" for c in chats), cut_silently=cut_silently, live_clipped=live_clipped,
        found=found, seconds=seconds)


def _row(f: Figures) -> str:
    between = "—" if f.turns_between is None else f"{f.turns_between:g}"
    return (f"| {f.window:,} | {f.server} | {'on' if f.ahead else 'off'} | {f.answered}/{f.lines} | {f.over} "
            f"| {f.waited} ({f.waited / max(1, f.lines):.1%}) | {f.summaries} / {f.summaries_used} "
            f"| {f.compactions} | {between} | {f.mean_share:.0%} / {f.max_share:.0%} | {f.cut} / {f.cut_silently} "
            f"| {f.live_clipped} | {f.seconds:.0f} s |")


HEADER = ("| window | server | ahead of need | lines answered | requests over the window | turns that waited for a "
          "summary | summary calls / used | compactions | turns between compactions (median) | prompt share of the "
          "window, mean / max | replies cut / silently | live messages clipped | time |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def main(argv: Sequence[str] | None = None) -> int:
    """Replay the conversation at every window against both servers and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.windows", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="locomo:1", help="locomo:N, irc:NAME or claude_code:N (default locomo:1)")
    parser.add_argument("--lines", type=int, default=None, help="replay only the first N lines (default: all)")
    parser.add_argument("--windows", default=",".join(map(str, WINDOWS)), help="comma-separated windows in tokens")
    parser.add_argument("--servers", default=",".join(SERVERS), help="enforce, truncate or both")
    parser.add_argument("--ahead", default="on", help="compaction ahead of need: on, off or on,off")
    parser.add_argument("--gap", type=float, default=0.0, help="seconds between an answer and the next line")
    parser.add_argument("--summary-seconds", type=float, default=0.0, help="seconds each summary call takes")
    opts = parser.parse_args(argv if argv is not None else sys.argv[1:])
    lines = load_lines(opts.corpus, opts.lines)
    logging.basicConfig(level=logging.ERROR)
    print(f"bench.windows: {opts.corpus}, {len(lines)} lines, through the gateway (SQLite, in-process); "
          f"{opts.gap:g} s between an answer and the next line, {opts.summary_seconds:g} s per summary call")
    print(HEADER)
    figures: list[Figures] = []
    for window in (int(w) for w in opts.windows.split(",")):
        for mode in opts.servers.split(","):
            for ahead in opts.ahead.split(","):
                result = asyncio.run(replay(lines, window, mode, ahead=ahead == "on", gap_s=opts.gap,
                                            summary_s=opts.summary_seconds))
                figures.append(result)
                print(_row(result), flush=True)
    for f in figures:
        print(f"  {f.window:,} / {f.server}: Concord's window at start-up: {f.found}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
