"""The message path (R-G2, R-G4), readable top to bottom:

    inbound ─▶ dedupe ─▶ session key ─▶ per-session FIFO ─▶ turn lock ─▶ load session
            ─▶ unaddressed group message? keep as context, stop
            ─▶ command? run it                      ┐
            ─▶ else hygiene (R-G3) ─▶ agent turn    ├─ persist (inside)
            ─▶ release lock ─▶ send the reply       ┘

In groups the bot answers only when mentioned, replied to or commanded. Other group messages are kept, tagged
with the speaker's name, in a bounded per-session buffer (``gateway.group_context_limit`` newest lines) and
handed to the agent in front of the next message that addresses it; so they enter the stored conversation
exactly once, with the turn that used them, and an idle channel costs no writes.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from typing import Any

from adapters.base import Adapter, Inbound
from agent.events import EventSink, Notice
from agent.turn import StopReason
from gateway.commands import Command, CommandContext, is_admin, run_command
from gateway.compaction import run_hygiene
from gateway.continuity import with_note
from gateway.keys import SessionKey, session_key
from gateway.metrics import fan_out
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
        self._queues: SessionQueues[SessionKey, tuple[Inbound, Adapter]] = SessionQueues(self._process)
        self._seen: OrderedDict[tuple[str, str, str | None, str], None] = OrderedDict()
        self._dedupe_size = dedupe_size

    async def handle(self, inbound: Inbound, adapter: Adapter) -> None:
        """Take one inbound message; returns once it has been handled (queued behind its session's earlier ones)."""
        ident = (inbound.platform, inbound.chat_id, inbound.thread_id, inbound.message_id)
        if ident in self._seen:
            log.info("duplicate delivery of %s ignored", ident)
            return
        self._seen[ident] = None
        if len(self._seen) > self._dedupe_size:
            self._seen.popitem(last=False)
        key = session_key(inbound, self.settings.gateway.scope_for(inbound.platform))
        await self._queues.submit(key, (inbound, adapter))

    async def aclose(self, grace_seconds: float = 30.0) -> None:
        """Stop taking messages and let queued ones finish (graceful shutdown)."""
        await self._queues.aclose(grace_seconds)

    async def _process(self, key: SessionKey, item: tuple[Inbound, Adapter]) -> None:
        inbound, adapter = item
        self.metrics.record_message()
        try:
            async with self.sessions.rt.locks.session_turn(str(key)):
                replies = await self._chain(key, inbound, adapter)
        except Exception:
            log.exception("message %s in %s failed", inbound.message_id, key)
            replies = [FAILURE_TEXT]
        for text in replies:
            await adapter.send(inbound, cap_reply(text, self.settings.gateway.max_reply_chars))

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


def _addressed(inbound: Inbound, command: Command | None) -> bool:
    """In a group: a mention, a reply to the bot, or one of our commands (another bot's /cmd is chatter)."""
    return inbound.mentions_bot or inbound.reply_to_bot or (command is not None and command.known)
