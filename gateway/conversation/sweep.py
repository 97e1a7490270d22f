"""Scheduled maintenance (R-G6): idle expiry and the hygiene sweep, plus the sweep's report.

The sweep asks the store's indexed query which open sessions are over a limit and loads only those; each is
handled under its turn lock, exactly as if a message had arrived, so it never races a live conversation. A
sweep's compaction has no sender: its summary calls are charged to the session's chat (``limits.*``).

Only one sweep runs at a time across every process sharing the locks: a sweep holds the ``hygiene-sweep`` job
lock while it runs, and one that finds it held (a worker's scheduled sweep, a ``concord sweep`` from cron, a
long sweep still going when the next run is due) does nothing. Dry runs change nothing and take no lock.
``concord sweep`` runs the same function once (with a progress bar) for system cron.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from rich.console import Console
from rich.table import Table

from agent.events import EventSink
from agent.llm.models import context_length_for
from gateway.conversation.compaction import run_hygiene
from gateway.conversation.scheduler import SWEEP_JOB_ID
from gateway.conversation.session import END_IDLE, SessionManager
from gateway.intake.keys import SessionKey
from gateway.ops.metrics import KIND_SWEEP, fan_out
from gateway.policy.limits import RateLimiter, summaries_charged_to

__all__ = ["SweepEntry", "SweepReport", "expire_idle", "print_sweep_report", "sweep", "sweep_token_limit"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]  # (done, total)


@dataclass(frozen=True, slots=True)
class SweepEntry:
    """One session the indexed query returned, and what the sweep did with it."""

    session_id: str
    chat: str
    messages: int
    tokens: int
    reason: str
    outcome: str  # compressed | skipped: … | not needed | error: …
    tokens_after: int | None = None


@dataclass
class SweepReport:
    """The whole sweep: candidates from the index, per-session outcomes, timing."""

    dry_run: bool
    token_limit: int
    message_limit: int
    entries: list[SweepEntry] = field(default_factory=list)
    seconds: float = 0.0
    # True when it did nothing because another process was sweeping (it holds the job lock).
    running_elsewhere: bool = False

    @property
    def compressed(self) -> int:
        """Sessions compressed by this sweep."""
        return sum(1 for e in self.entries if e.outcome == "compressed")

    @property
    def failed(self) -> int:
        """Sessions whose handling raised."""
        return sum(1 for e in self.entries if e.outcome.startswith("error"))


def sweep_token_limit(sessions: SessionManager) -> int:
    """Hygiene's token limit for the configured model's window (what the indexed query filters on)."""
    settings = sessions.rt.settings
    window = context_length_for(settings.llm.model, settings.llm.context_length)
    return max(1, int(window * settings.gateway.hygiene_threshold))


async def sweep(sessions: SessionManager, *, dry_run: bool = False, progress: Progress | None = None,
                events: EventSink | None = None) -> SweepReport:
    """Run hygiene over every open session the indexed query reports over a limit — unless another process is
    sweeping (then the report says so, and nothing was done). The runtime's metrics count its compressions as
    the sweep's; ``events`` hears them too."""
    rt = sessions.rt
    if dry_run:
        return await _sweep(sessions, dry_run=True, progress=progress, events=events)
    async with rt.locks.try_job_lock(SWEEP_JOB_ID) as ours:
        if ours:
            return await _sweep(sessions, dry_run=False, progress=progress, events=events)
    log.info("sweep skipped: another process is sweeping now")
    return SweepReport(False, sweep_token_limit(sessions), rt.settings.gateway.hygiene_hard_message_limit,
                       running_elsewhere=True)


async def _sweep(sessions: SessionManager, *, dry_run: bool, progress: Progress | None,
                 events: EventSink | None) -> SweepReport:
    started = time.perf_counter()
    rt = sessions.rt
    events = fan_out(rt.metrics.tagged(KIND_SWEEP), events)
    limit_tokens = sweep_token_limit(sessions)
    limit_messages = rt.settings.gateway.hygiene_hard_message_limit
    candidates = await rt.store.sessions.list_needing_hygiene(limit_tokens, limit_messages)
    report = SweepReport(dry_run, limit_tokens, limit_messages)
    limiter = RateLimiter(rt.settings.limits, rt.limits, rt.clock)
    for done, record in enumerate(candidates, start=1):
        key = SessionKey(record.platform, record.chat_key)
        try:
            with summaries_charged_to(limiter, [limiter.chat_subject(key)]):
                async with rt.locks.session_turn(str(key)):
                    current = await rt.store.sessions.get(record.id)
                    if current is None or not current.active:
                        continue  # ended while we were getting here
                    live = await sessions.attach(current, None, remember=False)
                    outcome = await run_hygiene(sessions, live, dry_run=dry_run, events=events)
            check = outcome.check
            if outcome.compressed and outcome.result is not None:
                text, after = "compressed", outcome.result.tokens_after
            else:
                text, after = (f"skipped: {outcome.skipped}" if outcome.skipped else "not needed"), None
            report.entries.append(SweepEntry(record.id, str(key), check.messages, check.tokens,
                                             check.reason, text, after))
        except Exception as exc:
            log.exception("sweep failed on session %s", record.id)
            report.entries.append(SweepEntry(record.id, str(key), record.message_count, record.token_count, "",
                                             f"error: {type(exc).__name__}"))
        finally:
            if progress is not None:
                progress(done, len(candidates))
    if not dry_run and await rt.store.erasure.purge_if_due():
        log.info("sweep: SQLite's full-text indexes rewritten without the words of erased messages")
    report.seconds = time.perf_counter() - started
    log.info("sweep: %d candidate(s), %d compressed, %d failed in %.2f s", len(report.entries),
             report.compressed, report.failed, report.seconds)
    return report


async def expire_idle(sessions: SessionManager) -> list[str]:
    """End every open session idle for longer than ``gateway.idle_expiry_minutes``; return their ids."""
    rt = sessions.rt
    minutes = rt.settings.gateway.idle_expiry_minutes
    if not minutes:
        return []
    cutoff = rt.clock() - timedelta(minutes=minutes)
    ended: list[str] = []
    for record in await rt.store.sessions.list_idle(cutoff):
        key = SessionKey(record.platform, record.chat_key)
        async with rt.locks.session_turn(str(key)):
            current = await rt.store.sessions.get(record.id)
            if current is None or not current.active or current.last_active_at >= cutoff:
                continue  # a message arrived while we waited for the lock
            await sessions.end(record.id, key, END_IDLE)
            ended.append(record.id)
    if ended:
        log.info("idle expiry ended %d session(s)", len(ended))
    return ended


def print_sweep_report(report: SweepReport, console: Console | None = None) -> None:
    """Print the sweep's summary table (``concord sweep``)."""
    console = console or Console()
    if report.running_elsewhere:
        console.print("Another process is sweeping right now (it holds the sweep's job lock); nothing done.")
        return
    title = "Hygiene sweep (dry run)" if report.dry_run else "Hygiene sweep"
    table = Table(title=title)
    for column in ("session", "chat", "messages", "tokens", "reason", "outcome", "tokens after"):
        table.add_column(column, justify="right" if column in ("messages", "tokens", "tokens after") else "left")
    for e in report.entries:
        table.add_row(e.session_id, e.chat, f"{e.messages:,}", f"{e.tokens:,}", e.reason or "-", e.outcome,
                      f"{e.tokens_after:,}" if e.tokens_after is not None else "-")
    console.print(table)
    console.print(f"{len(report.entries)} session(s) over a limit (> {report.token_limit:,} tokens or "
                  f"> {report.message_limit:,} messages); {report.compressed} compressed, {report.failed} failed; "
                  f"{report.seconds:.2f} s")
