"""Token-accounting benchmark (R-T1…R-T3) on the real corpus.

Per corpus: messages, exact tokens under o200k and cl100k, the chars/4 estimate and its error, and exact
counting throughput with a cold cache. Then the per-turn cost of keeping a session's total up to date with
``TokenLedger`` at 500 and at 5,000 messages (target ratio ≤ 1.5: O(new messages), not O(history)), next
to what a full recount would cost each turn.

    python -m bench.tokens [--turns N] [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.tokens import TokenCounter, TokenLedger, estimate_messages_tokens_rough
from bench.corpus import KINDS, corpus_dir, iter_transcripts

__all__ = ["main"]

SESSION_SIZES = (500, 5_000)
TARGET_RATIO = 1.5
Message = dict[str, Any]


@dataclass(frozen=True)
class CorpusRow:
    """Exact and rough counts of one sub-corpus."""

    kind: str
    transcripts: int
    messages: int
    o200k: int
    cl100k: int
    rough: int
    o200k_tokens_per_s: float
    cl100k_tokens_per_s: float
    per_message_error_pct: tuple[float, float, float] = (0.0, 0.0, 0.0)  # p5, median, p95

    @property
    def rough_error_pct(self) -> float:
        """How far chars/4 is from the exact o200k count (negative: it under-counts)."""
        return 100.0 * (self.rough - self.o200k) / self.o200k if self.o200k else 0.0


def _cold_count(encoding: str, messages: Sequence[Message]) -> tuple[int, float, TokenCounter]:
    """Exact total with a fresh (empty) cache, the seconds it took, and the now warm counter."""
    counter = TokenCounter(encoding, cache_size=len(messages) + 1)
    start = time.perf_counter()
    total = counter.count_messages(messages)
    return total, time.perf_counter() - start, counter


def _per_message_error(counter: TokenCounter, messages: Sequence[Message]) -> tuple[float, float, float]:
    """p5, median and p95 of chars/4's error per message (decisions are made on single messages too)."""
    errors = sorted(
        100.0 * (estimate_messages_tokens_rough([m]) - exact) / exact
        for m in messages
        if (exact := counter.count_message(m))
    )
    if not errors:
        return (0.0, 0.0, 0.0)
    return errors[len(errors) // 20], statistics.median(errors), errors[len(errors) * 19 // 20]


def measure_corpus(kind: str, transcripts: int, messages: Sequence[Message]) -> CorpusRow:
    """Counts and cold-cache throughput for one sub-corpus."""
    o200k, o200k_s, counter = _cold_count("o200k_base", messages)
    cl100k, cl100k_s, _ = _cold_count("cl100k_base", messages)
    return CorpusRow(
        kind=kind,
        transcripts=transcripts,
        messages=len(messages),
        o200k=o200k,
        cl100k=cl100k,
        rough=estimate_messages_tokens_rough(messages),
        o200k_tokens_per_s=o200k / o200k_s if o200k_s else 0.0,
        cl100k_tokens_per_s=cl100k / cl100k_s if cl100k_s else 0.0,
        per_message_error_pct=_per_message_error(counter, messages),
    )


@dataclass(frozen=True)
class TurnCost:
    """Per-turn accounting cost for one session size, in microseconds."""

    size: int
    ledger_us: float
    ledger_new_list_us: float
    recount_warm_us: float
    recount_cold_us: float


def _ledger_round(pool: Sequence[Message], size: int, turns: int, *, new_list: bool) -> float:
    """Median µs of one ``sync`` after adding a message to a session of ``size`` messages.

    ``new_list``: the caller builds a new list each turn (``[*history, message]``) instead of appending,
    which costs the ledger a C-level prefix comparison.
    """
    ledger = TokenLedger(TokenCounter(cache_size=size + turns + 1))
    session = list(pool[:size])
    ledger.sync(session)
    samples = []
    for message in pool[max(SESSION_SIZES) : max(SESSION_SIZES) + turns]:
        if new_list:
            session = [*session, message]
        else:
            session.append(message)
        start = time.perf_counter_ns()
        ledger.sync(session)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1_000


def measure_turns(pool: Sequence[Message], turns: int, rounds: int) -> list[TurnCost]:
    """Ledger cost per turn at each session size (median over rounds), and a full recount's cost."""
    per_size: dict[tuple[int, bool], list[float]] = {}
    for _ in range(rounds):  # interleave sizes so background load hits both alike
        for size in SESSION_SIZES:
            for new_list in (False, True):
                per_size.setdefault((size, new_list), []).append(
                    _ledger_round(pool, size, turns, new_list=new_list)
                )
    costs = []
    for size in SESSION_SIZES:
        session = pool[:size]
        warm = TokenCounter(cache_size=size + 1)
        warm.count_messages(session)
        start = time.perf_counter_ns()
        warm.count_messages(session)
        recount_warm = (time.perf_counter_ns() - start) / 1_000
        _, cold_s, _ = _cold_count("o200k_base", session)
        ledger_us = statistics.median(per_size[size, False])
        new_list_us = statistics.median(per_size[size, True])
        costs.append(TurnCost(size, ledger_us, new_list_us, recount_warm, cold_s * 1e6))
    return costs


def _synthetic_pool(n: int) -> list[Message]:
    """Agent-like messages for the per-turn benchmark when the corpus is absent."""
    pool: list[Message] = []
    for i in range(n):
        if i % 3 == 0:
            pool.append({"role": "user", "content": f"Step {i}: please run the tests for module_{i % 97}.py"})
        elif i % 3 == 1:
            call = {"id": f"call_{i}", "type": "function",
                    "function": {"name": "bash", "arguments": f'{{"command": "pytest -q tests/test_{i}.py"}}'}}
            pool.append({"role": "assistant", "content": "Running them now.", "tool_calls": [call]})
        else:
            pool.append({"role": "tool", "tool_call_id": f"call_{i - 1}",
                         "content": f"{i} passed, 0 failed in 0.{i % 10}s\n" * 5})
    return pool


def _corpus_table(rows: list[CorpusRow]) -> Table:
    table = Table(title="Exact vs rough token counts (rough = chars/4; error vs o200k)")
    for column in ("corpus", "transcripts", "messages", "o200k", "cl100k", "rough", "rough err",
                   "per-msg err p5 / p50 / p95", "o200k tok/s", "cl100k tok/s"):
        table.add_column(column, justify="left" if column == "corpus" else "right")
    for r in rows:
        table.add_row(r.kind, f"{r.transcripts:,}", f"{r.messages:,}", f"{r.o200k:,}", f"{r.cl100k:,}",
                      f"{r.rough:,}", f"{r.rough_error_pct:+.1f}%",
                      " / ".join(f"{e:+.0f}%" for e in r.per_message_error_pct),
                      f"{r.o200k_tokens_per_s / 1e6:.2f} M",
                      f"{r.cl100k_tokens_per_s / 1e6:.2f} M")
    if len(rows) > 1:
        total = CorpusRow("all", sum(r.transcripts for r in rows), sum(r.messages for r in rows),
                          sum(r.o200k for r in rows), sum(r.cl100k for r in rows), sum(r.rough for r in rows),
                          0.0, 0.0)
        table.add_row(total.kind, f"{total.transcripts:,}", f"{total.messages:,}", f"{total.o200k:,}",
                      f"{total.cl100k:,}", f"{total.rough:,}", f"{total.rough_error_pct:+.1f}%", "", "", "",
                      style="bold")
    return table


def _turn_table(costs: list[TurnCost], turns: int, source: str) -> Table:
    table = Table(title=f"Per-turn token accounting, one new message per turn ({turns} turns, {source})")
    for column in ("session size", "TokenLedger µs/turn (append)", "TokenLedger µs/turn (new list)",
                   "full recount µs (warm cache)", "full recount µs (cold)"):
        table.add_column(column, justify="right")
    for c in costs:
        table.add_row(f"{c.size:,}", f"{c.ledger_us:,.1f}", f"{c.ledger_new_list_us:,.1f}",
                      f"{c.recount_warm_us:,.0f}", f"{c.recount_cold_us:,.0f}")
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print its tables; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m bench.tokens", description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=300, help="new messages appended per measured round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per session size (median reported)")
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:  # piped output (make bench, CI logs): do not squeeze columns to 80
        console = Console(width=150)
    started = time.perf_counter()
    root = corpus_dir()
    rows: list[CorpusRow] = []
    pool: list[Message] = []
    for kind in KINDS if root else ():
        transcripts = list(iter_transcripts(root, [kind]))
        messages = [m for t in transcripts for m in t.messages]
        pool.extend(messages)
        if messages:
            rows.append(measure_corpus(kind, len(transcripts), messages))
    if rows:
        console.print(_corpus_table(rows))
    else:
        console.print("[yellow]corpus not found (set CONCORD_CORPUS_DIR); per-turn figures use synthetic "
                      "messages[/yellow]")
    needed = max(SESSION_SIZES) + args.turns
    source = "corpus messages" if len(pool) >= needed else "synthetic messages"
    if len(pool) < needed:
        pool = _synthetic_pool(needed)
    costs = measure_turns(pool, args.turns, args.rounds)
    console.print(_turn_table(costs, args.turns, source))
    small, large = costs[0], costs[-1]
    ratio = large.ledger_us / small.ledger_us if small.ledger_us else float("inf")
    verdict = "[green]within target[/green]" if ratio <= TARGET_RATIO else "[red]over target[/red]"
    new_list_ratio = large.ledger_new_list_us / small.ledger_new_list_us if small.ledger_new_list_us else 0.0
    console.print(
        f"Ledger cost ratio {large.size:,} vs {small.size:,} messages (append): [bold]{ratio:.2f}[/bold] "
        f"(target ≤ {TARGET_RATIO}) {verdict}; with a new list each turn: {new_list_ratio:.2f}. "
        f"A warm full recount at {large.size:,} costs {large.recount_warm_us / large.ledger_us:,.0f}× a ledger turn."
    )
    console.print(f"bench.tokens finished in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
