"""The scheduler registers the configured jobs, runs them on the loop and survives a failing job."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from apscheduler.triggers.cron import CronTrigger

from gateway.config.cron import cron_trigger
from gateway.conversation.scheduler import (
    IDLE_JOB_ID,
    SWEEP_JOB_ID,
    GatewayScheduler,
    cron_slot,
    interval_slot,
    slot_ttl,
)


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


def test_every_workers_copy_of_a_job_names_the_same_run() -> None:
    trigger = CronTrigger.from_crontab("*/30 * * * *", timezone="UTC")
    fired = datetime(2026, 12, 1, 12, 30, tzinfo=UTC)
    # Workers whose timers fire a few seconds apart (or late, within the misfire grace) agree on the run, and
    # so does a `concord sweep` started by a system timer at any moment before the next run.
    slots = {cron_slot(trigger, clock=lambda at=at: at)() for at in
             (fired, fired.replace(second=2), fired.replace(second=45), fired.replace(minute=59, second=59))}
    assert slots == {fired.isoformat()}
    assert cron_slot(trigger, clock=lambda: fired.replace(hour=13))() == fired.replace(hour=13).isoformat()
    daily = cron_trigger("15 4 * * 1")  # Tuesdays at 04:15 (APScheduler counts weekdays from Monday = 0)
    assert cron_slot(daily, clock=lambda: datetime(2026, 12, 4, 9, 0, tzinfo=UTC))() == \
        datetime(2026, 12, 1, 4, 15, tzinfo=UTC).isoformat()
    assert slot_ttl(daily, datetime(2026, 12, 4, 9, 0, tzinfo=UTC)) == 7 * 86_400 + 60  # remembered past the next
    assert slot_ttl(trigger, fired) == 86_400
    seconds = cron_trigger("*/2 * * * * *")  # six fields: seconds first
    assert cron_slot(seconds, clock=lambda: fired.replace(second=5, microsecond=10))() == \
        fired.replace(second=4).isoformat()
    assert interval_slot(60, clock=lambda: 120.0)() == interval_slot(60, clock=lambda: 179.9)() == "2"
    assert interval_slot(60, clock=lambda: 180.0)() == "3"
