"""A long real conversation through the gateway: who waits for a summary, and what the prompt cache saves.

    python -m bench.conversation [--corpus locomo:0] [--lines N] [--windows 8192,32768,200000]
                                 [--summary-seconds 5] [--quick] [--baseline GITREF]

Each line of the conversation (LoCoMo conversation 0 by default, 419 lines, from ``$CONCORD_CORPUS_DIR``) is one
message through Concord's gateway — built as ``concord run`` builds it, in a process of its own
(`bench/_conversation_replay.py`) — to Claude on the native Anthropic API at a loopback server
(`bench/_conversation_server.py`) that answers at once and takes a fixed 5 s per summary call. Concord is told the
window; it sends its ``cache_control`` markers as it would to Anthropic.

**The clock.** Messages arrive at least 10 s apart in simulated time, without taking 419 × 10 s: the next line
is sent once its predecessor was answered and the server has then seen no request for ``--idle`` seconds (so a
summary started after an answer — 5 s, under the 10 s gap — has ended, as it would have before a user's next
message). Every request carries the line it arrived during, and its simulated time is 10 s per line: the
5-minute cache lifetime is counted in that time. A turn **waited for a summary** when a summary call arrived
after its message was sent and before its first answer token. **Time to first answer token** is from sending a
message to the first streamed text of its answer, compared with the same gateway, conversation and server with
compaction off (``compression.enabled: false``) at the largest window, where the whole conversation fits (it
is checked: "—" where it did not).

**The cache and the bill** are the server's (`bench/_prompt_cache.py`: Anthropic's rules — breakpoints, a
20-block lookback, 5 minutes — and prices: input $3/M, cache read $0.30/M, cache write $3.75/M, output $15/M),
computed from the requests it received, summary calls included: the code under test reports none of it.
Printed per window: turns that waited, first-token p50 / p99 (× without compaction), summary calls,
compactions (a new summary in the requests), the share of prompt tokens read from the cache overall (and the
share a marker-free cache could reuse: the longest prefix an earlier request sent), on the first request after
each compaction the read share and how many read the whole stable prefix (tool definitions and system prompt),
how many different system prompts the chat requests carried, the most breakpoints a request had, and $ per
1,000 turns (of which summary calls), then where those dollars go (cache reads, cache writes, uncached input,
output), in all and for the chat requests and the summary calls apart.

``--baseline GITREF`` runs the same against that revision, checked out in a temporary git worktree (its
gateway, the same benchmark), and prints both side by side. The default run takes about 5 minutes on two
cores (10 with ``--baseline``), most of it the summary calls' 5 s; ``--quick`` makes them 0.5 s (the
first-token figures then show 0.5 s waits instead of 5 s ones; the rest is unchanged).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench._conversation_server import ConversationServer, Received
from bench._prompt_cache import MAX_BREAKPOINTS, PRICES, Billed
from bench._window_server import summary_marker
from bench.compress import REPO_ROOT, baseline_checkout
from bench.windows import load_lines

__all__ = ["Figures", "figures", "main", "replay"]

WINDOWS = (8_192, 32_768, 200_000)
_BENCH = Path(__file__).resolve().parent
_REVISION, _REPLAY = _BENCH / "_revision.py", _BENCH / "_conversation_replay.py"


@dataclass(frozen=True)
class Figures:
    """What one replay measured (times in seconds)."""

    window: int
    compaction: bool
    lines: int
    answered: int
    refused: int
    waited: int
    first_token_p50: float
    first_token_p99: float
    summaries: int
    compactions: int
    read_share: float
    prefix_share: float
    first_after_share: float | None
    stable_read: int
    system_prompts: int
    max_breakpoints: int
    dollars_per_1000: float
    summary_dollars_per_1000: float
    # Where the dollars go, per 1,000 turns: cache reads, cache writes, uncached input, output — of every request,
    # and of the summary calls alone (the chat requests' share is the difference).
    split_per_1000: tuple[float, float, float, float]
    summary_split_per_1000: tuple[float, float, float, float]
    seconds: float

    @property
    def fits(self) -> bool:
        """Every line answered, no request refused and no summary made (with compaction off, Concord still
        compacts what would not fit): a fair reference for first-token times."""
        return self.answered == self.lines and self.refused == 0 and self.summaries == 0


def _p(values: Sequence[float], q: int) -> float:
    """The q-th percentile."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def figures(received: Sequence[Received], lines: Sequence[dict[str, float | bool]], window: int, compaction: bool,
            seconds: float) -> Figures:
    """The figures of one replay from the server's requests and the replay's per-line times."""
    billed = [r.bill for r in received if r.bill is not None]
    summary_bills = [r.bill for r in received if r.kind == "summary" and r.bill is not None]
    chats = [r for r in received if r.kind == "chat" and r.bill is not None]
    summaries = [r for r in received if r.kind == "summary"]
    waited = sum(1 for n, times in enumerate(lines)
                 if any(s.line == n and times["sent"] <= s.at <= times["first"] for s in summaries))
    first_token = [float(t["first"]) - float(t["sent"]) for t in lines]
    markers = [summary_marker(r.body.get("messages") or []) for r in chats]
    # The first request after a compaction is the first to carry a new summary.
    after = [r.bill for r, marker, previous in zip(chats, markers, ["", *markers], strict=False)
             if marker and marker != previous and r.bill is not None]
    prompt = sum(b.prompt for b in billed) or 1
    return Figures(
        window=window, compaction=compaction, lines=len(lines), answered=sum(bool(t["answered"]) for t in lines),
        refused=len(received) - len(billed), waited=waited, first_token_p50=_p(first_token, 50),
        first_token_p99=_p(first_token, 99), summaries=len(summaries), compactions=len(after),
        read_share=sum(b.read for b in billed) / prompt, prefix_share=sum(b.common_prefix for b in billed) / prompt,
        first_after_share=statistics.fmean(b.read / b.prompt for b in after) if after else None,
        stable_read=sum(1 for b in after if b.read >= b.stable),
        system_prompts=len({json.dumps(r.body.get("system"), sort_keys=True) for r in chats}),
        max_breakpoints=max((b.breakpoints for b in billed), default=0),
        dollars_per_1000=_per_1000(billed, len(lines)),
        summary_dollars_per_1000=_per_1000(summary_bills, len(lines)), split_per_1000=_split(billed, len(lines)),
        summary_split_per_1000=_split(summary_bills, len(lines)), seconds=seconds)


def _per_1000(bills: Sequence[Billed], turns: int) -> float:
    """Dollars per 1,000 turns."""
    return sum(b.dollars(PRICES) for b in bills) / max(turns, 1) * 1000


def _split(bills: Sequence[Billed], turns: int) -> tuple[float, float, float, float]:
    """Dollars per 1,000 turns for cache reads, cache writes, uncached input and output."""
    scale = 1000 / max(turns, 1) / 1e6
    return (sum(b.read for b in bills) * PRICES.cache_read * scale, sum(b.written for b in bills) * PRICES.cache_write
            * scale, sum(b.uncached for b in bills) * PRICES.input * scale, sum(b.output for b in bills)
            * PRICES.output * scale)


async def replay(root: Path, lines: Sequence[str], window: int, *, compaction: bool, summary_seconds: float,
                 idle_s: float, ahead: bool = True) -> Figures:
    """Replay ``lines`` through ``root``'s gateway against a fresh server serving ``window`` tokens (``ahead=False``:
    with compaction ahead of need turned off)."""
    server = await ConversationServer(window, summary_seconds).start()
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="concord-bench-conversation-") as tmp:
            listing = Path(tmp) / "lines.json"
            listing.write_text(json.dumps(list(lines)), "utf-8")
            command = [sys.executable, str(_REVISION), str(root), str(_REPLAY), "--base-url", server.base_url,
                       "--window", str(window), "--lines", str(listing), *([] if compaction else ["--off"]),
                       *([] if ahead else ["--no-ahead"])]
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            child = await asyncio.create_subprocess_exec(*command, cwd=root, env=env, stdin=asyncio.subprocess.PIPE,
                                                         stdout=asyncio.subprocess.PIPE)
            result = await _serve(child, server, idle_s)
            if await child.wait() != 0 or result is None:
                raise RuntimeError(f"the replay against {root} at {window:,} tokens failed (exit {child.returncode})")
    finally:
        await server.stop()
    if not str(result["gateway"]).startswith(str(root)):
        raise RuntimeError(f"the replay for {root} imported another checkout's gateway ({result['gateway']})")
    return figures(server.received, result["lines"], window, compaction, time.perf_counter() - started)


async def _serve(child: asyncio.subprocess.Process, server: ConversationServer, idle_s: float) -> dict | None:
    """Answer the replay's protocol lines (see `bench/_conversation_replay.py`) until its result."""
    assert child.stdin is not None and child.stdout is not None
    async for raw in child.stdout:
        line = raw.decode().strip()
        if line.startswith("@line "):
            server.line = int(line.split()[1])
        elif line == "@quiet":
            await server.quiet(idle_s)
        elif line.startswith("@result "):
            return json.loads(line.removeprefix("@result "))
        else:
            continue
        child.stdin.write(b"ok\n")
        await child.stdin.drain()
    return None


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _row(f: Figures, label: str, reference: Figures | None) -> str:
    ratio = f" (×{f.first_token_p99 / reference.first_token_p99:.2f})" \
        if reference is not None and reference.fits and reference.first_token_p99 > 0 else ""
    return (f"| {f.window:,} | {label} | {f.answered}/{f.lines} | {f.refused} | {f.waited} ({f.waited / f.lines:.1%}) "
            f"| {f.first_token_p50 * 1000:,.0f} / {f.first_token_p99 * 1000:,.0f} ms{ratio} | {f.summaries} "
            f"| {f.compactions} | {f.read_share:.0%} ({f.prefix_share:.0%}) | {_share(f.first_after_share)}, "
            f"{f.stable_read}/{f.compactions} | {f.system_prompts} | {f.max_breakpoints} "
            f"| ${f.dollars_per_1000:.2f} (${f.summary_dollars_per_1000:.2f}) | {f.seconds:.0f} s |")


HEADER = ("| window | revision | answered | refused (over the window) | turns that waited for a summary "
          "| first token p50 / p99 (p99 × no compaction) | summary calls | compactions "
          "| cache read share (marker-free prefix) | first request after a compaction: read share, whole stable "
          "prefix read | system prompts | most breakpoints | $ / 1,000 turns (of which summary calls) | time |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


async def _run(revisions: Sequence[tuple[str, Path]], lines: Sequence[str], windows: Sequence[int],
               summary_seconds: float, idle_s: float) -> dict[str, list[Figures]]:
    results: dict[str, list[Figures]] = {label: [] for label, _ in revisions}
    for label, root in revisions:
        reference = await replay(root, lines, max(windows), compaction=False, summary_seconds=summary_seconds,
                                 idle_s=idle_s)
        fits = "fits" if reference.fits else "does NOT fit (no reference)"
        print(f"  {label}: without compaction at {reference.window:,} tokens ({fits}): {reference.answered}/"
              f"{reference.lines} answered, first token p50 / p99 {reference.first_token_p50 * 1000:,.0f} / "
              f"{reference.first_token_p99 * 1000:,.0f} ms, ${reference.dollars_per_1000:.2f} / 1,000 turns",
              flush=True)
        results[label].append(reference)
    print(HEADER)
    for window in windows:
        for label, root in revisions:
            result = await replay(root, lines, window, compaction=True, summary_seconds=summary_seconds,
                                  idle_s=idle_s)
            results[label].append(result)
            print(_row(result, label, results[label][0]), flush=True)
    return results


def _dollars(split: Sequence[float]) -> str:
    read, write, uncached, output = split
    return (f"cache reads ${read:.2f} + cache writes ${write:.2f} + uncached input ${uncached:.2f} "
            f"+ output ${output:.2f}")


def _summary(results: dict[str, list[Figures]]) -> None:
    for label, runs in results.items():
        for f in runs[1:]:
            chat = [a - b for a, b in zip(f.split_per_1000, f.summary_split_per_1000, strict=True)]
            print(f"  {label} at {f.window:,}: $ / 1,000 turns = {_dollars(f.split_per_1000)}\n"
                  f"    chat requests ${sum(chat):.2f} = {_dollars(chat)}\n"
                  f"    summary calls ${sum(f.summary_split_per_1000):.2f} = {_dollars(f.summary_split_per_1000)}")
    if len(results) < 2:
        return
    (new_label, new), (old_label, old) = list(results.items())[:2]
    for a, b in zip(new[1:], old[1:], strict=True):
        change = a.dollars_per_1000 / b.dollars_per_1000 - 1 if b.dollars_per_1000 else 0.0
        print(f"  {a.window:,}: $ / 1,000 turns {new_label} ${a.dollars_per_1000:.2f} vs {old_label} "
              f"${b.dollars_per_1000:.2f} ({change:+.0%}); turns that waited {a.waited} vs {b.waited}; cache read "
              f"share {a.read_share:.0%} vs {b.read_share:.0%}")


def main(argv: Sequence[str] | None = None) -> int:
    """Replay the conversation at each window (and without compaction) and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.conversation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default="locomo:0", help="as bench.windows takes it (default locomo:0)")
    parser.add_argument("--lines", type=int, default=None, help="replay only the first N lines (default: all)")
    parser.add_argument("--windows", default=",".join(map(str, WINDOWS)), help="comma-separated windows in tokens")
    parser.add_argument("--summary-seconds", type=float, default=5.0, help="how long a summary call takes (5)")
    parser.add_argument("--quick", action="store_true", help="summary calls take 0.5 s")
    parser.add_argument("--idle", type=float, default=0.05, help="idle seconds that end the gap between messages")
    parser.add_argument("--baseline", metavar="GITREF", help="also run that revision and print both")
    opts = parser.parse_args(argv if argv is not None else sys.argv[1:])
    lines = load_lines(opts.corpus, opts.lines)
    windows = [int(w) for w in opts.windows.split(",")]
    seconds = 0.5 if opts.quick else opts.summary_seconds
    logging.basicConfig(level=logging.ERROR)
    print(f"bench.conversation: {opts.corpus}, {len(lines)} lines through the gateway (SQLite), Claude on the "
          f"Anthropic API at a loopback server; summary calls take {seconds:g} s; messages ≥ 10 s apart "
          f"(simulated); breakpoints allowed: {MAX_BREAKPOINTS}")
    if opts.baseline:
        with baseline_checkout(opts.baseline) as old_root:
            results = asyncio.run(_run([("this", REPO_ROOT), (opts.baseline, old_root)], lines, windows, seconds,
                                       opts.idle))
    else:
        results = asyncio.run(_run([("this", REPO_ROOT)], lines, windows, seconds, opts.idle))
    _summary(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
