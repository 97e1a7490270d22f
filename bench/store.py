"""Session-store benchmark (R-S1, R-S2, R-G3) on SQLite and PostgreSQL.

For sessions of 100 / 1,000 / 5,000 messages: appends per second (one message per transaction, as the bot
writes them, and 100-message batches), the time of one in-place compaction (load the active set, replace it
with a summary plus a 20-message tail, all rows kept), and a search over the archive. Then the hygiene
sweep's query among 10,000 open sessions with nothing to do (target ≤ 1 s; it is an indexed query).

    python -m bench.store [--postgres URL] [--sizes 100,1000,5000]

PostgreSQL comes from ``--postgres``, ``CONCORD_BENCH_POSTGRES_URL`` or ``CONCORD_TEST_POSTGRES_URL``; the
benchmark creates a private database there and drops it afterwards. Without one, only SQLite runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert

from bench.scratch_db import bench_databases
from gateway.store import Store
from gateway.store._rows import new_session_values
from gateway.store.database import write
from gateway.store.models import SessionRow
from gateway.store.records import EngineState

__all__ = ["main"]

SIZES = (100, 1_000, 5_000)
SINGLE_APPENDS = 300  # one-message transactions timed per size (the rest is filled in batches)
BATCH = 100
TAIL = 20
HYGIENE_SESSIONS = 10_000
HYGIENE_TARGET_S = 1.0
Message = dict[str, Any]


def _message(i: int) -> tuple[Message, int]:
    kind = i % 4
    if kind == 0:
        return {"role": "user", "content": f"Turn {i}: please check the deploy config and the Redis lock."}, 18
    if kind == 1:
        return {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py", "line": {i}}}'}}]}, 30
    if kind == 2:
        return {"role": "tool", "tool_call_id": f"c{i - 1}", "content": "def main():\n    return 0\n" * 8}, 90
    return {"role": "assistant", "content": f"第{i}轮：我们需要压缩上下文窗口，配置已经检查完毕。"}, 25


async def _session_figures(store: Store, size: int) -> tuple[float, float, float, float, float]:
    session = await store.sessions.get_or_create_active("bench", f"size-{size}-{uuid.uuid4().hex[:6]}")
    singles = min(size, SINGLE_APPENDS)
    started = time.perf_counter()
    for i in range(singles):
        message, tokens = _message(i)
        await store.messages.append(session.id, [message], [tokens])
    single_rate = singles / (time.perf_counter() - started)
    batch_rate = 0.0
    if size > singles:
        started = time.perf_counter()
        for first in range(singles, size, BATCH):
            pairs = [_message(i) for i in range(first, min(size, first + BATCH))]
            await store.messages.append(session.id, [m for m, _ in pairs], [t for _, t in pairs])
        batch_rate = (size - singles) / (time.perf_counter() - started)
    started = time.perf_counter()
    active = await store.messages.load_active(session.id)
    loaded = time.perf_counter() - started
    summary = {"role": "assistant", "content": "Summary of the earlier turns: configs checked, lock fixed."}
    started = time.perf_counter()
    await store.compactions.replace_active(session.id, [summary, *active.messages[-TAIL:]],
                                           [40, *active.token_counts[-TAIL:]], active.watermark)
    compacted = time.perf_counter() - started
    started = time.perf_counter()
    hits = await store.search("上下文", session_id=session.id, limit=20)
    searched = time.perf_counter() - started
    assert hits, "the archive must be searchable"
    return single_rate, batch_rate, loaded, compacted, searched


async def _hygiene(store: Store) -> tuple[float, int]:
    at = datetime.now(UTC)
    rows = [new_session_values(f"hyg-{i:06d}", "bench", f"hyg-{i}", at, title=None, goal=None,
                               parent_session_id=None, state=EngineState()) for i in range(HYGIENE_SESSIONS)]
    async with write(store.engine) as conn:
        for first in range(0, len(rows), 1000):
            await conn.execute(insert(SessionRow), rows[first:first + 1000])
        await conn.exec_driver_sql("ANALYZE")
    await store.sessions.list_needing_hygiene(10**12, 10**9)  # warm the connection and caches
    started = time.perf_counter()
    found = await store.sessions.list_needing_hygiene(10**12, 10**9)
    return time.perf_counter() - started, len(found)


async def run(postgres: str | None, sizes: Sequence[int]) -> int:
    """Print the figures; 0 when the hygiene query met its target on every database."""
    ok = True
    async with bench_databases(postgres, "concord_bench") as databases:
        print(f"{'database':<11}{'messages':>9}{'append/s 1-msg':>16}{'append/s batch':>16}"
              f"{'load ms':>9}{'compact ms':>12}{'search ms':>11}")
        for name, url in databases:
            async with await Store.open(url, migrate=False) as store:
                for size in sizes:
                    single, batch, loaded, compacted, searched = await _session_figures(store, size)
                    batch_text = f"{batch:,.0f}" if batch else "-"
                    print(f"{name:<11}{size:>9,}{single:>16,.0f}{batch_text:>16}{loaded * 1e3:>9.1f}"
                          f"{compacted * 1e3:>12.1f}{searched * 1e3:>11.1f}")
        print()
        for name, url in databases:
            async with await Store.open(url, migrate=False) as store:
                elapsed, found = await _hygiene(store)
            ratio = elapsed / HYGIENE_TARGET_S
            ok &= elapsed <= HYGIENE_TARGET_S and found == 0
            print(f"{name:<11}hygiene query over {HYGIENE_SESSIONS:,} open sessions, nothing to do: "
                  f"{elapsed * 1e3:.1f} ms (target ≤ {HYGIENE_TARGET_S * 1e3:.0f} ms, ratio {ratio:.4f})")
    if postgres is None:
        print("postgresql: skipped (no URL; pass --postgres or set CONCORD_BENCH_POSTGRES_URL)")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = parser.parse_args(argv)
    return asyncio.run(run(args.postgres, [int(s) for s in args.sizes.split(",")]))


if __name__ == "__main__":
    raise SystemExit(main())
