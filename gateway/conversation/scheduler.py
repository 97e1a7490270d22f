"""Background jobs (R-G6) on APScheduler 3.x's AsyncIOScheduler, inside the gateway's event loop.

Jobs: idle expiry (every ``idle_check_seconds``, only when ``gateway.idle_expiry_minutes`` is set), the
hygiene sweep on ``gateway.sweep_cron``, the delivery ledger's recovery (every ``recovery_seconds``) and the
inbox's (every ``inbox_seconds``). Jobs
live in a MemoryJobStore: they are re-created from the configuration at every start, so there is nothing to
persist (and the 3.x SQLAlchemy job store is synchronous). ``max_instances=1`` + ``coalesce`` keep a slow
sweep from piling up behind itself.

Every worker schedules the same jobs, but idle expiry and the sweep run once per schedule across all of them:
each run first claims its slot (``job:<name>:<slot>`` in `gateway.intake.claims`, shared through Redis) — the cron
fire time for the sweep, the wall-clock interval for idle expiry — and only the worker whose claim succeeds
runs it. ``concord sweep`` claims the same sweep slot (`claim_sweep_slot`), so a system timer and the workers
never both sweep one slot; and whoever sweeps holds the sweep's job lock meanwhile (`gateway.conversation.sweep`), so two
sweeps never run at once even where the slots do not meet (a timer that knows no schedule, a sweep that
outlasts its slot). The recoveries run on every worker; the ledger and the inbox hand each lost answer
or message to one of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from functools import partial

from apscheduler.executors.asyncio import AsyncIOExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from gateway.config.cron import cron_trigger
from gateway.intake.claims import Claims, InProcessClaims

__all__ = ["SWEEP_JOB_ID", "GatewayScheduler", "claim_sweep_slot", "cron_slot", "interval_slot"]

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[object]]
Slot = Callable[[], str]
IDLE_JOB_ID = "idle-expiry"
SWEEP_JOB_ID = "hygiene-sweep"
RECOVERY_JOB_ID = "delivery-recovery"
INBOX_JOB_ID = "inbox-recovery"
MISFIRE_GRACE_S = 60
# How long a claimed slot is remembered at least; far longer than any run is late (the misfire grace). A cron
# slot is remembered until its next run, so a `concord sweep` days into a weekly slot still finds it swept.
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
        recover_inbox: Job | None = None,
        inbox_seconds: float = 10.0,
        claims: Claims | None = None,
    ) -> None:
        self._expire_idle = expire_idle
        self._sweep = sweep
        self._idle_minutes = idle_expiry_minutes
        self._sweep_cron = sweep_cron
        self._idle_check = idle_check_seconds
        self._recover = recover_deliveries
        self._recovery_seconds = recovery_seconds
        self._recover_inbox = recover_inbox
        self._inbox_seconds = inbox_seconds
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
            trigger = cron_trigger(self._sweep_cron)
            self._scheduler.add_job(
                _guarded(self._once(self._sweep, SWEEP_JOB_ID, cron_slot(trigger), partial(slot_ttl, trigger)),
                         SWEEP_JOB_ID),
                trigger,
                id=SWEEP_JOB_ID,
                replace_existing=True,
            )
        for job, name, seconds in ((self._recover, RECOVERY_JOB_ID, self._recovery_seconds),
                                   (self._recover_inbox, INBOX_JOB_ID, self._inbox_seconds)):
            if job is not None:
                self._scheduler.add_job(_guarded(job, name), IntervalTrigger(seconds=seconds, timezone="UTC"),
                                        id=name, replace_existing=True)
        self._scheduler.start()
        log.info("scheduler started with jobs %s", self.job_ids)

    async def aclose(self) -> None:
        """Stop scheduling; a job already running is left to finish on the loop (idempotent)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def _once(self, job: Job, name: str, slot: Slot, ttl: Callable[[], float] = lambda: SLOT_TTL_S) -> Job:
        """``job``, run only by the worker that claims this run's slot first."""

        async def run() -> object:
            key = f"job:{name}:{slot()}"
            if not await self._claims.claim(key, ttl()):
                log.debug("scheduled job %s: %s already claimed by another worker", name, key)
                return None
            log.debug("scheduled job %s: %s claimed here", name, key)
            return await job()

        return run


async def claim_sweep_slot(claims: Claims, sweep_cron: str) -> tuple[str, bool]:
    """Claim the current run of the sweep on ``sweep_cron``, as the workers' scheduler claims it: the run's
    slot, and whether this caller claimed it (False: another process swept it already)."""
    trigger = cron_trigger(sweep_cron)
    slot = cron_slot(trigger)()
    return slot, await claims.claim(f"job:{SWEEP_JOB_ID}:{slot}", slot_ttl(trigger))


def slot_ttl(trigger: CronTrigger, now: datetime | None = None) -> float:
    """How long a claimed run of ``trigger`` is remembered: at least `SLOT_TTL_S`, and past its next run."""
    now = now or datetime.now(UTC)
    fire = last_fire_time(trigger, now) or now
    following = trigger.get_next_fire_time(None, fire + timedelta(microseconds=1))
    period = (following - fire).total_seconds() if following is not None else 0.0
    return max(SLOT_TTL_S, period + MISFIRE_GRACE_S)


def interval_slot(seconds: float, clock: Callable[[], float] = time.time) -> Slot:
    """Slots of ``seconds`` on the wall clock: workers whose interval timers fire at different moments of
    one slot agree on it."""
    return lambda: str(int(clock() // seconds))


def cron_slot(trigger: CronTrigger, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> Slot:
    """The latest fire time at or before now: every worker's copy of the cron job (run at that time, or late
    within the misfire grace) and a ``concord sweep`` run at any moment until the next one name the same run."""

    def slot() -> str:
        due = last_fire_time(trigger, clock())
        return due.isoformat() if due is not None else "never"

    return slot


# How far back `last_fire_time` looks, widening until it finds a fire time: a second up to a year.
_LOOK_BACK_S = (1, 60, 3_600, 86_400, 32 * 86_400, 367 * 86_400)


def last_fire_time(trigger: CronTrigger, now: datetime) -> datetime | None:
    """The latest time at or before ``now`` that ``trigger`` fires (APScheduler only looks forward)."""
    for back in _LOOK_BACK_S:
        fire = trigger.get_next_fire_time(None, now - timedelta(seconds=back))
        if fire is None or fire > now:
            continue
        while (later := trigger.get_next_fire_time(None, fire + timedelta(microseconds=1))) is not None \
                and later <= now:
            fire = later
        return fire
    return None


def _guarded(job: Job, name: str) -> Callable[[], Awaitable[None]]:
    """Log a failing job instead of letting APScheduler's generic handler swallow the context."""

    async def run() -> None:
        try:
            await job()
        except Exception:
            log.exception("scheduled job %s failed", name)

    run.__name__ = name.replace("-", "_")
    return run
