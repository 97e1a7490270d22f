"""The message path (R-G2, R-G4), readable top to bottom:

    inbound ─▶ session key, arrival ticket ─▶ per-session FIFO ─▶ turn lock (and our ticket's turn)
            ─▶ handled before? drop (de-dup)
            ─▶ unaddressed group message? keep as context, stop
            ─▶ command? run it                      ┐
            ─▶ else hygiene (R-G3) ─▶ agent turn    ├─ persist (inside)
            ─▶ store the reply (delivery ledger) ─▶ mark the inbound id handled
            ─▶ release lock ─▶ send the reply ─▶ mark it sent

De-duplication happens under the session's turn lock: two deliveries of one message (a Telegram update sent
to two workers, a redelivery after a restart) belong to one session, so the second waits for the first and
then finds its id marked handled (in Redis, shared by all workers, or in-process). A worker that dies
mid-turn never marks the id, so a redelivery to another worker is handled there. With several workers the
arrival ticket (`gateway.arrivals`) keeps a session's messages in the order the workers received them.

In groups the bot answers only when mentioned, replied to or commanded. Other group messages are kept, tagged
with the speaker's name, in a bounded per-session buffer (``gateway.group_context_limit`` newest lines) and
handed to the agent in front of the next message that addresses it; so they enter the stored conversation
exactly once, with the turn that used them, and an idle channel costs no writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from typing import Any

from adapters.base import Adapter, Inbound, Outbound
from agent.events import EventSink, Notice
from agent.turn import StopReason
from gateway.arrivals import Turn
from gateway.commands import Command, CommandContext, is_admin, run_command
from gateway.compaction import run_hygiene
from gateway.continuity import with_note
from gateway.delivery import Deliveries
from gateway.keys import SessionKey, session_key
from gateway.metrics import fan_out
from gateway.prompt import speaker_tag
from gateway.queues import SessionQueues
from gateway.session import LiveSession, SessionManager
from gateway.turns import agent_turn

__all__ = ["GroupContext", "Router"]

log = logging.getLogger(__name__)

FAILURE_TEXT = "⚠️ Something went wrong while handling your message. Please try again."
EMPTY_ANSWER = "(The model returned an empty answer.)"
INTERRUPTED_TEXT = "⚠️ I was interrupted (the bot is restarting) before I could answer. Ask me to continue."
CONTEXT_HEADER = "[Earlier messages in this channel, not addressed to you]"
# How soon a worker holding a later ticket of a session asks again for the turn.
TURN_POLL_S = 0.02


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
                 deliveries: Deliveries | None = None) -> None:
        self.sessions = sessions
        rt = sessions.rt
        self.settings = rt.settings
        self.metrics = rt.metrics
        # The runtime's metrics always listen; a sink given here hears every event too.
        self.events: EventSink = self.metrics if events is None else fan_out(self.metrics, events)
        self.context = GroupContext(self.settings.gateway.group_context_limit)
        self.deliveries = deliveries or Deliveries(
            rt.store, rt.metrics, rt.worker_id, resend_after_s=self.settings.delivery.resend_after_seconds,
            freshness_s=self.settings.delivery.freshness_seconds, clock=rt.clock)
        self._queues: SessionQueues[SessionKey, tuple[Inbound, Adapter, Turn]] = SessionQueues(self._process)
        self.metrics.instruments.watch_queue(lambda: self._queues.depth)

    async def handle(self, inbound: Inbound, adapter: Adapter) -> None:
        """Take one inbound message; returns once it has been handled (queued behind its session's earlier ones)."""
        key = session_key(inbound, self.settings.gateway.scope_for(inbound.platform))
        turn = await self.sessions.rt.arrivals.arrive(str(key))
        await self._queues.submit(key, (inbound, adapter, turn))

    async def aclose(self, grace_seconds: float = 30.0) -> None:
        """Stop taking messages and let queued ones finish (graceful shutdown)."""
        await self._queues.aclose(grace_seconds)

    async def _process(self, key: SessionKey, item: tuple[Inbound, Adapter, Turn]) -> None:
        inbound, adapter, turn = item
        rt = self.sessions.rt
        asked = time.perf_counter()
        while True:
            async with rt.locks.session_turn(str(key)):
                if await rt.arrivals.ready(str(key), turn):
                    self.metrics.record_lock_wait(time.perf_counter() - asked)
                    try:
                        pending = await self._handle_locked(key, inbound, adapter)
                    finally:
                        await rt.arrivals.served(str(key), turn)
                    break
            await asyncio.sleep(TURN_POLL_S)  # an earlier message of this session is at another worker
        for out, delivery_id in pending:
            await self.deliveries.send(adapter, out, delivery_id)

    async def _handle_locked(self, key: SessionKey, inbound: Inbound,
                             adapter: Adapter) -> list[tuple[Outbound, int | None]]:
        """Everything done under the turn lock: de-dup, the chain, and storing the answers in the ledger."""
        rt = self.sessions.rt
        handled = _handled_key(inbound)
        if await rt.claims.claimed(handled):
            log.info("duplicate delivery of message %s in %s ignored", inbound.message_id, key)
            self.metrics.record_duplicate(inbound.platform)
            return []
        self.metrics.record_message(inbound.platform)
        try:
            replies = await self._chain(key, inbound, adapter)
        except Exception:
            log.exception("message %s in %s failed", inbound.message_id, key)
            replies = [FAILURE_TEXT]
        live = self.sessions.cached(key)
        pending = []
        for text in replies:
            out = Outbound.to(inbound, text)
            pending.append((out, await self.deliveries.record(out, live.id if live else None)))
        # Marked only once the answer is stored: a worker dying before this leaves the message to a
        # redelivery; one dying after leaves the answer to the ledger's recovery.
        await rt.claims.claim(handled, self.settings.gateway.dedupe_ttl_seconds)
        return pending

    async def _chain(self, key: SessionKey, inbound: Inbound, adapter: Adapter) -> list[str]:
        command = Command.of(inbound)
        if key.is_group and not _addressed(inbound, command):
            self.context.add(key, speaker_tag(inbound.user_name, inbound.text))
            return []
        live = await self.sessions.open(key, inbound.user_id)

        async def notices(notice: Notice) -> None:
            await adapter.send(inbound.chat, notice.text)

        if command is not None and (command.known or not key.is_group):
            admin = is_admin(inbound.platform, inbound.user_id, self.settings.gateway.admins, inbound.is_admin_hint)
            ctx = CommandContext(self.sessions, live, inbound, admin, notices, self.events)
            reply, _ = await run_command(command, ctx)
            return [reply]
        started, failed = time.perf_counter(), True
        try:
            async with adapter.typing(inbound):
                await run_hygiene(self.sessions, live, notices=notices, events=self.events)
                result = await agent_turn(self.sessions, live, self._user_message(key, live, inbound),
                                          notices=notices, events=self.events)
            failed = result.stop_reason is StopReason.ERROR
        finally:
            self.metrics.record_turn(time.perf_counter() - started, failed=failed)
        if result.stop_reason is StopReason.ERROR:
            return []  # the loop already sent its error as a notice
        if result.stop_reason is StopReason.CANCELLED:
            return [INTERRUPTED_TEXT]  # shutdown cut the turn off; what it did so far is stored
        return [result.text or EMPTY_ANSWER]

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


def _handled_key(inbound: Inbound) -> str:
    """The de-duplication key of an inbound message: its platform id within its chat (and thread)."""
    return f"inbound:{inbound.platform}:{inbound.chat_id}:{inbound.thread_id or ''}:{inbound.message_id}"


def _addressed(inbound: Inbound, command: Command | None) -> bool:
    """In a group: a mention, a reply to the bot, or one of our commands (another bot's /cmd is chatter)."""
    return inbound.mentions_bot or inbound.reply_to_bot or (command is not None and command.known)
