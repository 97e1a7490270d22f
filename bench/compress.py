"""Compression pipeline speed and ratio on the real corpus, without the LLM call (static summary).

    python -m bench.compress            # all corpus transcripts + growth 1K → 10K → 100K messages
    python -m bench.compress --quick    # growth up to 10K messages only

Figures:
- per corpus: transcripts, compressed count, tokens before → after, ratio, and pipeline time in ms per 100K
  tokens, cold (first sight of every message: tiktoken runs) and warm (the agent's ledger has already counted
  the messages, the normal case in a live session). Target: warm ≤ 50 ms per 100K tokens.
- growth: one compression of synthetic sessions of 1K, 10K, 100K messages (tau-bench trajectories chained);
  target: 10× messages → ≤ 11× time.
Each transcript is compressed with the window set to its own size, as the corpus tests do.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.tokens import TokenCounter, get_counter
from bench.corpus import Transcript, load_all

__all__ = ["main", "run_corpus", "run_growth", "synthetic_session"]

Messages = list[dict[str, Any]]


def _compressor(context_length: int) -> ContextCompressor:
    return ContextCompressor(context_length=context_length, summary_provider=None)


def _time_once(messages: Messages, context_length: int) -> tuple[float, Any]:
    compressor = _compressor(context_length)
    start = time.perf_counter()
    result = asyncio.run(compressor.compress(messages, force=True))
    return time.perf_counter() - start, result


def _fresh_counter_cache(counter: TokenCounter) -> None:
    # The counter is process-wide; "cold" means none of these messages was counted before.
    counter._cache.clear()


def run_corpus(transcripts: Sequence[Transcript]) -> dict[str, dict[str, float]]:
    """Compress every transcript twice (cold, warm); return per-corpus aggregates."""
    counter = get_counter()
    rows: dict[str, list[tuple[int, int, bool, float, float]]] = defaultdict(list)
    for transcript in transcripts:
        window = max(counter.count_messages(transcript.messages), 4_000)
        _fresh_counter_cache(counter)
        cold, _ = _time_once(transcript.messages, window)
        warm, result = _time_once(transcript.messages, window)
        rows[transcript.corpus].append((result.tokens_before, result.tokens_after, result.compressed, cold, warm))
    summary: dict[str, dict[str, float]] = {}
    for corpus, items in sorted(rows.items()):
        before = sum(r[0] for r in items)
        after = sum(r[1] for r in items)
        summary[corpus] = {
            "transcripts": len(items),
            "compressed": sum(r[2] for r in items),
            "tokens_before": before,
            "tokens_after": after,
            "ratio": after / before if before else 1.0,
            "cold_ms_per_100k": sum(r[3] for r in items) * 1000 / before * 100_000,
            "warm_ms_per_100k": sum(r[4] for r in items) * 1000 / before * 100_000,
            "warm_ms_max_transcript": max(r[4] for r in items) * 1000,
        }
    return summary


def synthetic_session(trajectories: Sequence[Transcript], size: int) -> Messages:
    """``size`` messages: one system prompt, then tau-bench conversations chained with unique call ids."""
    messages: Messages = [trajectories[0].messages[0]]
    round_ = 0
    while len(messages) < size:
        for transcript in trajectories:
            tag = f"r{round_}_{transcript.name}_"
            for message in transcript.messages[1:]:
                copy = dict(message)
                if copy.get("tool_call_id"):
                    copy["tool_call_id"] = tag + str(copy["tool_call_id"])
                if copy.get("tool_calls"):
                    copy["tool_calls"] = [{**c, "id": tag + str(c["id"])} for c in copy["tool_calls"]]
                messages.append(copy)
            if len(messages) >= size:
                break
        round_ += 1
    # End on a complete turn: a user ask, so the live request is well defined.
    return [*messages[:size], {"role": "user", "content": "Thanks — one more question about my booking."}]


def run_growth(trajectories: Sequence[Transcript], sizes: Sequence[int]) -> list[tuple[int, int, float]]:
    """(messages, tokens, warm seconds) of one compression per size, median of 3 warm runs."""
    counter = get_counter()
    out = []
    for size in sizes:
        session = synthetic_session(trajectories, size)
        tokens = counter.count_messages(session)
        runs = [_time_once(session, 200_000)[0] for _ in range(3)]
        out.append((len(session), tokens, statistics.median(runs)))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Print the corpus table and the growth figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.compress")
    parser.add_argument("--quick", action="store_true", help="growth up to 10K messages only")
    args = parser.parse_args(argv)
    transcripts = load_all()
    print("corpus        n  compressed  tokens before → after   ratio  cold ms/100K  warm ms/100K  warm max ms")
    for corpus, row in run_corpus(transcripts).items():
        print(f"{corpus:<12}{row['transcripts']:>4}{row['compressed']:>11}  {row['tokens_before']:>13,.0f} → "
              f"{row['tokens_after']:>9,.0f}  {row['ratio']:>6.2f}  {row['cold_ms_per_100k']:>12.1f}  "
              f"{row['warm_ms_per_100k']:>12.1f}  {row['warm_ms_max_transcript']:>11.1f}")
    tau = [t for t in transcripts if t.corpus == "tau_bench"]
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    growth = run_growth(tau, sizes)
    print("\ngrowth (warm, median of 3)   messages       tokens      ms   ms/100K tokens")
    for messages, tokens, seconds in growth:
        print(f"{'':<29}{messages:>8,}{tokens:>13,}{seconds * 1000:>8.0f}{seconds * 1e8 / tokens:>14.1f}")
    for (m1, _, s1), (m2, _, s2) in itertools.pairwise(growth):
        print(f"{m1:,} → {m2:,} messages ({m2 / m1:.0f}×): time ×{s2 / s1:.2f} (target ≤ 11×)")


if __name__ == "__main__":
    main()
