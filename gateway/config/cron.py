"""Cron expressions in settings (``gateway.sweep_cron``): read the way the scheduler runs them, so a setting
that would not run is refused when the configuration is read."""

from __future__ import annotations

from apscheduler.triggers.cron import CronTrigger

__all__ = ["cron_trigger"]


def cron_trigger(expression: str) -> CronTrigger:
    """A crontab expression as a UTC trigger: 5 fields, or 6 with seconds first (``*/2 * * * * *``)."""
    fields = expression.split()
    if len(fields) != 6:
        return CronTrigger.from_crontab(expression, timezone="UTC")
    second, minute, hour, day, month, day_of_week = fields
    return CronTrigger(second=second, minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week,
                       timezone="UTC")
