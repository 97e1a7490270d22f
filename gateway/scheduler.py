"""Background jobs (R-G6) on APScheduler 3.x's AsyncIOScheduler, inside the gateway's event loop.

Jobs: idle expiry (every ``idle_check_seconds``, only when ``gateway.idle_expiry_minutes`` is set), the
hygiene sweep on ``gateway.sweep_cron``, and the delivery ledger's recovery (every ``recovery_seconds``). Jobs
live in a MemoryJobStore: they are re-created from the configuration at every start, so there is nothing to
persist (and the 3.x SQLAlchemy job store is synchronous). ``max_instances=1`` + ``coalesce`` keep a slow
sweep from piling up behind itself.

Every worker schedules the same jobs, but idle expiry and the sweep run once per schedule across all of them:
each run first claims its slot (``job:<name>:<slot>`` in `gateway.claims`, shared through Redis) — the cron
fire time for the sweep, the wall-clock interval for idle expiry — and only the worker whose claim succeeds
runs it. Recovery runs on every worker; the ledger hands each lost answer to one of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gateway.claims import Claims, InProcessClaims

__all__ = ["GatewayScheduler"]

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[object]]
Slot = Callable[[], str]
IDLE_JOB_ID = "idle-expiry"
SWEEP_JOB_ID = "hygiene-sweep"
RECOVERY_JOB_ID = "delivery-recovery"
MISFIRE_GRACE_S = 60
# How long a claimed slot is remembered; far longer than any run is late (the misfire grace).
SLOT_TTL_S = 86_400.0


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
        recover_deliveries: Job | None = None,
        recovery_seconds: float = 30.0,
        claims: Claims | None = None,
    ) -> None:
        self._expire_idle = expire_idle
        self._sweep = sweep
        self._idle_minutes = idle_expiry_minutes
        self._sweep_cron = sweep_cron
        self._idle_check = idle_check_seconds
        self._recover = recover_deliveries
        self._recovery_seconds = recovery_seconds
        self._claims = claims or InProcessClaims()
        self._scheduler = AsyncIOScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": AsyncIOExecutor()},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": MISFIRE_GRACE_S},
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
                _guarded(self._once(self._expire_idle, IDLE_JOB_ID, interval_slot(self._idle_check)), IDLE_JOB_ID),
                IntervalTrigger(seconds=self._idle_check, timezone="UTC"),
                id=IDLE_JOB_ID,
                replace_existing=True,
            )
        if self._sweep_cron:
            trigger = CronTrigger.from_crontab(self._sweep_cron, timezone="UTC")
            self._scheduler.add_job(
                _guarded(self._once(self._sweep, SWEEP_JOB_ID, cron_slot(trigger)), SWEEP_JOB_ID),
                trigger,
                id=SWEEP_JOB_ID,
                replace_existing=True,
            )
        if self._recover is not None:
            self._scheduler.add_job(
                _guarded(self._recover, RECOVERY_JOB_ID),
                IntervalTrigger(seconds=self._recovery_seconds, timezone="UTC"),
                id=RECOVERY_JOB_ID,
                replace_existing=True,
            )
        self._scheduler.start()
        log.info("scheduler started with jobs %s", self.job_ids)

    async def aclose(self) -> None:
        """Stop scheduling; a job already running is left to finish on the loop (idempotent)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)


    def _once(self, job: Job, name: str, slot: Slot) -> Job:
        """``job``, run only by the worker that claims this run's slot first."""

        async def run() -> object:
            key = f"job:{name}:{slot()}"
            if not await self._claims.claim(key, SLOT_TTL_S):
                log.debug("scheduled job %s: %s already claimed by another worker", name, key)
                return None
            return await job()

        return run


def interval_slot(seconds: float, clock: Callable[[], float] = time.time) -> Slot:
    """Slots of ``seconds`` on the wall clock: workers whose interval timers fire at different moments of
    one slot agree on it."""
    return lambda: str(int(clock() // seconds))


def cron_slot(trigger: CronTrigger, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Slot:
    """The fire time of the run now due (one of the last ``MISFIRE_GRACE_S`` seconds): every worker's copy of
    the cron job names the same run."""

    def slot() -> str:
        due = trigger.get_next_fire_time(None, clock() - timedelta(seconds=MISFIRE_GRACE_S))
        return due.isoformat() if due is not None else "never"

    return slot


def _guarded(job: Job, name: str) -> Callable[[], Awaitable[None]]:
    """Log a failing job instead of letting APScheduler's generic handler swallow the context."""

    async def run() -> None:
        try:
            await job()
        except Exception:
            log.exception("scheduled job %s failed", name)

    run.__name__ = name.replace("-", "_")
    return run
