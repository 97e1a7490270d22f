"""How long ``search_history`` and ``read_history`` take on a very large session, on SQLite and PostgreSQL.

    python -m bench.recall_latency                     # SQLite, and PostgreSQL when a URL is set
    python -m bench.recall_latency --postgres URL --messages 20000 --calls 60

The session is built through the real store from the corpus (``bench.corpus``): 20,000 messages of the
agent transcripts, chat logs and LoCoMo dialogues in their order, compacted every 2,000 messages the way the
gateway does it (summary + 20-message verbatim tail, every replaced row archived), with one 1 MiB message —
real tool outputs of the agent transcripts pasted together, like a pasted diff or log — in the middle. Each
call goes through the tools' own handlers (scope lookup, search or read, redaction, formatting), as the agent
calls them. Call kinds, their arguments picked from the stored messages (never from search results):

- search words: two words of 5+ letters of a stored message;
- search question: a LoCoMo question as asked (all-words rarely matches: the any-word path);
- search fragment: an exact fragment with punctuation (a path, a ``key: value``): the substring path;
- search in 1 MiB: words of the 1 MiB message (it is a hit; its snippet is cut from it);
- read message: ``read_history`` of a stored message, with one neighbour each side;
- read 1 MiB: ``read_history`` of the 1 MiB message at offset 0 and at a random offset.

Prints p50 / p95 per backend and call kind, and the ratio of p95 to the 50 ms target.
PostgreSQL comes from ``--postgres``, ``CONCORD_BENCH_POSTGRES_URL`` or ``CONCORD_TEST_POSTGRES_URL``; a
private database is created there and dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from agent.compression.messages import plain_text
from bench.corpus import iter_transcripts
from bench.scratch_db import bench_databases
from gateway.conversation.history import read_history_tool
from gateway.conversation.recall import recall_tool
from gateway.store import Store
from gateway.store.models import MessageRow

__all__ = ["SessionPlan", "main", "plan_session"]

TARGET_MS = 50.0
BIG_CHARS = 1 << 20
COMPACT_EVERY = 2_000
TAIL = 20
BATCH = 200
_WORD = re.compile(r"(?<![\w])[A-Za-z]{5,}(?![\w])")
_FRAGMENT = re.compile(r"[\w.-]+/[\w./-]+\.\w+|\b\w+: [\w.-]{3,}")
Message = dict[str, Any]


@dataclass
class SessionPlan:
    """The messages to store (the 1 MiB one at ``big_index``) and the LoCoMo questions met on the way."""

    messages: list[Message]
    big_index: int
    questions: list[str]


def _big_message(transcripts: Sequence[Any]) -> Message:
    parts: list[str] = []
    size = 0
    for transcript in transcripts:
        for message in transcript.messages:
            if message.get("role") == "tool" and size < BIG_CHARS:
                text = plain_text(message)
                parts.append(text)
                size += len(text) + 1
    return {"role": "user", "content": "\n".join(parts)[:BIG_CHARS]}


def plan_session(total: int) -> SessionPlan | None:
    """``total`` corpus messages (system prompts left out) with the 1 MiB message in the middle; None
    without a corpus."""
    transcripts = list(iter_transcripts())
    if not transcripts:
        return None
    messages: list[Message] = []
    questions: list[str] = []
    # Kinds interleaved, so every slice of the session has code, chat and dialogue in it.
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for transcript in transcripts:
        by_kind[transcript.corpus].append(transcript)
    rounds = max(len(group) for group in by_kind.values())
    for index in range(rounds):
        for group in by_kind.values():
            if index < len(group) and len(messages) < total - 1:
                transcript = group[index]
                messages += [m for m in transcript.messages if m.get("role") != "system"][: total - 1 - len(messages)]
                questions += [qa.question for qa in transcript.meta.get("qa", ())]
    big_index = len(messages) // 2
    messages.insert(big_index, _big_message(transcripts))
    return SessionPlan(messages, big_index, questions)


async def _build(store: Store, plan: SessionPlan) -> tuple[str, int]:
    """Store the plan as one session the way the gateway grows one; (session id, sequence of the 1 MiB message)."""
    session = await store.sessions.get_or_create_active("bench", "recall-latency")
    big_seq = 0
    since_compaction = 0
    for first in range(0, len(plan.messages), BATCH):
        batch = plan.messages[first : first + BATCH]
        last = await store.messages.append(session.id, batch, [max(1, len(plain_text(m)) // 4) for m in batch])
        if first <= plan.big_index < first + len(batch):
            big_seq = last - len(batch) + 1 + plan.big_index - first
        since_compaction += len(batch)
        if since_compaction >= COMPACT_EVERY:
            since_compaction = 0
            active = await store.messages.load_active(session.id)
            summary = {"role": "assistant", "content": f"Summary of the conversation up to #{active.watermark}."}
            await store.compactions.replace_active(session.id, [summary, *active.messages[-TAIL:]],
                                                   [20, *active.token_counts[-TAIL:]], active.watermark)
    if store.dialect == "postgresql":
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")  # what autovacuum does after a bulk load
    return session.id, big_seq


def _calls(plan: SessionPlan, big_seq: int, seqs: Sequence[int], calls: int,
           rng: random.Random) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per call kind, ``calls`` (tool, arguments) pairs."""
    texts = [plain_text(m) for m in plan.messages]
    big = texts[plan.big_index]
    big_words = sorted(set(_WORD.findall(big)))
    kinds: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    while min((len(kinds[k]) for k in ("search words", "search fragment")), default=0) < calls:
        index = rng.randrange(len(texts))
        if index == plan.big_index:
            continue
        words = sorted(set(_WORD.findall(texts[index])))
        if len(words) >= 2 and len(kinds["search words"]) < calls:
            kinds["search words"].append(("search", {"query": " ".join(rng.sample(words, 2))}))
        fragments = _FRAGMENT.findall(texts[index])
        if fragments and len(kinds["search fragment"]) < calls:
            kinds["search fragment"].append(("search", {"query": rng.choice(fragments)[:80]}))
    kinds["search question"] = [("search", {"query": q}) for q in rng.sample(plan.questions, calls)]
    kinds["search in 1 MiB"] = [("search", {"query": " ".join(rng.sample(big_words, 2))}) for _ in range(calls)]
    kinds["read message"] = [("read", {"number": rng.choice(seqs), "before": 1, "after": 1}) for _ in range(calls)]
    kinds["read 1 MiB"] = [("read", {"number": big_seq, "offset": rng.choice((0, rng.randrange(BIG_CHARS)))})
                           for _ in range(calls)]
    return kinds


async def _time(handler: Callable[[dict[str, Any]], Awaitable[str]], arguments: dict[str, Any]) -> float:
    started = time.perf_counter()
    await handler(arguments)
    return (time.perf_counter() - started) * 1e3


def _p95(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=20, method="inclusive")[-1]


async def _measure(store: Store, plan: SessionPlan, calls: int, seed: int) -> list[tuple[str, list[float]]]:
    """Build the session in ``store`` and time every call kind on it: (kind, milliseconds per call)."""
    session_id, big_seq = await _build(store, plan)
    async with store.engine.connect() as conn:
        archived = (await conn.execute(select(MessageRow.seq).where(
            MessageRow.session_id == session_id, MessageRow.active.is_(False)))).scalars().all()
    tools = {"search": recall_tool(store, lambda: session_id).handler,
             "read": read_history_tool(store, lambda: session_id).handler}
    figures = []
    for kind, arguments in _calls(plan, big_seq, sorted(archived), calls, random.Random(seed)).items():
        for tool, args in arguments[:3]:
            await tools[tool](args)  # warm the connection pool and caches
        figures.append((kind, [await _time(tools[tool], args) for tool, args in arguments]))
    return figures


async def run(postgres: str | None, total: int, calls: int, seed: int) -> int:
    """Build the session on each backend, time every call kind, print the table; 0 (figures, not a test)."""
    plan = plan_session(total)
    if plan is None:
        print("bench.recall_latency: corpus not found (set CONCORD_CORPUS_DIR); nothing to measure")
        return 0
    chars = sum(len(plain_text(m)) for m in plan.messages)
    print(f"session: {len(plan.messages):,} messages, {chars:,} characters, one of {BIG_CHARS:,}; "
          f"compacted every {COMPACT_EVERY:,}; {calls} calls per kind\n")
    print(f"{'backend':<12}{'call':<18}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'p95/50ms':>10}")
    async with bench_databases(postgres, "concord_recall_latency") as databases:
        for backend, url in databases:
            async with await Store.open(url, migrate=False) as store:
                for kind, samples in await _measure(store, plan, calls, seed):
                    p95 = _p95(samples)
                    print(f"{backend:<12}{kind:<18}{statistics.median(samples):>9.1f}{p95:>9.1f}"
                          f"{max(samples):>9.1f}{p95 / TARGET_MS:>10.2f}", flush=True)
    if postgres is None:
        print("postgresql: skipped (no URL; pass --postgres or set CONCORD_BENCH_POSTGRES_URL)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.recall_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    parser.add_argument("--messages", type=int, default=20_000, help="messages in the session (default 20,000)")
    parser.add_argument("--calls", type=int, default=60, help="calls timed per kind (default 60)")
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args(argv)
    return asyncio.run(run(args.postgres, args.messages, args.calls, args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
