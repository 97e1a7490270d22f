"""The scheduler registers the configured jobs, runs them on the loop and survives a failing job."""

from __future__ import annotations

import asyncio

from gateway.scheduler import IDLE_JOB_ID, SWEEP_JOB_ID, GatewayScheduler


async def test_jobs_follow_the_configuration() -> None:
    async def nothing() -> None:
        return None

    off = GatewayScheduler(expire_idle=nothing, sweep=nothing, idle_expiry_minutes=None, sweep_cron=None)
    off.start()
    assert off.job_ids == []
    await off.aclose()
    on = GatewayScheduler(expire_idle=nothing, sweep=nothing, idle_expiry_minutes=30, sweep_cron="*/5 * * * *")
    on.start()
    assert on.job_ids == sorted([IDLE_JOB_ID, SWEEP_JOB_ID])
    await on.aclose()
    await on.aclose()  # idempotent


async def test_idle_job_ticks_on_the_loop_and_a_failure_does_not_stop_it() -> None:
    calls: list[int] = []

    async def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first run fails")

    async def nothing() -> None:
        return None

    scheduler = GatewayScheduler(expire_idle=flaky, sweep=nothing, idle_expiry_minutes=1, sweep_cron=None,
                                 idle_check_seconds=0.05)
    scheduler.start()
    try:
        for _ in range(100):
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await scheduler.aclose()
    assert len(calls) >= 3
