"""Background jobs (R-G6) on APScheduler 3.x's AsyncIOScheduler, inside the gateway's event loop.

Two jobs: idle expiry (every ``idle_check_seconds``, only when ``gateway.idle_expiry_minutes`` is set) and
the hygiene sweep on ``gateway.sweep_cron``. Jobs live in a MemoryJobStore: they are re-created from the
configuration at every start, so there is nothing to persist (and the 3.x SQLAlchemy job store is
synchronous). ``max_instances=1`` + ``coalesce`` keep a slow sweep from piling up behind itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

__all__ = ["GatewayScheduler"]

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[object]]
IDLE_JOB_ID = "idle-expiry"
SWEEP_JOB_ID = "hygiene-sweep"


class GatewayScheduler:
    """Owns the AsyncIOScheduler; `start` must run inside the gateway's event loop."""

    def __init__(
        self,
        *,
        expire_idle: Job,
        sweep: Job,
        idle_expiry_minutes: int | None,
        sweep_cron: str | None,
        idle_check_seconds: float = 60.0,
    ) -> None:
        self._expire_idle = expire_idle
        self._sweep = sweep
        self._idle_minutes = idle_expiry_minutes
        self._sweep_cron = sweep_cron
        self._idle_check = idle_check_seconds
        self._scheduler = AsyncIOScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": AsyncIOExecutor()},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 60},
            timezone="UTC",
        )

    @property
    def job_ids(self) -> list[str]:
        """Ids of the jobs currently scheduled."""
        return sorted(job.id for job in self._scheduler.get_jobs())

    def start(self) -> None:
        """Schedule the configured jobs and start ticking."""
        if self._idle_minutes:
            self._scheduler.add_job(
                _guarded(self._expire_idle, IDLE_JOB_ID),
                IntervalTrigger(seconds=self._idle_check, timezone="UTC"),
                id=IDLE_JOB_ID,
                replace_existing=True,
            )
        if self._sweep_cron:
            self._scheduler.add_job(
                _guarded(self._sweep, SWEEP_JOB_ID),
                CronTrigger.from_crontab(self._sweep_cron, timezone="UTC"),
                id=SWEEP_JOB_ID,
                replace_existing=True,
            )
        self._scheduler.start()
        log.info("scheduler started with jobs %s", self.job_ids)

    async def aclose(self) -> None:
        """Stop scheduling; a job already running is left to finish on the loop (idempotent)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)


def _guarded(job: Job, name: str) -> Callable[[], Awaitable[None]]:
    """Log a failing job instead of letting APScheduler's generic handler swallow the context."""

    async def run() -> None:
        try:
            await job()
        except Exception:
            log.exception("scheduled job %s failed", name)

    run.__name__ = name.replace("-", "_")
    return run
