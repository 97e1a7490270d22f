"""Gateway overhead per message, excluding the LLM, and the hygiene sweep over idle sessions.

The provider answers instantly in-process, so every millisecond measured is the gateway's own: session key,
FIFO queue, turn lock, loading the session, hygiene check, the agent loop's bookkeeping, persisting, sending.

* latency: one message at a time, round-robin over 100 DM sessions — p50 / p99 per message;
* throughput: every session talking at once (each session's messages queue behind each other) — messages/s;
* sweep: 10,000 open, idle sessions with nothing over a limit — one full `sweep()` (target ≤ 1 s).

    python -m bench.gateway [--postgres URL] [--redis URL] [--sessions 100] [--rounds 10]
    python -m bench.gateway --baseline 9e68aaa [--ab-rounds 7]

Runs on SQLite + in-process locks always; on PostgreSQL + Redis when both URLs are given (or come from
``CONCORD_BENCH_POSTGRES_URL``/``CONCORD_TEST_POSTGRES_URL`` and ``CONCORD_BENCH_REDIS_URL``/
``CONCORD_TEST_REDIS_URL``). A private PostgreSQL database is created and dropped.

``--baseline GITREF`` measures SQLite latency and throughput of this checkout and of that revision (checked
out in a temporary git worktree), each run in its own process, alternating A, B, A, B… for ``--ab-rounds``
after a warm-up pair, and prints the medians with old/new ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
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
from gateway.app import Gateway
from gateway.app.runtime_parts import build_runtime
from gateway.config import load_settings
from gateway.conversation.sweep import sweep
from gateway.intake.locks import InProcessLocks, LockBackend, RedisLocks
from gateway.store import EngineState, Store, upgrade_database
from gateway.store._rows import new_session_values
from gateway.store.database import write
from gateway.store.models import SessionRow

__all__ = ["main"]

_REVISION = Path(__file__).resolve().parent / "_revision.py"
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


async def measure(url: str, locks: LockBackend, sessions: int, rounds: int, data_dir: Path, *,
                  with_sweep: bool = True, redis: str | None = None) -> dict[str, float]:
    """Latency percentiles (ms), throughput (messages/s) and, optionally, the idle sweep on one database."""
    await upgrade_database(url)
    gateway, _ = await _gateway(url, locks, data_dir, redis)
    try:
        samples = await _latency(gateway, sessions, rounds)
        rate = await _throughput(gateway, sessions, rounds)
        swept_s, candidates = await _sweep_idle(gateway) if with_sweep else (0.0, 0)
    finally:
        await gateway.aclose()
    return {"messages": len(samples), "p50_ms": _pct(samples, 0.50) * 1e3, "p99_ms": _pct(samples, 0.99) * 1e3,
            "mean_ms": statistics.fmean(samples) * 1e3, "msgs_per_s": rate, "sweep_s": swept_s,
            "sweep_hits": candidates}


async def _one(label: str, url: str, locks: LockBackend, sessions: int, rounds: int, data_dir: Path,
               redis: str | None = None) -> bool:
    figures = await measure(url, locks, sessions, rounds, data_dir, redis=redis)
    p50, p99, swept_s = figures["p50_ms"], figures["p99_ms"], figures["sweep_s"]
    print(f"{label:<22}{figures['messages']:>7,.0f}{p50:>9.2f}{p99:>9.2f}{figures['mean_ms']:>9.2f}"
          f"{figures['msgs_per_s']:>12,.0f}{swept_s * 1e3:>11.1f}{figures['sweep_hits']:>6.0f}")
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


async def _sqlite_figures(sessions: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="concord-bench-gw-") as tmp:
        return await measure(f"sqlite+aiosqlite:///{Path(tmp) / 'gw.db'}", InProcessLocks(), sessions, rounds,
                             Path(tmp), with_sweep=False)


_FIGURES = (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("mean_ms", "mean ms"), ("msgs_per_s", "msgs/s"))


def compare(baseline: str, sessions: int, rounds: int, ab_rounds: int) -> int:
    """This checkout against ``baseline`` on SQLite, alternating processes; print medians and old/new ratios."""
    from bench.compress import REPO_ROOT, baseline_checkout

    def child(root: Path) -> dict[str, float]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run([sys.executable, str(_REVISION), str(root), __file__, "--child", "--sessions",
                               str(sessions), "--rounds", str(rounds)], cwd=root, env=env, check=True,
                              capture_output=True, text=True)
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        if not str(figures.pop("gateway")).startswith(str(root)):
            raise RuntimeError(f"the run for {root} imported another checkout's gateway package")
        return figures

    runs: dict[str, list[dict[str, float]]] = {"new": [], "old": []}
    with baseline_checkout(baseline) as old_root:
        for round_ in range(ab_rounds + 1):
            for label, root in (("new", REPO_ROOT), ("old", old_root)):
                figures = child(root)
                if round_:  # the first pair warms caches and the disk
                    runs[label].append(figures)
    print(f"sqlite + in-process, {sessions} sessions × {rounds} rounds; median of {ab_rounds} runs each, "
          f"alternating with {baseline} (old)")
    print(f"{'':<10}{'new':>10}{'old':>10}{'old/new':>10}")
    for key, name in _FIGURES:
        new, old = (statistics.median(r[key] for r in runs[label]) for label in ("new", "old"))
        ratio = new / old if key == "msgs_per_s" else old / new  # > 1: the new one is better either way
        print(f"{name:<10}{new:>10.2f}{old:>10.2f}{ratio:>9.2f}×")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    parser.add_argument("--redis", default=os.environ.get("CONCORD_BENCH_REDIS_URL")
                        or os.environ.get("CONCORD_TEST_REDIS_URL"))
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--baseline", metavar="GITREF", help="compare with this revision (SQLite), interleaved")
    parser.add_argument("--ab-rounds", type=int, default=7, help="runs per revision with --baseline (median)")
    args = parser.parse_args(argv)
    if args.baseline:
        return compare(args.baseline, args.sessions, args.rounds, args.ab_rounds)
    return asyncio.run(run(args.postgres, args.redis, args.sessions, args.rounds))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        # One side of --baseline, started through bench/_revision.py: one JSON line of SQLite figures.
        size = argparse.ArgumentParser()
        size.add_argument("--sessions", type=int)
        size.add_argument("--rounds", type=int)
        known = size.parse_args(sys.argv[2:])
        import gateway

        print(json.dumps({**asyncio.run(_sqlite_figures(known.sessions, known.rounds)), "gateway": gateway.__file__}))
        raise SystemExit(0)
    raise SystemExit(main())
