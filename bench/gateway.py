"""Gateway overhead per message, excluding the LLM (issue 7, item 9), and the hygiene sweep over idle sessions.

The provider answers instantly in-process, so every millisecond measured is the gateway's own: session key,
FIFO queue, turn lock, loading the session, hygiene check, the agent loop's bookkeeping, persisting, sending.

* latency: one message at a time, round-robin over 100 DM sessions — p50 / p99 per message;
* throughput: every session talking at once (each session's messages queue behind each other) — messages/s;
* sweep: 10,000 open, idle sessions with nothing over a limit — one full `sweep()` (target ≤ 1 s).

    python -m bench.gateway [--postgres URL] [--redis URL] [--sessions 100] [--rounds 10]

Runs on SQLite + in-process locks always; on PostgreSQL + Redis when both URLs are given (or come from
``CONCORD_BENCH_POSTGRES_URL``/``CONCORD_TEST_POSTGRES_URL`` and ``CONCORD_BENCH_REDIS_URL``/
``CONCORD_TEST_REDIS_URL``). A private PostgreSQL database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from adapters.base import Adapter, ChatRef, Inbound, InboundHandler
from agent.llm.base import Completion, Provider, Usage
from bench.scratch_db import scratch_postgres
from gateway.app import Gateway, build_runtime
from gateway.config import load_settings
from gateway.locks import InProcessLocks, LockBackend, RedisLocks
from gateway.store import EngineState, Store, upgrade_database
from gateway.store._rows import new_session_values
from gateway.store.database import write
from gateway.store.models import SessionRow
from gateway.sweep import sweep

__all__ = ["main"]

P99_TARGET_MS = 10.0
SWEEP_TARGET_S = 1.0
IDLE_SESSIONS = 10_000


class InstantProvider(Provider):
    """Answers every request at once with a short reply and plausible usage; no network, no model."""

    name = "instant"
    model = "instant"

    async def complete(self, messages: Sequence[Mapping[str, Any]], **kwargs: Any) -> Completion:
        return Completion({"role": "assistant", "content": "ok, noted."},
                          Usage(prompt_tokens=200 + 30 * len(messages), completion_tokens=4))


class SilentAdapter(Adapter):
    """A platform that delivers nothing anywhere: only the gateway's cost is left."""

    name = "discord"
    limit = 2000

    async def start(self, on_message: InboundHandler) -> None:
        self._handler = on_message

    async def stop(self) -> None:
        return None

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        return None


_ids = itertools.count(1)


def _inbound(session: int, text: str) -> Inbound:
    return Inbound(platform="discord", chat_id=f"bench-{session}", chat_type="dm", thread_id=None,
                   user_id=f"u{session}", user_name="Bench", message_id=str(next(_ids)), text=text)


async def _gateway(url: str, locks: LockBackend, data_dir: Path,
                   redis: str | None = None) -> tuple[Gateway, SilentAdapter]:
    # With a Redis URL, inbound de-dup and arrival tickets go through Redis too, as with several workers.
    settings = load_settings(llm={"model": "instant", "base_url": "http://127.0.0.1:9", "context_length": 128_000},
                             storage={"database_url": url, "data_dir": str(data_dir)},
                             gateway={"sweep_cron": None}, memory={"enabled": False},
                             redis={"url": redis} if redis else {})
    store = await Store.open(url, migrate=False)
    runtime = await build_runtime(settings, provider=InstantProvider(), store=store, locks=locks)
    adapter = SilentAdapter()
    gateway = Gateway(runtime, [adapter])
    await gateway.start()
    return gateway, adapter


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _latency(gateway: Gateway, sessions: int, rounds: int) -> list[float]:
    handle = gateway.router.handle
    adapter = gateway.adapters[0]
    for s in range(sessions):  # warm-up: create the sessions and their live objects
        await handle(_inbound(s, "hello there"), adapter)
    samples: list[float] = []
    for r in range(rounds):
        for s in range(sessions):
            message = _inbound(s, f"round {r}: please remember item {r * sessions + s}")
            started = time.perf_counter()
            await handle(message, adapter)
            samples.append(time.perf_counter() - started)
    return samples


async def _throughput(gateway: Gateway, sessions: int, rounds: int) -> float:
    handle = gateway.router.handle
    adapter = gateway.adapters[0]

    async def talk(s: int) -> None:
        for r in range(rounds):
            await handle(_inbound(s, f"burst {r} from {s}"), adapter)

    started = time.perf_counter()
    await asyncio.gather(*(talk(s) for s in range(sessions)))
    return sessions * rounds / (time.perf_counter() - started)


async def _sweep_idle(gateway: Gateway) -> tuple[float, int]:
    store = gateway.rt.store
    at = datetime.now(UTC)
    rows = [new_session_values(f"idle-{uuid.uuid4().hex[:12]}-{i}", "bench", f"dm:idle-{i}", at, title=None,
                               goal=None, parent_session_id=None, state=EngineState()) for i in range(IDLE_SESSIONS)]
    async with write(store.engine) as conn:
        for first in range(0, len(rows), 1000):
            await conn.execute(insert(SessionRow), rows[first:first + 1000])
        await conn.exec_driver_sql("ANALYZE")
    started = time.perf_counter()
    report = await sweep(gateway.sessions)
    return time.perf_counter() - started, len(report.entries)


async def _one(label: str, url: str, locks: LockBackend, sessions: int, rounds: int, data_dir: Path,
               redis: str | None = None) -> bool:
    await upgrade_database(url)
    gateway, _ = await _gateway(url, locks, data_dir, redis)
    try:
        samples = await _latency(gateway, sessions, rounds)
        rate = await _throughput(gateway, sessions, rounds)
        swept_s, candidates = await _sweep_idle(gateway)
    finally:
        await gateway.aclose()
    p50, p99 = _pct(samples, 0.50) * 1e3, _pct(samples, 0.99) * 1e3
    print(f"{label:<22}{len(samples):>7,}{p50:>9.2f}{p99:>9.2f}{statistics.fmean(samples) * 1e3:>9.2f}"
          f"{rate:>12,.0f}{swept_s * 1e3:>11.1f}{candidates:>6}")
    print(f"{'':<22}p99 ratio to {P99_TARGET_MS:.0f} ms target: {p99 / P99_TARGET_MS:.2f}; "
          f"sweep ratio to {SWEEP_TARGET_S:.0f} s target: {swept_s / SWEEP_TARGET_S:.3f}")
    return p99 <= P99_TARGET_MS and swept_s <= SWEEP_TARGET_S


async def run(postgres: str | None, redis: str | None, sessions: int, rounds: int) -> int:
    """Print the figures; 0 when SQLite met both targets (PostgreSQL + Redis is reported, not judged)."""
    print(f"{'backend':<22}{'msgs':>7}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}{'msgs/s':>12}"
          f"{'sweep ms':>11}{'hits':>6}")
    with tempfile.TemporaryDirectory(prefix="concord-bench-gw-") as tmp:
        ok = await _one("sqlite + in-process", f"sqlite+aiosqlite:///{Path(tmp) / 'gw.db'}", InProcessLocks(),
                        sessions, rounds, Path(tmp))
        if postgres and redis:
            async with scratch_postgres(postgres, "concord_bench_gw") as url:
                locks = RedisLocks.from_url(redis, prefix=f"concord:bench:{uuid.uuid4().hex[:8]}:")
                await _one("postgresql + redis", url, locks, sessions, rounds, Path(tmp), redis)
        else:
            print("postgresql + redis: skipped (pass --postgres and --redis, or set CONCORD_BENCH_* URLs)")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    parser.add_argument("--redis", default=os.environ.get("CONCORD_BENCH_REDIS_URL")
                        or os.environ.get("CONCORD_TEST_REDIS_URL"))
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    return asyncio.run(run(args.postgres, args.redis, args.sessions, args.rounds))


if __name__ == "__main__":
    raise SystemExit(main())
