"""Reliability campaign: real gateways, `concord sweep`, and faults, with the figures the
README reports.

    python -m bench.reliability [--only race,redis-killed,…,inbox-kept,…] [--backends sqlite,postgres]
                                [--messages 600] [--outage 30] [--late-after 30] [--baseline PATH]

* race — two ``concord run`` gateways and a ``concord sweep`` loop on one session, PostgreSQL, no Redis (a
  second gateway on one SQLite database is refused by its lock file);
* redis-killed — the same on PostgreSQL with a private Redis that is killed 10 s in (locks fail open);
* redis-hung / redis-slow — 20 chats taking turn locks while a private Redis is SIGSTOPped for ``--outage``
  seconds, or slowed with ``DEBUG SLEEP 2``; then how long each chat waits for its lock once Redis is back;
* postgres-down — two gateways while a private PostgreSQL is stopped for ``--outage`` seconds;
* disk-full — one gateway while the tmpfs under its SQLite file is full for ``--outage`` seconds;
* redis-polling — `bench.redis_campaign`'s Telegram polling traffic (20 chats, 10 messages/s) through Redis
  killed, hung, slowed by ``DEBUG SLEEP 0.3`` and ``DEBUG SLEEP 2``, with one and with two real workers on
  PostgreSQL: per fault, messages answered once, twice or never, turned away, and the longest wait after
  Redis was back (with ``--baseline``, the other checkout's table too).

The crash campaign (`bench.crash_campaign`) kills workers where a message used to be lost or doubled —
inbox-kept, request-stored, command-applied, answer-stored, observed-queued (SIGKILL at those crash points),
commit-lost (a proxy cuts PostgreSQL's connection once a turn's COMMIT went through), database-down (Discord,
the database down, SIGKILL mid-outage) — on SQLite with one worker and on PostgreSQL + Redis with two, and
prints one table row per fault and backend: sent, answered, lost, doubled, late (answered more than
``--late-after`` seconds after it was sent) and the slowest answer.

Each other line gives messages, answered, "try again" replies, lost, dropped from view, orphaned replies, the
longest wait after recovery and the log volume. ``--baseline`` runs the gateway scenarios a second time from another
checkout (e.g. ``git worktree add /tmp/base <commit>``) for a before/after comparison. PostgreSQL for
race and redis-killed comes from ``CONCORD_BENCH_POSTGRES_URL`` or ``CONCORD_TEST_POSTGRES_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from redis import Redis as SyncRedis

from bench.crash_campaign import BACKENDS, FAULTS, run_fault
from bench.crash_rig import Outcome, table
from bench.redis_campaign import Campaign, run_campaign
from bench.scratch_db import scratch_postgres
from gateway.intake.locks import RedisLocks
from gateway.store import upgrade_database
from tests.faults.harness import REPO, Figures, Scenario, run_scenario
from tests.faults.services import SmallDisk, free_port, private_postgres, small_disk
from tests.locks.conftest import PrivateRedis

__all__ = ["main"]

SCENARIOS = ("race", "redis-killed", "redis-hung", "redis-slow", "redis-polling", "postgres-down", "disk-full",
             *FAULTS)
CHATS = 20


def _redis() -> PrivateRedis:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found")
    # No persistence (--save ''), so the directory stays empty.
    server = PrivateRedis(binary=binary, port=free_port(), workdir=Path(tempfile.gettempdir()))
    server.start()
    return server


def _postgres() -> str:
    postgres = os.environ.get("CONCORD_BENCH_POSTGRES_URL") or os.environ.get("CONCORD_TEST_POSTGRES_URL")
    if not postgres:
        raise RuntimeError("set CONCORD_BENCH_POSTGRES_URL or CONCORD_TEST_POSTGRES_URL")
    return postgres


async def _race(messages: int, repo: Path, outage: float) -> Figures:
    with tempfile.TemporaryDirectory(prefix="concord-race-") as name:
        async with scratch_postgres(_postgres(), "concord_reliability") as url:
            await upgrade_database(url)
            return await run_scenario(Scenario(storage_url=url, workdir=Path(name), messages_per_gateway=messages,
                                               repo=repo, timeout_s=1800))


async def _redis_killed(messages: int, repo: Path, outage: float) -> Figures:
    postgres = _postgres()
    redis = _redis()

    async def kill() -> None:
        redis.kill()

    try:
        async with scratch_postgres(postgres, "concord_reliability") as url:
            await upgrade_database(url)
            with tempfile.TemporaryDirectory(prefix="concord-redis-killed-") as name:
                return await run_scenario(Scenario(storage_url=url, workdir=Path(name), redis_url=redis.url,
                                                   repo=repo, messages_per_gateway=messages, fault=kill,
                                                   fault_after_s=10.0, timeout_s=1800))
    finally:
        redis.kill()


async def _postgres_down(messages: int, repo: Path, outage: float) -> Figures:
    with private_postgres() as server:
        if isinstance(server, str):
            raise RuntimeError(server)
        await upgrade_database(server.url)

        async def down() -> None:
            await asyncio.to_thread(server.stop)
            await asyncio.sleep(outage)
            await asyncio.to_thread(server.start)

        # Messages keep arriving through the whole outage (about ``outage / 0.2`` of them per gateway).
        count = max(messages // 4, int(outage / 0.2) + 20)
        with tempfile.TemporaryDirectory(prefix="concord-pg-down-") as name:
            return await run_scenario(Scenario(storage_url=server.url, workdir=Path(name), repo=repo,
                                               messages_per_gateway=count, interval_s=0.2, fault=down,
                                               fault_after_s=2.0, timeout_s=1800))


async def _disk_full(messages: int, repo: Path, outage: float) -> Figures:
    with small_disk(64) as disk:
        if isinstance(disk, str):
            raise RuntimeError(disk)
        assert isinstance(disk, SmallDisk)
        url = f"sqlite+aiosqlite:///{disk.path}/concord.db"
        await upgrade_database(url)

        async def full() -> None:
            await asyncio.to_thread(disk.fill)
            await asyncio.sleep(outage)
            disk.free()

        count = max(messages // 4, int(outage / 0.2) + 20)
        with tempfile.TemporaryDirectory(prefix="concord-disk-full-") as name:
            return await run_scenario(Scenario(storage_url=url, workdir=Path(name), repo=repo, gateways=1,
                                               messages_per_gateway=count, interval_s=0.2, fault=full,
                                               fault_after_s=1.0, timeout_s=1800))


async def _chats_through(fault: Callable[[PrivateRedis], Awaitable[None]]) -> str:
    """20 chats take turn locks through ``fault``; then the longest wait for a lock once Redis is back."""
    redis = _redis()
    prefix = f"bench:{uuid.uuid4().hex}:"
    locks = RedisLocks.from_url(redis.url, prefix=prefix, turn_ttl=60.0, compression_ttl=60.0)
    stop = asyncio.Event()
    unlocked = 0

    async def chat(n: int) -> None:
        nonlocal unlocked
        while not stop.is_set():
            started = time.monotonic()
            async with locks.session_turn(f"chat-{n}"):
                await asyncio.sleep(0.02)
            unlocked += time.monotonic() - started > 0.9  # a timed-out lock request: proceeded unlocked
            await asyncio.sleep(0.01)

    async def wait_once(n: int) -> float:
        started = time.monotonic()
        async with locks.session_turn(f"chat-{n}"):
            return time.monotonic() - started

    try:
        chats = asyncio.gather(*(chat(n) for n in range(CHATS)))
        await asyncio.sleep(0.5)
        await fault(redis)
        stop.set()
        await chats
        waits = await asyncio.gather(*(wait_once(n) for n in range(CHATS)))
        pending = locks.orphans
        await asyncio.sleep(1.0)  # the cleanup runs in the background
        left = len(list(SyncRedis(port=redis.port).scan_iter(f"{prefix}*")))
        return (f"{CHATS} chats, longest wait for a turn lock after recovery {max(waits):.2f} s "
                f"(median {sorted(waits)[CHATS // 2]:.2f} s), {unlocked} turns ran unlocked during the fault, "
                f"{pending} timed-out requests still to clean up at recovery, {locks.orphans} a second later, "
                f"{left} lock keys left")
    finally:
        stop.set()
        await locks.aclose()
        redis.kill()


async def _redis_hung(outage: float) -> str:
    async def hang(redis: PrivateRedis) -> None:
        redis.pause()
        await asyncio.sleep(outage)
        redis.resume()

    return await _chats_through(hang)


async def _redis_slow(outage: float) -> str:
    async def slow(redis: PrivateRedis) -> None:
        done = threading.Event()

        def sleeper() -> None:
            client = SyncRedis(port=redis.port, socket_timeout=10)
            while not done.is_set():
                client.execute_command("DEBUG", "SLEEP", "2")

        thread = threading.Thread(target=sleeper, daemon=True)
        thread.start()
        await asyncio.sleep(min(outage, 20.0))
        done.set()
        await asyncio.to_thread(thread.join, 5)

    return await _chats_through(slow)


GATEWAY_SCENARIOS: dict[str, Callable[[int, Path, float], Awaitable[Figures]]] = {
    "race": _race, "redis-killed": _redis_killed, "postgres-down": _postgres_down, "disk-full": _disk_full}


async def _crashes(names: Sequence[str], backends: Sequence[str], late_after: float) -> int:
    """Run the crash campaign's ``names`` on ``backends``; print its table; how many rows lost or doubled."""
    rows: list[tuple[str, str, Outcome | str]] = []
    postgres = os.environ.get("CONCORD_BENCH_POSTGRES_URL") or os.environ.get("CONCORD_TEST_POSTGRES_URL")
    for name in names:
        fault = FAULTS[name]
        for backend in backends:
            if backend not in fault.backends:
                rows.append((name, backend, "n/a: " + ("no connection to lose" if backend == "sqlite" else "-")))
                continue
            print(f"-- {name} on {backend}: {fault.what}", flush=True)
            try:
                rows.append((name, backend, await run_fault(fault, backend, late_after, postgres)))
            except (RuntimeError, TimeoutError) as exc:
                rows.append((name, backend, f"not run: {exc}"))
    print(table(rows), flush=True)
    return sum(1 for *_, o in rows if isinstance(o, Outcome) and (o.lost or o.doubled))


async def _redis_polling(baseline: Path | None) -> int:
    """`bench.redis_campaign` with one and two workers (and from ``baseline``); 1 if a message went astray."""
    astray = 0
    for workers in (1, 2):
        for label, repo in (("this checkout", REPO), ("baseline", baseline)):
            if repo is None:
                continue
            with tempfile.TemporaryDirectory(prefix="concord-redis-polling-") as name:
                figures, problems = await run_campaign(Campaign(workers, repo=repo), _postgres(), Path(name))
            print(f"   {label}, {workers} worker(s):", flush=True)
            for row in figures:
                print(f"     {row.line()}", flush=True)
            astray += label == "this checkout" and bool(problems or any(r.never or r.twice for r in figures))
    return int(astray > 0)


async def _campaign(only: Sequence[str], messages: int, outage: float, baseline: Path | None,
                    backends: Sequence[str], late_after: float) -> int:
    failed = 0
    crashes = [name for name in only if name in FAULTS]
    for name in only:
        if name in FAULTS:
            continue
        print(f"-- {name}", flush=True)
        try:
            if name == "redis-hung":
                print(f"   {await _redis_hung(outage)}", flush=True)
                continue
            if name == "redis-slow":
                print(f"   {await _redis_slow(outage)}", flush=True)
                continue
            if name == "redis-polling":
                failed += await _redis_polling(baseline)
                continue
            for label, repo in (("this checkout", REPO), ("baseline", baseline)):
                if repo is None:
                    continue
                figures = await GATEWAY_SCENARIOS[name](messages, repo, outage)
                print(f"   {label}: {figures.line()}", flush=True)
        except RuntimeError as exc:
            print(f"   skipped: {exc}", flush=True)
            failed += 1
    if crashes and await _crashes(crashes, backends, late_after):
        return 1  # a message lost or doubled
    return 1 if failed == len(only) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the campaign and print one line of figures per scenario."""
    parser = argparse.ArgumentParser(prog="python -m bench.reliability", description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--messages", type=int, default=600, help="messages per gateway in the race scenarios")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds each outage lasts")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to compare against")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="the crash campaign's backends")
    parser.add_argument("--late-after", type=float, default=30.0,
                        help="seconds after which an answer of the crash campaign counts as late")
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)} (have: {', '.join(SCENARIOS)})")
    backends = [b for b in args.backends.split(",") if b]
    if set(backends) - set(BACKENDS):
        parser.error(f"unknown backend(s) (have: {', '.join(BACKENDS)})")
    return asyncio.run(_campaign(only, args.messages, args.outage, args.baseline, backends, args.late_after))


if __name__ == "__main__":
    raise SystemExit(main())
