"""Throughput of 1, 2 and 3 gateway workers on PostgreSQL + Redis.

Each run starts N real ``concord run`` processes (Telegram webhook mode) on a fresh private PostgreSQL database
and the given Redis, behind this process playing Telegram and a round-robin load balancer (`bench.cluster`),
with an instant fake LLM. ``--sessions`` private chats talk at once, each sending ``--messages`` messages one
after another, each message to a different worker than the one before; a message's time is its webhook
round trip, which ends only once the worker has handled it: de-dup and arrival ticket in Redis, turn lock,
session load, agent turn against the fake LLM, persist, delivery ledger, sendMessage, confirmation.

Every run is verified: each message answered exactly once, answers and stored user messages of each session
in sending order (`bench.cluster.check_exactly_once`). Printed per run: messages/s, the ratio to one worker,
per-message p50 / p99, CPU seconds per message of the workers, of this driver (the fakes and the load
balancer) and of everything else the machine ran meanwhile (PostgreSQL, Redis, other work), and how busy the
machine's cores were: which says where the time goes, and whether more workers could have had more CPU.

    python -m bench.scale [--postgres URL] [--redis URL] [--workers 1,2,3] [--sessions 24] [--messages 10]

URLs default to ``CONCORD_BENCH_POSTGRES_URL``/``CONCORD_TEST_POSTGRES_URL`` and
``CONCORD_BENCH_REDIS_URL``/``CONCORD_TEST_REDIS_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cluster import Cluster, Sent, check_exactly_once
from bench.scratch_db import scratch_postgres
from gateway.store import upgrade_database
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram

__all__ = ["main"]

SCALING_TARGET = 1.6
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    """The figures of one run."""

    workers: int
    messages: int
    seconds: float
    latencies_ms: list[float]
    worker_cpu_s: float
    driver_cpu_s: float
    machine_cpu_s: float
    problems: list[str]

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _machine_cpu_seconds() -> float:
    """CPU time every core of the machine spent busy so far (Linux /proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICKS


def _instant(body: dict[str, Any]) -> Reply:
    # Usage given, so the fake does not tokenize the request: it costs the driver as little as possible.
    return Reply(f"re: {body['messages'][-1]['content']}", usage={"prompt_tokens": 100, "completion_tokens": 5})


async def _one_run(workers: int, postgres: str, redis: str, sessions: int, per_session: int,
                   workdir: Path) -> Run:
    telegram, llm = FakeTelegram(), FakeLLMServer()
    llm.responder = _instant
    await telegram.start()
    await llm.start()
    try:
        async with scratch_postgres(postgres, prefix="concord_scale") as url:
            await upgrade_database(url)
            cluster = Cluster(workers, url, redis, telegram, llm.openai_base_url, workdir / f"w{workers}",
                              env={"CONCORD_LOGGING__LEVEL": "WARNING"})
            await cluster.start()
            try:
                return await _load(cluster, url, telegram, sessions, per_session)
            finally:
                await cluster.aclose()
    finally:
        await llm.stop()
        await telegram.stop()


async def _load(cluster: Cluster, url: str, telegram: FakeTelegram, sessions: int, per_session: int) -> Run:
    for i in range(cluster.size):  # warm every worker's connections and caches
        update, _ = cluster.message(cluster.new_chat(), "warm up")
        await cluster.deliver(update, prefer=i)
    telegram.sent_messages.clear()
    sent: list[Sent] = []
    latencies: list[float] = []

    async def conversation(chat_id: int, start: int) -> None:
        for n in range(per_session):
            update, item = cluster.message(chat_id, f"chat {chat_id} message {n}")
            sent.append(item)
            began = time.perf_counter()
            await cluster.deliver(update, prefer=(start + n) % cluster.size)
            latencies.append((time.perf_counter() - began) * 1000)

    pids = [w.process.pid for w in cluster.workers if w.process is not None]
    cpu_before = sum(_cpu_seconds(p) for p in pids)
    driver_before = time.process_time()
    machine_before = _machine_cpu_seconds()
    began = time.perf_counter()
    await asyncio.gather(*(conversation(cluster.new_chat(), s) for s in range(sessions)))
    seconds = time.perf_counter() - began
    worker_cpu = sum(_cpu_seconds(p) for p in pids) - cpu_before
    driver_cpu = time.process_time() - driver_before
    machine_cpu = _machine_cpu_seconds() - machine_before
    problems = await check_exactly_once(sent, telegram.sent_messages, url)
    return Run(cluster.size, len(sent), seconds, latencies, worker_cpu, driver_cpu, machine_cpu, problems)


def _print(runs: list[Run]) -> None:
    one = runs[0].rate if runs and runs[0].workers == 1 else None
    print(f"{'workers':>7} {'messages':>8} {'seconds':>8} {'msg/s':>7} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'CPU ms/msg: workers':>19} {'driver':>6} {'rest':>5} {'cores busy':>10}  verified")
    for run in runs:
        ratio = f"{run.rate / one:.2f}x" if one else "-"
        verdict = "ok: order kept, none lost or doubled" if not run.problems else f"{len(run.problems)} PROBLEMS"
        rest = max(0.0, run.machine_cpu_s - run.worker_cpu_s - run.driver_cpu_s)
        busy = f"{run.machine_cpu_s / run.seconds:.2f} of {os.cpu_count()}"
        ms_per_message = 1000 / run.messages
        print(f"{run.workers:>7} {run.messages:>8} {run.seconds:>8.2f} {run.rate:>7.1f} {ratio:>6} "
              f"{run.percentile(0.50):>7.1f} {run.percentile(0.99):>7.1f} "
              f"{run.worker_cpu_s * ms_per_message:>19.1f} {run.driver_cpu_s * ms_per_message:>6.1f} "
              f"{rest * ms_per_message:>5.1f} {busy:>10}  {verdict}")
        for problem in run.problems[:10]:
            print(f"        {problem}")
    two = next((r for r in runs if r.workers == 2), None)
    if one and two:
        met = "met" if two.rate / one >= SCALING_TARGET else "NOT met"
        print(f"scaling 2 workers vs 1: {two.rate / one:.2f}x (target ≥ {SCALING_TARGET}x: {met}); "
              f"CPU cores here: {os.cpu_count()}")


async def _main(args: argparse.Namespace) -> int:
    runs = []
    with tempfile.TemporaryDirectory(prefix="concord-scale-") as tmp:
        for workers in args.workers:
            runs.append(await _one_run(workers, args.postgres, args.redis, args.sessions, args.messages, Path(tmp)))
            print(f"  {workers} worker(s): {runs[-1].rate:.1f} msg/s", file=sys.stderr)
    _print(runs)
    return 1 if any(r.problems for r in runs) else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.scale``: print the table; exit 1 when a run broke a guarantee."""
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    parser.add_argument("--redis", default=os.environ.get("CONCORD_BENCH_REDIS_URL")
                        or os.environ.get("CONCORD_TEST_REDIS_URL"))
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 2, 3])
    parser.add_argument("--sessions", type=int, default=24)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args(argv)
    if not args.postgres or not args.redis:
        print("bench.scale: needs PostgreSQL and Redis (--postgres URL --redis URL, or the "
              "CONCORD_TEST_POSTGRES_URL / CONCORD_TEST_REDIS_URL environment variables)", file=sys.stderr)
        return 2
    return asyncio.run(_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
