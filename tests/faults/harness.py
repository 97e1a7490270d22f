"""Real gateway processes on one session, under faults, and the check that nothing was lost.

A scenario starts ``gateways`` real ``concord run`` processes (console adapter, fed through stdin; every one
is the same console chat, so they share one session) and a loop of ``concord sweep`` processes, all on one
database and optionally one Redis, against the fake LLM server in this process. Each user message carries a
marker (``m:A:17``); the fake answers a chat call with ``re <marker>`` and a summary call with every marker
it was shown (so a summary "covers" exactly what its compression saw). While it runs, a fault callback can
kill, pause or fill something. At the end the store is read and the invariants of issue 11 are counted:

* lost — a message sent, not refused as "unavailable", and not stored;
* dropped — a stored user message neither in the active set nor covered by a summary in it;
* orphaned replies — a reply in view whose question is neither in view nor summarized;
* the longest wait, from recovery, for an answer to a message sent before or during the fault.

Used by the bounded fault tests beside it and by ``python -m bench reliability`` for long campaigns.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from gateway.conversation.answers import FAILURE_TEXT
from gateway.intake.holding import UNAVAILABLE_TEXT
from gateway.store.database import create_engine
from gateway.store.models import MessageRow, SessionRow
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.gateway.conftest import is_summary_request

__all__ = ["Figures", "Scenario", "run_scenario"]

REPO = Path(__file__).resolve().parents[2]
MARK = re.compile(r"\bm:[A-Z]:\d+\b")
SUMMARY_TAG = "COVERS:"
REPLY = re.compile(r"^re (m:[A-Z]:\d+)\b")
FILLER = ("the deployment plan moves the cache to the new region after the schema migration is verified "
          "and the on-call rotation has signed off on the rollback steps ") * 8


def _summary(body: dict[str, Any]) -> str:
    seen = sorted(set(MARK.findall(str(body.get("messages")))), key=lambda m: (m[2], int(m[4:])))
    return f"## Goal\nKeep chatting.\n## Progress\n{SUMMARY_TAG} {' '.join(seen)}"


def _responder(summary_delay_s: float) -> Callable[[dict[str, Any]], Reply]:
    def respond(body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            # A real summary takes seconds; the delay keeps the window for a race open.
            return Reply(_summary(body), delay=summary_delay_s)
        messages = body.get("messages") or []
        last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        found = MARK.findall(str(last.get("content")))
        return Reply(f"re {found[-1]}" if found else "re nothing")

    return respond


@dataclass
class Scenario:
    """One run: how many gateways and messages, which database and Redis, and the fault to inject."""

    storage_url: str
    workdir: Path
    redis_url: str | None = None
    gateways: int = 2
    messages_per_gateway: int = 60
    interval_s: float = 0.05
    sweep_every_s: float = 2.0
    summary_delay_s: float = 0.3
    # Called once the gateways are up; it injects the fault and returns when the fault is over (recovery).
    fault: Callable[[], Awaitable[None]] | None = None
    fault_after_s: float = 1.0
    timeout_s: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    # The checkout the processes run from (a baseline to compare against, in the benchmark).
    repo: Path = REPO


@dataclass
class Figures:
    """What a scenario measured."""

    sent: int = 0
    answered: int = 0
    failure_replies: int = 0
    told_unavailable: int = 0
    stored: int = 0
    lost: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    orphaned_replies: list[str] = field(default_factory=list)
    compactions: int = 0
    # From recovery: until each chat's first answer (is anything stuck?), and until the last message sent
    # before recovery was answered (how long the backlog took to drain).
    first_answer_after_recovery_s: float = 0.0
    longest_wait_after_recovery_s: float = 0.0
    seconds: float = 0.0
    stderr_lines: int = 0
    traceback_lines: int = 0

    def line(self) -> str:
        """The figures in one line, for reports."""
        return (f"{self.sent} messages, {self.answered} answered, {self.failure_replies} 'try again', "
                f"{self.told_unavailable} told unavailable, {len(self.lost)} lost, {len(self.dropped)} dropped "
                f"from view, {len(self.orphaned_replies)} orphaned replies, {self.compactions} compactions, "
                f"first answer {self.first_answer_after_recovery_s:.1f} s and last held message answered "
                f"{self.longest_wait_after_recovery_s:.1f} s after recovery, "
                f"{self.stderr_lines} log lines ({self.traceback_lines} traceback lines), {self.seconds:.0f} s")


@dataclass
class _Gateway:
    name: str
    process: asyncio.subprocess.Process
    sent: dict[str, float] = field(default_factory=dict)
    answered: dict[str, float] = field(default_factory=dict)
    failures: int = 0
    unavailable: list[float] = field(default_factory=list)


def gateway_env(llm: FakeLLMServer, scenario: Scenario) -> dict[str, str]:
    """Environment of the gateways: an 8K window, so the agent compacts inside a turn every ~30 messages
    (hygiene's 100% is never reached first); no memory files, no cron."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
    env = {
        **base, "PYTHONPATH": str(scenario.repo), "NO_PROXY": "127.0.0.1",
        "CONCORD_LLM__BASE_URL": llm.openai_base_url, "CONCORD_LLM__MODEL": "gpt-4o",
        "CONCORD_LLM__CONTEXT_LENGTH": "8000", "CONCORD_LLM__MAX_TOKENS": "500",
        # The summary model sees the whole middle, so a summary covers every message it replaced.
        "CONCORD_AUXILIARY__COMPRESSION__MODEL": "gpt-4o-mini",
        "CONCORD_AUXILIARY__COMPRESSION__CONTEXT_LENGTH": "200000",
        "CONCORD_STORAGE__DATABASE_URL": scenario.storage_url,
        "CONCORD_STORAGE__DATA_DIR": str(scenario.workdir / "data"), "CONCORD_MEMORY__ENABLED": "false",
        "CONCORD_GATEWAY__SWEEP_CRON": "off", "CONCORD_GATEWAY__HYGIENE_THRESHOLD": "1.0",
        "CONCORD_COMPRESSION__PROTECT_LAST_N": "4", "CONCORD_COMPRESSION__TARGET_RATIO": "0.05",
        "CONCORD_REDIS__LOCK_TIMEOUT_SECONDS": "60",
    }
    if scenario.redis_url:
        env["CONCORD_REDIS__URL"] = scenario.redis_url
    return {**env, **scenario.env}


async def _start(name: str, env: dict[str, str], log: Path, repo: Path) -> _Gateway:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli.main", "run", cwd=str(repo), env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=log.open("wb"))
    return _Gateway(name, process)


async def _read_replies(gateway: _Gateway) -> None:
    assert gateway.process.stdout is not None
    async for raw in gateway.process.stdout:
        line = raw.decode(errors="replace").strip()
        now = time.monotonic()
        if match := REPLY.match(line):
            gateway.answered.setdefault(match.group(1), now)
        elif line == FAILURE_TEXT:
            gateway.failures += 1
        elif line == UNAVAILABLE_TEXT:
            gateway.unavailable.append(now)


async def _feed(gateway: _Gateway, count: int, interval: float) -> None:
    assert gateway.process.stdin is not None
    for n in range(1, count + 1):
        marker = f"m:{gateway.name}:{n}"
        gateway.sent[marker] = time.monotonic()
        gateway.process.stdin.write(f"{marker} {FILLER}\n".encode())
        await gateway.process.stdin.drain()
        await asyncio.sleep(interval)
    gateway.process.stdin.close()


async def _sweeps(env: dict[str, str], every: float, stop: asyncio.Event, log: Path, repo: Path) -> int:
    runs = 0
    with log.open("ab") as err:
        while not stop.is_set():
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.cli.main", "sweep", cwd=str(repo), env=env,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=err)
            await process.wait()
            runs += 1
            try:
                await asyncio.wait_for(stop.wait(), every)
            except TimeoutError:
                pass
    return runs


async def _ready(logs: Path, gateways: int, within_s: float = 60.0) -> None:
    """Wait until every gateway has opened the store and started its console (a fault must hit a running
    gateway, not its start-up)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        started = sum("adapter console started" in (logs / f"gateway-{i}.log").read_text(errors="replace")
                      for i in range(gateways))
        if started == gateways:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the gateways did not start")


async def run_scenario(scenario: Scenario) -> Figures:
    """Run ``scenario`` to the end (every message answered or the timeout) and count what it left behind."""
    figures = Figures()
    started = time.monotonic()
    async with FakeLLMServer() as llm:
        llm.responder = _responder(scenario.summary_delay_s)
        env = gateway_env(llm, scenario)
        # The sweep compacts by message count, so it races the gateways' own compactions.
        sweep_env = {**env, "CONCORD_GATEWAY__HYGIENE_HARD_MESSAGE_LIMIT": "20"}
        logs = scenario.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        gateways = [await _start(chr(ord("A") + i), env, logs / f"gateway-{i}.log", scenario.repo)
                    for i in range(scenario.gateways)]
        readers = [asyncio.create_task(_read_replies(g)) for g in gateways]
        stop = asyncio.Event()
        sweeper = asyncio.create_task(_sweeps(sweep_env, scenario.sweep_every_s, stop, logs / "sweep.log",
                                                  scenario.repo))
        recovered_at: float | None = None
        fault_started: float | None = None

        async def inject() -> None:
            nonlocal recovered_at, fault_started
            if scenario.fault is None:
                return
            await asyncio.sleep(scenario.fault_after_s)
            fault_started = time.monotonic()
            await scenario.fault()
            recovered_at = time.monotonic()

        try:
            # Messages and the fault start together once every gateway runs (start-up takes seconds here).
            await asyncio.wait_for(_ready(logs, len(gateways)), scenario.timeout_s)
            await asyncio.wait_for(asyncio.gather(
                inject(), *(_feed(g, scenario.messages_per_gateway, scenario.interval_s) for g in gateways),
                *(g.process.wait() for g in gateways)), scenario.timeout_s)
        finally:
            stop.set()
            for g in gateways:
                if g.process.returncode is None:
                    g.process.kill()
                    await g.process.wait()
            await asyncio.gather(*readers, return_exceptions=True)
            await sweeper
        figures.seconds = time.monotonic() - started
        for g in gateways:
            figures.sent += len(g.sent)
            figures.answered += len(g.answered)
            figures.failure_replies += g.failures
            figures.told_unavailable += len(g.unavailable)
        if recovered_at is not None and fault_started is not None:
            waits = [answered - recovered_at for g in gateways for marker, answered in g.answered.items()
                     if g.sent[marker] <= recovered_at and answered > recovered_at]
            figures.longest_wait_after_recovery_s = max(waits, default=0.0)
            firsts = [min((t for t in g.answered.values() if t > recovered_at), default=recovered_at) - recovered_at
                      for g in gateways]
            figures.first_answer_after_recovery_s = max(firsts, default=0.0)
        for log in logs.iterdir():
            lines = log.read_text(errors="replace").splitlines()
            figures.stderr_lines += len(lines)
            figures.traceback_lines += sum(1 for line in lines if line.startswith(("Traceback", "  File ")))
    unavailable = figures.told_unavailable
    await _check_store(scenario.storage_url, [m for g in gateways for m in g.sent], unavailable, figures)
    return figures


async def _check_store(url: str, sent: list[str], unavailable: int, figures: Figures) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            sessions = (await conn.execute(select(SessionRow.id, SessionRow.ended_at, SessionRow.compactions)
                                           .where(SessionRow.platform == "console"))).all()
            rows = (await conn.execute(select(MessageRow.session_id, MessageRow.role, MessageRow.payload,
                                              MessageRow.active)
                                       .join(SessionRow, SessionRow.id == MessageRow.session_id)
                                       .where(SessionRow.platform == "console")
                                       .order_by(MessageRow.session_id, MessageRow.seq))).all()
    finally:
        await engine.dispose()
    figures.compactions = sum(s.compactions for s in sessions)
    open_ids = {s.id for s in sessions if s.ended_at is None}
    stored: set[str] = set()
    in_view: set[str] = set()
    summarized: set[str] = set()
    replies_in_view: list[str] = []
    for row in rows:
        text = row.payload
        if SUMMARY_TAG in text:
            if row.active and row.session_id in open_ids:
                summarized.update(MARK.findall(text.split(SUMMARY_TAG, 1)[1]))
            continue
        markers = MARK.findall(text)
        if row.role == "user":
            stored.update(markers)
            if row.active and row.session_id in open_ids:
                in_view.update(markers)
        elif row.role == "assistant" and row.active and row.session_id in open_ids:
            replies_in_view.extend(markers)
    figures.stored = len(stored)
    # A message refused as "unavailable" was told so; any other missing one is lost.
    missing = sorted(set(sent) - stored)
    figures.lost = missing[unavailable:] if unavailable else missing
    figures.dropped = sorted(stored - in_view - summarized)
    figures.orphaned_replies = sorted(m for m in replies_in_view if m not in in_view and m not in summarized)
