"""The message path (R-G2, R-G4), readable top to bottom:

    inbound ─▶ dedupe ─▶ access (ignore / refuse / pairing code) ─▶ session key
            ─▶ /stop? cancel the running turn, stop
            ─▶ unaddressed group line? observe: batch it into the session (gateway.observe), stop
            ─▶ busy mode (interrupt the sender's turn / collect a burst) ─▶ queue depth cap
            ─▶ per-session FIFO ─▶ turn lock ─▶ load session (+ the group's pending lines)
            ─▶ command? run it                                            ┐
            ─▶ else rate limits / budgets ─▶ hygiene (R-G3) ─▶ agent turn  ├─ persist (inside)
            ─▶ release lock ─▶ send the reply (or finish the live one)    ┘

In groups the bot answers only when mentioned, replied to or commanded (in a free-response chat, always).
Refusals are quiet in groups and one short line in a DM; a message over a rate limit or budget gets one notice
saying when it resets, and never reaches the model. Other group lines are stored in the session as they come
(``gateway.group_history: observe``), or, in ``addressed`` mode, kept tagged with the speaker's name in a
bounded per-session buffer (``gateway.group_context_limit`` newest lines) and handed to the agent in front of
the next message that addresses it.

When the database is down, a message that meets the outage is held — it stays first in its session's queue
and is retried with backoff (outside the turn lock) until storage is back, then answered; the session's later
messages wait behind it in order. Past ``gateway.held_messages_per_session`` waiting messages, the next ones
are answered plainly that the bot is unavailable instead of being queued without bound.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter, OrderedDict, deque
from datetime import timedelta
from typing import Any

from adapters.base import Adapter, Inbound
from agent.events import EventSink, Notice
from agent.turn import StopReason, TurnResult
from gateway.access import AccessPolicy, Verdict, user_ref
from gateway.busy import Batch, RunningTurn, RunningTurns
from gateway.commands import Command, CommandContext, is_admin, run_command, stop_command
from gateway.compaction import run_hygiene
from gateway.continuity import with_note
from gateway.durability import backoff_delay, is_storage_outage
from gateway.keys import SessionKey, session_key
from gateway.limits import RateLimiter
from gateway.logthrottle import LogThrottle, describe_cause
from gateway.metrics import fan_out
from gateway.observe import GroupObserver
from gateway.pairing import Pairing
from gateway.prompt import speaker_tag
from gateway.queues import SessionQueues
from gateway.replies import cap_reply
from gateway.session import LiveSession, SessionManager
from gateway.turns import agent_turn

__all__ = ["GroupContext", "Router"]

log = logging.getLogger(__name__)

FAILURE_TEXT = "⚠️ Something went wrong while handling your message. Please try again."
EMPTY_ANSWER = "(The model returned an empty answer.)"
INTERRUPTED_TEXT = "⚠️ I was interrupted (the bot is restarting) before I could answer. Ask me to continue."
CONTEXT_HEADER = "[Earlier messages in this channel, not addressed to you]"
REFUSED_DM = "Sorry, this bot is not available to you."
PAIRING_TEXT = ("This bot answers people an admin approved. Your pairing code is {code}: "
                "ask an admin to send /approve {code}.")
QUEUE_FULL = "⏳ {waiting} messages are already waiting here; send this again once they are answered."
STOPPED_TEXT = "⏹️ Stopped."
INTERRUPTED_BY_NEW_TEXT = "⏹️ Interrupted by a newer message."
UNAVAILABLE_TEXT = ("⚠️ I'm unavailable right now (my storage is down) and cannot keep more messages. "
                    "Please send this again in a few minutes.")


class GroupContext:
    """Unaddressed group lines per session: the newest ``limit`` of each, at most ``max_chars`` in all (they go
    in front of one question, and long chatter must not fill the model's window), for at most
    ``max_sessions``."""

    def __init__(self, limit: int, max_sessions: int = 10_000, max_chars: int = 16_000) -> None:
        self.limit = limit
        self.max_sessions = max_sessions
        self.max_chars = max_chars
        self._lines: OrderedDict[SessionKey, deque[str]] = OrderedDict()

    def add(self, key: SessionKey, line: str) -> None:
        """Keep ``line``; the oldest line of the session falls out past the limit."""
        if self.limit <= 0:
            return
        lines = self._lines.get(key)
        if lines is None:
            lines = self._lines[key] = deque(maxlen=self.limit)
        lines.append(line if len(line) <= self.max_chars else line[: self.max_chars - 1] + "…")
        while len(lines) > 1 and sum(map(len, lines)) > self.max_chars:
            lines.popleft()
        self._lines.move_to_end(key)
        while len(self._lines) > self.max_sessions:
            self._lines.popitem(last=False)

    def take(self, key: SessionKey) -> list[str]:
        """The kept lines of ``key`` (oldest first), forgetting them."""
        return list(self._lines.pop(key, ()))


class Router:
    """Routes inbound messages from every adapter through the chain above."""

    def __init__(self, sessions: SessionManager, *, events: EventSink | None = None,
                 dedupe_size: int = 4096) -> None:
        self.sessions = sessions
        self.settings = sessions.rt.settings
        self.metrics = sessions.rt.metrics
        # The runtime's metrics always listen; a sink given here hears every event too.
        self.events: EventSink = self.metrics if events is None else fan_out(self.metrics, events)
        self.context = GroupContext(self.settings.gateway.group_context_limit)
        self._queues: SessionQueues[SessionKey, tuple[Inbound | Batch, Adapter]] = SessionQueues(self._process)
        self._seen: OrderedDict[tuple[str, str, str | None, str], None] = OrderedDict()
        self._dedupe_size = dedupe_size
        rt = sessions.rt
        self.access = AccessPolicy.from_settings(self.settings)
        self.limiter = RateLimiter(self.settings.limits, rt.limits, rt.clock)
        self.pairing = (Pairing(rt.store.chat_settings, timedelta(minutes=self.settings.gateway.pairing_code_minutes),
                                rt.clock) if self.settings.gateway.dm_policy == "pairing" else None)
        # Addressed messages waiting per session (``limits.session_queue_depth``); entries leave at zero.
        self._waiting: Counter[SessionKey] = Counter()
        self.running = RunningTurns()
        self.observing = self.settings.gateway.group_history == "observe"
        self.observer = GroupObserver(sessions)
        self._batches: dict[tuple[SessionKey, str], Batch] = {}
        self._failures = LogThrottle(log)

    async def handle(self, inbound: Inbound, adapter: Adapter) -> None:
        """Take one inbound message; returns once it has been handled (queued behind its session's earlier ones)."""
        ident = (inbound.platform, inbound.chat_id, inbound.thread_id, inbound.message_id)
        if ident in self._seen:
            log.info("duplicate delivery of %s ignored", ident)
            return
        self._seen[ident] = None
        if len(self._seen) > self._dedupe_size:
            self._seen.popitem(last=False)
        admin = is_admin(inbound.platform, inbound.user_id, self.settings.gateway.admins, inbound.is_admin_hint)
        if not await self._admitted(inbound, adapter, admin):
            return
        if inbound.chat_type != "dm" and not inbound.mentions_bot and self.access.free_response(inbound):
            inbound = dataclasses.replace(inbound, mentions_bot=True)
        key = session_key(inbound, self.settings.gateway.scope_for(inbound.platform))
        command = Command.of(inbound)
        if command is not None and command.name == "stop":
            # Never queued: it acts on the turn the queue is busy with.
            reply = stop_command(self.running.get(key), inbound, admin)
            if reply:
                await adapter.send(inbound, reply)
            return
        addressed = _addressed_anywhere(inbound)
        if not addressed and self.observing and key.is_group:
            self.observer.add(key, _observed_line(inbound), inbound.user_id)  # batched, no lock per line
            return
        storage = self.sessions.rt.storage
        if storage.down and self._queues.pending(key) >= self.settings.gateway.held_messages_per_session:
            storage.throttle.warning("hold-full", "storage unavailable and %d messages already held for %s: "
                                     "answering that the bot is unavailable", self._queues.pending(key), key)
            del self._seen[ident]  # a redelivery after recovery is a new chance, not a duplicate
            if addressed:
                await adapter.send(inbound, UNAVAILABLE_TEXT)
            return
        if not addressed:
            await self._queues.submit(key, (inbound, adapter))
            return
        mode = self.settings.gateway.busy_mode
        if mode == "interrupt" and command is None:
            running = self.running.get(key)
            if running is not None and running.user_id == inbound.user_id:
                running.stop("interrupt")
        if mode == "collect" and command is None:
            await self._collect(key, inbound, adapter, admin)
            return
        await self._submit(key, inbound, adapter, admin)

    async def _collect(self, key: SessionKey, inbound: Inbound, adapter: Adapter, admin: bool) -> None:
        """``collect``: join the sender's batch still waiting in this session, or start one."""
        slot = (key, inbound.user_id)
        batch = self._batches.get(slot)
        if batch is not None and not batch.started:
            batch.add(inbound)
            await batch.finished.wait()
            return
        batch = self._batches[slot] = Batch(inbound)
        try:
            await self._submit(key, batch, adapter, admin)
        finally:
            batch.finished.set()
            if self._batches.get(slot) is batch:
                del self._batches[slot]

    async def _submit(self, key: SessionKey, item: Inbound | Batch, adapter: Adapter, admin: bool) -> None:
        """Queue an addressed message, unless ``limits.session_queue_depth`` are waiting already (admins and the
        console are exempt): then the sender is told, and nothing is queued."""
        if admin or key.platform == "console":
            await self._queues.submit(key, (item, adapter))
            return
        if self._waiting[key] >= self.settings.limits.session_queue_depth:
            inbound = item.first if isinstance(item, Batch) else item
            if isinstance(item, Batch):
                item.started = True  # refused: a message sent meanwhile starts a batch of its own
            await adapter.send(inbound, QUEUE_FULL.format(waiting=self._waiting[key]))
            return
        self._waiting[key] += 1
        try:
            await self._queues.submit(key, (item, adapter))
        finally:
            self._waiting[key] -= 1
            if self._waiting[key] <= 0:
                del self._waiting[key]

    async def _admitted(self, inbound: Inbound, adapter: Adapter, admin: bool) -> bool:
        """Apply the access policy: True to go on; otherwise the refusal (if any is due) was sent."""
        approved = (self.pairing is not None and inbound.chat_type == "dm" and not admin
                    and await self.pairing.is_approved(user_ref(inbound)))
        verdict = self.access.decide(inbound, admin=admin, approved=approved)
        if verdict is Verdict.ALLOW:
            return True
        log.info("access: %s from %s in %s:%s (%s)", verdict, user_ref(inbound), inbound.platform, inbound.chat_id,
                 inbound.chat_type)
        if inbound.chat_type == "dm":
            if verdict is Verdict.PAIR and self.pairing is not None:
                await adapter.send(inbound, PAIRING_TEXT.format(code=await self.pairing.code_for(user_ref(inbound))))
            elif verdict is Verdict.REFUSE:
                await adapter.send(inbound, REFUSED_DM)
        return False

    def cancel(self, inbound: Inbound) -> bool:
        """Stop the turn running in ``inbound``'s session, as /stop does (the console's Ctrl-C); False when none
        runs. Messages queued behind it are still answered."""
        running = self.running.get(session_key(inbound, self.settings.gateway.scope_for(inbound.platform)))
        if running is None or running.stopped is not None:
            return False
        running.stop("stop")
        return True

    async def aclose(self, grace_seconds: float = 30.0) -> None:
        """Stop taking messages and let queued ones finish (graceful shutdown); store every observed line."""
        await self._queues.aclose(grace_seconds)
        await self.observer.aclose()

    async def _process(self, key: SessionKey, item: tuple[Inbound | Batch, Adapter]) -> None:
        queued, adapter = item
        inbound = await queued.take(self.settings.gateway.collect_window_seconds) if isinstance(queued, Batch) \
            else queued
        self.metrics.record_message()
        storage = self.sessions.rt.storage
        attempt = 0
        while True:
            try:
                async with self.sessions.rt.locks.session_turn(str(key)):
                    replies = await self._chain(key, inbound, adapter)
                if attempt:
                    storage.succeeded()
                break
            except Exception as exc:
                if not is_storage_outage(exc):
                    self._failures.error(f"turn:{type(exc).__name__}", "turn failed (%s): message %s in %s was "
                                         "answered with an apology", describe_cause(exc), inbound.message_id,
                                         key, exc=exc)
                    replies = [FAILURE_TEXT]
                    break
                # The lane still holds this message, so it counts itself.
                storage.failed(exc, f"message {inbound.message_id} in {key} held "
                                    f"({self._queues.pending(key)} held for the session)")
            await asyncio.sleep(backoff_delay(attempt))
            attempt += 1
        for text in replies:
            await adapter.send(inbound, cap_reply(text, self.settings.gateway.max_reply_chars))

    async def _chain(self, key: SessionKey, inbound: Inbound, adapter: Adapter) -> list[str]:
        command = Command.of(inbound)
        if key.is_group and not _addressed(inbound, command):
            if self.observing:
                self.observer.add(key, _observed_line(inbound), inbound.user_id)
            else:
                self.context.add(key, speaker_tag(inbound.user_name, inbound.text))
            return []
        live = await self.sessions.open(key, inbound.user_id)
        if self.observing and key.is_group:
            await self.observer.flush_locked(key, live)  # what the group said comes before the question

        async def notices(notice: Notice) -> None:
            await adapter.send(inbound.chat, notice.text)

        admin = is_admin(inbound.platform, inbound.user_id, self.settings.gateway.admins, inbound.is_admin_hint)
        if command is not None and (command.known or not key.is_group):
            ctx = CommandContext(self.sessions, live, inbound, admin, notices, self.events, self.limiter,
                                 self.pairing)
            reply, _ = await run_command(command, ctx)
            return [reply]
        if not admin and inbound.platform != "console":
            refusal = await self.limiter.admit(inbound)
            if refusal is not None:
                return [refusal]
        stream = adapter.live_reply(inbound)
        with self.running.track(key, inbound) as running:
            started, failed = time.perf_counter(), True
            try:
                async with adapter.typing(inbound):
                    await run_hygiene(self.sessions, live, notices=notices, events=self.events)
                    result = await agent_turn(self.sessions, live, self._user_message(key, live, inbound),
                                              notices=notices, events=self.events, stream=stream,
                                              on_start=running.attach)
                failed = result.stop_reason is StopReason.ERROR
            finally:
                self.metrics.record_turn(time.perf_counter() - started, failed=failed)
        await self.limiter.record(inbound, sum(u.prompt_tokens + u.completion_tokens for u in result.usage))
        answer = _answer_text(result, running)
        if answer is None or stream is None:
            return [answer] if answer else []
        # The live reply becomes the exact final text (cut like any reply: a 1 MB answer is not 250 messages).
        await stream.finish(cap_reply(answer, self.settings.gateway.max_reply_chars))
        return []

    def _user_message(self, key: SessionKey, live: LiveSession, inbound: Inbound) -> dict[str, Any]:
        text = inbound.text
        if key.is_group:
            text = speaker_tag(inbound.user_name, text)
            earlier = self.context.take(key)
            if earlier:
                text = "\n".join([CONTEXT_HEADER, *earlier, "", text])
        text = with_note(live.pending_note, text)
        live.pending_note = None
        images = [a.data_url or a.url for a in inbound.attachments if a.kind == "image" and (a.data_url or a.url)]
        # What the model cannot see is at least named, so a file-only message is never an empty turn.
        notes = [f"[Attached {a.kind}: {a.name} ({a.mime}, {a.size:,} bytes)]" for a in inbound.attachments
                 if not (a.kind == "image" and (a.data_url or a.url))]
        text = "\n".join(part for part in (text, *notes) if part)
        if not images:
            return {"role": "user", "content": text}
        return {"role": "user", "content": [{"type": "text", "text": text},
                                            *({"type": "image_url", "image_url": {"url": u}} for u in images)]}


def _observed_line(inbound: Inbound) -> str:
    """An unaddressed group message as stored: the speaker's tag, the text, and any attachment named."""
    notes = [f"[Attached {a.kind}: {a.name}]" for a in inbound.attachments]
    return speaker_tag(inbound.user_name, "\n".join(part for part in (inbound.text, *notes) if part))


def _answer_text(result: TurnResult, running: RunningTurn) -> str | None:
    """What the chat is shown when a turn ends (None: nothing more, the loop already sent its error)."""
    if result.stop_reason is StopReason.ERROR:
        return None
    if result.stop_reason is not StopReason.CANCELLED:
        return result.text or EMPTY_ANSWER
    # Cut off: keep what was streamed, saying why it stops there.
    why = {"stop": STOPPED_TEXT, "interrupt": INTERRUPTED_BY_NEW_TEXT}.get(
        running.stopped or "", INTERRUPTED_TEXT)  # no cause of ours: shutdown
    return f"{result.text}\n\n{why}" if result.text else why


def _addressed_anywhere(inbound: Inbound) -> bool:
    """Whether ``inbound`` asks something of the bot (any command counts: in a DM even an unknown one is
    answered), before the session is known."""
    return inbound.chat_type == "dm" or inbound.mentions_bot or inbound.reply_to_bot or inbound.is_command


def _addressed(inbound: Inbound, command: Command | None) -> bool:
    """In a group: a mention, a reply to the bot, or one of our commands (another bot's /cmd is chatter)."""
    return inbound.mentions_bot or inbound.reply_to_bot or (command is not None and command.known)
