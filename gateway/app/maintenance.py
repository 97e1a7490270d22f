"""Runtimes built for one operator job and closed after it, with no adapter: `run_sweep` (``concord sweep``)
and `session_status` (``concord sessions show``).
"""

from __future__ import annotations

import logging

from rich.progress import Progress as RichProgress

from agent.llm.base import Provider
from agent.llm.models import context_length_for
from gateway.app.runtime_parts import build_runtime, close_runtime
from gateway.config import Settings
from gateway.conversation.scheduler import claim_sweep_slot
from gateway.conversation.session import SessionManager
from gateway.conversation.status_commands import StatusFigures, status_figures
from gateway.conversation.sweep import SweepReport, sweep
from gateway.intake.locks import InProcessLocks
from gateway.store import Store

__all__ = ["SweepSlotTaken", "run_sweep", "session_status", "with_stored_window"]

log = logging.getLogger(__name__)


class SweepSlotTaken(Exception):
    """``concord sweep`` found this run of ``gateway.sweep_cron`` already swept by another process."""

    def __init__(self, slot: str) -> None:
        super().__init__(f"the sweep of {slot} (gateway.sweep_cron) already ran in another process")
        self.slot = slot


async def run_sweep(settings: Settings, dry_run: bool = False, *, show_progress: bool = True,
                    force: bool = False) -> SweepReport:
    """``concord sweep [--dry-run] [--force]``: one hygiene sweep with a progress bar; print the report with
    `print_sweep_report`. Without an LLM configured only a dry run is possible.

    With Redis and ``gateway.sweep_cron`` set, the sweep first claims the schedule's current run, exactly as
    the workers' scheduler does, and raises `SweepSlotTaken` when a worker (or another ``concord sweep``) has
    swept it already — unless ``force``. A dry run changes nothing and claims nothing."""
    if not settings.llm.configured and not dry_run:
        raise RuntimeError("no LLM configured: a sweep needs the summary model (use --dry-run to only list)")
    rt = await build_runtime(settings, provider=None if settings.llm.configured else _NoProvider())
    try:
        cron = settings.gateway.sweep_cron
        if rt.redis is not None and cron and not (dry_run or force):
            slot, claimed = await claim_sweep_slot(rt.claims, cron)
            if not claimed:
                raise SweepSlotTaken(slot)
            log.info("sweep: claimed the run of %s", slot)
        sessions = SessionManager(rt)
        if not show_progress:
            return await sweep(sessions, dry_run=dry_run)
        with RichProgress(transient=True) as bar:
            task = bar.add_task("hygiene sweep", total=None)
            return await sweep(sessions, dry_run=dry_run,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    finally:
        await close_runtime(rt)


async def session_status(settings: Settings, store: Store, session_id: str) -> StatusFigures:
    """The /status figures of a stored session, computed exactly as the chat computes them (``sessions show``).

    Needs no LLM. The window is the one the gateway last ran this session with (stored with its engine state
    after every turn), so the thresholds are the chat's even where this command's environment names another
    model or none; the compression settings (``compression.*``, ``llm.max_tokens``) are this command's own.
    """
    record = await store.sessions.require(session_id)
    settings = with_stored_window(settings, record.engine.context_length)
    rt = await build_runtime(settings, provider=None if settings.llm.configured else _NoProvider(), store=store,
                             locks=InProcessLocks(), probe_windows=False)
    try:
        sessions = SessionManager(rt)
        return status_figures(sessions, await sessions.attach(record, None, remember=False))
    finally:
        await rt.provider.aclose()
        await rt.limits.aclose()  # the store is the caller's
        await rt.arrivals.aclose()
        await rt.claims.aclose()


def with_stored_window(settings: Settings, window: int | None) -> Settings:
    """``settings`` with ``llm.context_length`` set to the window a gateway stored for a session, when known."""
    if not window or window == context_length_for(settings.llm.model, settings.llm.context_length):
        return settings
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"context_length": window})})


class _NoProvider(Provider):
    """Stands in for the LLM in a dry-run sweep, which never calls it."""

    name = "none"
    model = ""

    async def complete(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        raise RuntimeError("a dry-run sweep must not call the LLM")
