"""Two real gateways and `concord sweep` on one session, under faults: nothing lost, nothing dropped from view,
no chat stuck after recovery. Each fault hits a private service (its own Redis, PostgreSQL or
tmpfs) stopped by PID; the shared services are never touched. Bounded forms of `python -m bench reliability`.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.scratch_db import scratch_postgres
from gateway.store import upgrade_database
from tests.faults.harness import Figures, Scenario, run_scenario
from tests.faults.services import PrivatePostgres, SmallDisk, free_port, private_postgres, small_disk
from tests.locks.conftest import PrivateRedis

# Every chat answers again within a few seconds of recovery (the longest backoff is 2 s); draining what was
# held behind it takes longer on two busy cores.
FIRST_ANSWER_LIMIT_S = 5.0
DRAIN_LIMIT_S = 20.0


def _require(reason: str) -> None:
    if os.environ.get("CONCORD_REQUIRE_SERVICES", "") not in ("", "0", "false"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        _require("redis-server binary not found")
    server = PrivateRedis(binary=str(binary), port=free_port(), workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def own_postgres() -> Iterator[PrivatePostgres]:
    with private_postgres() as server:
        if isinstance(server, str):
            _require(f"no private PostgreSQL: {server}")
        yield server


def _assert_nothing_lost(figures: Figures) -> None:
    print(figures.line())  # the figures for the README, with -s
    assert figures.lost == [], f"{len(figures.lost)} messages lost: {figures.lost[:10]}"
    assert figures.dropped == [], f"{len(figures.dropped)} dropped from view: {figures.dropped[:10]}"
    assert figures.orphaned_replies == [], f"replies without their question: {figures.orphaned_replies[:10]}"
    assert figures.failure_replies == 0 and figures.told_unavailable == 0
    assert figures.answered == figures.sent


async def test_a_gateway_and_a_sweep_on_sqlite_without_redis(tmp_path: Path) -> None:
    # A second `concord run` on one SQLite database is refused by its lock file, but a system-cron
    # `concord sweep` still races the gateway there with nothing shared.
    figures = await run_scenario(Scenario(storage_url=f"sqlite+aiosqlite:///{tmp_path}/concord.db",
                                          workdir=tmp_path, gateways=1, messages_per_gateway=60))
    _assert_nothing_lost(figures)
    assert figures.compactions >= 2


async def test_two_gateways_and_a_sweep_on_postgres_without_redis(tmp_path: Path, postgres_url: str) -> None:
    async with scratch_postgres(postgres_url, "concord_faults") as url:
        await upgrade_database(url)
        figures = await run_scenario(Scenario(storage_url=url, workdir=tmp_path, messages_per_gateway=40))
    _assert_nothing_lost(figures)
    assert figures.compactions >= 2


async def test_two_gateways_and_a_sweep_on_postgres_with_redis(tmp_path: Path, postgres_url: str,
                                                               own_redis: PrivateRedis) -> None:
    async with scratch_postgres(postgres_url, "concord_faults") as url:
        await upgrade_database(url)
        figures = await run_scenario(Scenario(storage_url=url, workdir=tmp_path, redis_url=own_redis.url,
                                              messages_per_gateway=40))
    _assert_nothing_lost(figures)
    assert figures.compactions >= 2


async def test_redis_killed_mid_run(tmp_path: Path, postgres_url: str, own_redis: PrivateRedis) -> None:
    async def kill() -> None:
        own_redis.kill()  # for good: the gateways and sweeps go on without locks (fail-open)

    async with scratch_postgres(postgres_url, "concord_faults") as url:
        await upgrade_database(url)
        figures = await run_scenario(Scenario(storage_url=url, workdir=tmp_path, redis_url=own_redis.url,
                                              messages_per_gateway=40, fault=kill, fault_after_s=1.0))
    _assert_nothing_lost(figures)
    warnings = _lines(tmp_path, "lock backend unavailable")
    assert 1 <= warnings <= 12, f"{warnings} lock warnings: throttled to one per failure class and window"


async def test_postgres_stopped_and_restarted(tmp_path: Path, own_postgres: PrivatePostgres) -> None:
    await upgrade_database(own_postgres.url)

    async def outage() -> None:
        await asyncio.to_thread(own_postgres.stop)
        await asyncio.sleep(3.0)
        await asyncio.to_thread(own_postgres.start)

    figures = await run_scenario(Scenario(storage_url=own_postgres.url, workdir=tmp_path, messages_per_gateway=30,
                                          interval_s=0.15, fault=outage, fault_after_s=1.0))
    _assert_nothing_lost(figures)
    assert figures.first_answer_after_recovery_s <= FIRST_ANSWER_LIMIT_S
    assert figures.longest_wait_after_recovery_s <= DRAIN_LIMIT_S
    assert _lines(tmp_path, "storage is back after") >= 1
    # One throttled line per process and 30 s window, not one (or a traceback) per held message.
    assert _lines(tmp_path, "storage unavailable (") <= 8


async def test_sqlite_on_a_full_disk(tmp_path: Path) -> None:
    with small_disk(16) as disk:
        if isinstance(disk, str):
            pytest.skip(f"no full-disk test here: {disk}")
        assert isinstance(disk, SmallDisk)
        await upgrade_database(f"sqlite+aiosqlite:///{disk.path}/concord.db")

        async def full() -> None:
            await asyncio.to_thread(disk.fill)
            await asyncio.sleep(3.0)
            disk.free()

        figures = await run_scenario(Scenario(storage_url=f"sqlite+aiosqlite:///{disk.path}/concord.db",
                                              workdir=tmp_path, gateways=1, messages_per_gateway=40,
                                              interval_s=0.1, fault=full, fault_after_s=1.0))
    _assert_nothing_lost(figures)
    assert figures.first_answer_after_recovery_s <= FIRST_ANSWER_LIMIT_S
    assert figures.longest_wait_after_recovery_s <= DRAIN_LIMIT_S
    assert _lines(tmp_path, "storage unavailable (") >= 1


def _lines(workdir: Path, text: str) -> int:
    return sum(log.read_text(errors="replace").count(text) for log in (workdir / "logs").iterdir())
