"""The message path (R-G2, R-G4), readable top to bottom; on the left, the room each step lives in:

  gateway.policy        inbound ─▶ access (ignore / refuse / pairing code: admission)
  gateway.intake          ─▶ session key
  gateway.conversation    ─▶ edit or deletion? note it for its message's turn, queue it behind the message (changes)
  gateway.intake          ─▶ /stop? cancel the running turn (here, or on the worker running it: busy, stops), stop
  gateway.conversation    ─▶ unaddressed group line? observe: batch it into the session (observe), stop
  gateway.intake          ─▶ storage down, the session's held messages at their cap? turn it away (holding)
                          ─▶ busy mode (interrupt the sender's turn / collect a burst) ─▶ queue depth cap (waiting)
                          ─▶ arrival ticket ─▶ per-session FIFO ─▶ turn lock (and the ticket's turn)
                          ─▶ (storage down: held, retried with backoff outside the lock: holding)
                          ─▶ handled before? drop (de-dup: claims)
  gateway.conversation    ─▶ load session (+ how far the message's handling got)
                          ─▶ a deletion? erase the message everywhere, stop ─▶ a message: its newest edit (deleted: drop)
                          ─▶ an edit: the correction of an answered message (or nothing left to do)
                          ─▶ stored already? drop ─▶ the group's pending lines (group_context, observe)
                          ─▶ command? run it (one that changes something: at most once) ─▶ store the reply with the mark
  gateway.policy          ─▶ else rate limits / budgets (limits)
  gateway.conversation    ─▶ hygiene (R-G3) ─▶ agent turn (resumed, if a crashed attempt stored its request: turns)
                          ─▶ persist: its messages, its answer, the message marked handled (one transaction)
  gateway.intake          ─▶ mark the inbound id handled (Redis: claims)
  gateway.delivery        ─▶ release lock ─▶ send the reply (or finish the live one: answers) ─▶ mark it sent (delivery)

In groups the bot answers only when addressed; other group lines are observed or kept for the next question
(`gateway.conversation.unaddressed`). Refusals are quiet in groups and one short line in a DM; a message over a
rate limit or budget gets one notice saying when it resets, and never reaches the model. A message that meets a
storage outage is held in order until storage is back (`gateway.intake.holding`).

De-duplication happens under the session's turn lock: two deliveries of one message (a Telegram update sent
to two workers, a redelivery after a restart) belong to one session, so the second waits for the first and
then finds its id marked handled (in Redis, shared by all workers, or in-process). A worker that dies
mid-turn never marks the id, so a redelivery to another worker is handled there — or, for a message the
platform cannot deliver again (Discord, polled Telegram), the inbox (`gateway.intake.inbox`) hands it to another
worker. A worker that dies after its turn's transaction but before the Redis mark leaves the message marked
handled in the store: a retry finds that before running the turn again, and the ledger sends the stored
answer. With several workers the arrival ticket (`gateway.intake.arrivals`) keeps a session's messages in the order
the workers received them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import timedelta
from typing import Any

from adapters.base import Adapter, Inbound, Outbound
from agent.events import EventSink, Notice
from agent.memory import Author
from agent.turn import StopReason
from gateway.conversation.ahead import AheadCompactions
from gateway.conversation.answers import FAILURE_TEXT, composer
from gateway.conversation.changes import MessageChanges
from gateway.conversation.command_rules import Command, CommandContext, is_admin, is_operator
from gateway.conversation.commands import INTERRUPTED_COMMAND, run_command, stop_command
from gateway.conversation.compaction import run_hygiene
from gateway.conversation.group_context import GroupContext
from gateway.conversation.observe import GroupObserver
from gateway.conversation.quotes import quotes
from gateway.conversation.session import LiveSession, SessionManager
from gateway.conversation.turns import TurnAnswer, agent_turn
from gateway.conversation.unaddressed import UnaddressedLines, addressed_in_group
from gateway.conversation.user_messages import request_message
from gateway.delivery.delivery import Deliveries, MarkedAnswer
from gateway.delivery.replies import cap_reply
from gateway.intake.arrivals import Turn
from gateway.intake.busy import Batch, RunningTurns
from gateway.intake.durability import is_storage_outage
from gateway.intake.holding import turned_away, until_handled
from gateway.intake.inbox import Inbox, inbound_key, message_key
from gateway.intake.keys import Scope, SessionKey, session_key
from gateway.intake.queues import QueueClosed, SessionQueues
from gateway.intake.waiting import Waiting
from gateway.ops.faults import crash_point
from gateway.ops.logsetup import bind_log_session, log_context
from gateway.ops.logthrottle import LogThrottle, describe_cause
from gateway.ops.metrics import fan_out
from gateway.policy.access import AccessPolicy, user_ref
from gateway.policy.admission import admitted
from gateway.policy.limits import RateLimiter, summaries_charged_to
from gateway.policy.pairing import Pairing

__all__ = ["Router"]

log = logging.getLogger(__name__)

# What the chain ends with: a text still to be stored in the ledger, or a turn's answer stored with the turn.
Reply = str | tuple[Outbound, int | None]
# A queued message: what to handle, where it came from, and its arrival ticket (None: taken over from a stopped
# worker, it rejoins at the ticket being served when its turn in the lane comes).
Queued = tuple[Inbound | Batch, Adapter, Turn | None]


class Router:
    """Routes inbound messages from every adapter through the chain above."""

    def __init__(self, sessions: SessionManager, *, events: EventSink | None = None,
                 deliveries: Deliveries | None = None, inbox: Inbox | None = None) -> None:
        self.sessions = sessions
        rt = sessions.rt
        self.settings = rt.settings
        self.metrics = rt.metrics
        # The runtime's metrics always listen; a sink given here hears every event too.
        self.events: EventSink = self.metrics if events is None else fan_out(self.metrics, events)
        self.context = GroupContext(self.settings.gateway.group_context_limit)
        self.deliveries = deliveries or Deliveries.for_runtime(rt)
        self.inbox = inbox or Inbox.for_runtime(rt)
        self._queues: SessionQueues[SessionKey, Queued] = SessionQueues(self._process_logged)
        # Messages taken over from a stopped worker queue in lanes of their own: a later message of the session
        # queued here first may be waiting for the very ticket one of them holds (`ArrivalOrder.rejoin`).
        self._rejoined: SessionQueues[SessionKey, Queued] = SessionQueues(self._process_logged)
        self.metrics.instruments.watch_queue(lambda: self._queues.depth + self._rejoined.depth)
        self.access = AccessPolicy.from_settings(self.settings)
        self.limiter = RateLimiter(self.settings.limits, rt.limits, rt.clock)
        self.pairing = (Pairing(rt.store.chat_settings, timedelta(minutes=self.settings.gateway.pairing_code_minutes),
                                rt.clock) if self.settings.gateway.dm_policy == "pairing" else None)
        self.waiting = Waiting(self._enqueue, lambda: self.settings.limits.session_queue_depth)
        self.running = RunningTurns(rt.stops)
        self.observing = self.settings.gateway.group_history == "observe"
        self.observer = GroupObserver(sessions)
        self._failures = LogThrottle(log)
        self.changes = MessageChanges(sessions, self.observer, self.context, observing=self.observing)
        self.unaddressed = UnaddressedLines(self.observer, self.context, self.inbox, observing=self.observing)
        self.ahead = AheadCompactions(sessions, self.events)

    async def handle(self, inbound: Inbound, adapter: Adapter) -> None:
        """Take one inbound message; returns once it has been handled (queued behind its session's earlier ones).

        A message the inbox holds is marked handled there once this is done with it — unless handling stopped
        short (shutdown, storage down): then the inbox's recovery hands it on again."""
        try:
            await self._route(inbound, adapter)
        except Exception as exc:
            if isinstance(exc, QueueClosed) or is_storage_outage(exc):
                self.inbox.release(inbound)
            else:
                await self.inbox.settle(inbound)  # a failure of ours would only fail again
            raise
        await self.inbox.settle(inbound)

    async def _route(self, inbound: Inbound, adapter: Adapter) -> None:
        admin = is_admin(inbound.platform, inbound.user_id, self.settings.gateway.admins, inbound.is_admin_hint)
        if inbound.kind == "delete":
            # Only the chat gate applies: whoever wrote the message, its text must go.
            if inbound.chat_type == "dm" or admin or self.access.chat_served(inbound):
                self.changes.revisions.note(inbound)
                await self._enqueue(await self.changes.session_of(inbound, self._scope(inbound)), inbound, adapter)
            return
        if not await admitted(self.access, self.pairing, inbound, adapter, admin, quiet=inbound.kind == "edit"):
            return
        if inbound.chat_type != "dm" and not inbound.mentions_bot and self.access.free_response(inbound):
            inbound = dataclasses.replace(inbound, mentions_bot=True)
        key = session_key(inbound, self._scope(inbound))
        if inbound.kind == "edit":
            # Queued behind the message it edits, with no reply of its own on the way (`MessageChanges`).
            self.changes.revisions.note(inbound)
            await self._enqueue(key, inbound, adapter)
            return
        command = Command.of(inbound)
        if command is not None and command.name == "stop":
            # Never queued: it acts on the turn the queue is busy with.
            reply = await stop_command(self.running.get(key), self.sessions.rt.stops, key, inbound, admin)
            if reply:
                await adapter.send(inbound, reply)
            return
        addressed = inbound.addressed
        if not addressed and self.observing and key.is_group:
            await self.unaddressed.observe(key, inbound)
            return
        if await turned_away(self.sessions.rt.storage, self.inbox, key, inbound, adapter,
                             held=lambda: self._queues.pending(key),
                             limit=self.settings.gateway.held_messages_per_session, addressed=addressed):
            return
        if not addressed:
            await self._enqueue(key, inbound, adapter)
            return
        mode = self.settings.gateway.busy_mode
        if mode == "interrupt" and command is None:
            self.running.interrupt(key, inbound.user_id)
        if mode == "collect" and command is None:
            await self.waiting.collect(key, inbound, adapter, admin)
            return
        await self.waiting.submit(key, inbound, adapter, admin)

    async def _enqueue(self, key: SessionKey, item: Inbound | Batch, adapter: Adapter) -> None:
        """Draw the arrival ticket, then queue ``item`` behind the session's earlier messages in this worker; a
        message taken over from a stopped worker rejoins, when its lane reaches it, at the ticket being served
        then (most likely the one its worker drew for it): those taken over together keep their order."""
        arrivals = self.sessions.rt.arrivals
        if self.inbox.taken_over(item.first if isinstance(item, Batch) else item):
            await self._rejoined.submit(key, (item, adapter, None))
            return
        turn = await arrivals.arrive(str(key))
        await self._queues.submit(key, (item, adapter, turn))

    def _scope(self, inbound: Inbound) -> Scope:
        return self.settings.gateway.scope_for(inbound.platform)

    async def _process_logged(self, key: SessionKey, item: Queued) -> None:
        # Every line logged while this message is handled names its session and platform.
        with log_context(session=str(key), platform=key.platform):
            await self._process(key, item)

    async def _process(self, key: SessionKey, item: Queued) -> None:
        queued, adapter, turn = item
        if turn is None:  # taken over: its ticket is the one being served once the lane reaches it
            turn = await self.sessions.rt.arrivals.rejoin(str(key))
        inbound = await queued.take(self.settings.gateway.collect_window_seconds) if isinstance(queued, Batch) \
            else queued
        asked = time.perf_counter()
        # Held, while storage is down, with the lock released. The lane still holds this message, so it counts itself.
        pending = await until_handled(
            self.sessions.rt.storage, lambda: self._try_turn(key, inbound, adapter, turn, asked),
            held=lambda: f"message {inbound.message_id} in {key} held ({self._queues.pending(key)} held for the session)")
        for out, delivery_id in pending:
            await self.deliveries.send(adapter, out, delivery_id)
        live = self.sessions.cached(key)
        if live is not None:
            live.hand_stored_to_engine()
            # The answer is out: a compaction the session is due now runs while nobody waits, its summary
            # calls charged to the sender, as the turn's own would have been.
            with summaries_charged_to(self.limiter, self.limiter.subjects(inbound)):
                self.ahead.consider(live)

    async def _try_turn(self, key: SessionKey, inbound: Inbound, adapter: Adapter, turn: Turn,
                        asked: float) -> list[tuple[Outbound, int | None]] | None:
        """One try under the turn lock: the answers to send, or None when the session's earlier message (an
        earlier ticket) is still to be handled by another worker. A storage outage propagates."""
        rt = self.sessions.rt
        async with rt.locks.session_turn(str(key)):
            if not await rt.arrivals.ready(str(key), turn):
                return None
            self.metrics.record_lock_wait(time.perf_counter() - asked)
            try:
                pending = await self._handle_locked(key, inbound, adapter)
            except asyncio.CancelledError:
                await rt.arrivals.served(str(key), turn)  # shutdown gives it up here: later tickets go on
                raise
            await rt.arrivals.served(str(key), turn)
            return pending

    async def _handle_locked(self, key: SessionKey, inbound: Inbound,
                             adapter: Adapter) -> list[tuple[Outbound, int | None]]:
        """Everything done under the turn lock: de-dup, the chain, and storing the answers in the ledger."""
        rt = self.sessions.rt
        handled = inbound_key(inbound)
        if await rt.claims.claimed(handled):
            log.info("duplicate delivery of message %s in %s ignored", inbound.message_id, key)
            self.metrics.record_duplicate(inbound.platform)
            return []
        self.metrics.record_message(inbound.platform)
        try:
            with summaries_charged_to(self.limiter, self.limiter.subjects(inbound)):
                replies = await self._chain(key, inbound, adapter)
        except Exception as exc:
            if is_storage_outage(exc):
                raise
            self._failures.error(f"turn:{type(exc).__name__}", "turn failed (%s): message %s in %s was "
                                 "answered with an apology", describe_cause(exc), inbound.message_id, key, exc=exc)
            replies = [FAILURE_TEXT]
        pending = []
        for reply in replies:
            if not isinstance(reply, str):
                pending.append(reply)  # a turn's answer, stored with the turn
            elif (stored := await self._store_reply(key, inbound, reply)) is not None:
                pending.append(stored)
        # A message that produced no answer is marked now. A worker dying before its mark leaves the message to
        # a redelivery (or the inbox); one dying after leaves its answer to the ledger's recovery.
        await self.inbox.settle(inbound)
        crash_point("answer-stored")
        await rt.claims.claim(handled, self.settings.gateway.dedupe_ttl_seconds)
        return pending

    async def _store_reply(self, key: SessionKey, inbound: Inbound, text: str) -> tuple[Outbound, int | None] | None:
        """Store a reply that is no turn's answer (a command's, a refusal, the apology) with the message's handled
        mark, and return it to send with its ledger row (None: another handling of the message answered it)."""
        live = self.sessions.cached(key)
        answer = MarkedAnswer(self.inbox.marker(inbound, key), self.deliveries,
                              Outbound.to(inbound, cap_reply(text, self.settings.gateway.max_reply_chars)))
        await self.inbox.answer(inbound, answer, live.id if live else None)
        return (answer.out, answer.delivery_id) if answer.out is not None else None

    async def _chain(self, key: SessionKey, inbound: Inbound, adapter: Adapter) -> list[Reply]:
        if inbound.kind == "delete":
            await self.changes.erase(key, inbound)
            return []
        revised = await self.changes.revised(key, inbound)
        if revised is None:
            return []
        inbound, lead = revised
        command = Command.of(inbound)
        if key.is_group and not addressed_in_group(inbound, command):
            await self.unaddressed.keep(key, inbound, lead)
            return []
        # One read: the session, the chat's pins, and how far this message's handling got (stored already?).
        live, handling = await self.sessions.open_for_message(key, inbound.user_id, inbound_key(inbound))
        bind_log_session(live.id)
        if handling.handled:
            # Its turn or reply was stored by a worker that died before the Redis mark: the answer is in the
            # ledger, whose recovery sends it.
            log.info("message %s in %s was handled already (its answer is stored); not run again",
                     inbound.message_id, key)
            self.metrics.record_duplicate(inbound.platform)
            return []
        if self.observing and key.is_group:
            await self.observer.flush_locked(key, live)  # what the group said comes before the question

        async def notices(notice: Notice) -> None:
            await adapter.send(inbound.chat, notice.text)

        admin = is_admin(inbound.platform, inbound.user_id, self.settings.gateway.admins, inbound.is_admin_hint)
        # Who may write which memory this turn (the bot-wide one: operators only), and what its entries cite.
        author = Author(inbound.user_id, operator=is_operator(inbound, self.settings.gateway.admins),
                        message=message_key(inbound), ref=user_ref(inbound))
        live.memory.set_author(author)
        if command is not None and (command.known or not key.is_group):
            if command.changes_state and not await self.inbox.begin(inbound, key, handling):
                return [INTERRUPTED_COMMAND.format(name=command.name)]
            ctx = CommandContext(self.sessions, live, inbound, admin, notices, self.events, self.limiter,
                                 self.pairing, erased=lambda report: self.context.drop(
                                     key, lambda line: quotes(line, report.cuts)))
            reply, _ = await run_command(command, ctx)
            if command.changes_state:
                crash_point("command-applied")
            return [reply]
        if not admin and inbound.platform != "console":
            refusal = await self.limiter.admit(inbound)
            if refusal is not None:
                return [refusal]
        live, hold = await self.ahead.before_turn(key, live, inbound.user_id,
                                                  self.sessions.rt.counter.count_text(lead + inbound.text),
                                                  waiting=lambda: adapter.typing(inbound))
        live.memory.set_author(author)  # the session the compaction left, when the message waited for one
        stream = adapter.live_reply(inbound)
        async with self.running.track(key, inbound) as running:
            answer = TurnAnswer(self.inbox.marker(inbound, key), self.deliveries,
                                compose=composer(inbound, running, live, self.settings.gateway.max_reply_chars),
                                progress=handling.progress)
            # An earlier attempt that died after a compaction stored the request: the turn resumes from it.
            request = None if handling.progress else self._user_message(key, live, inbound, lead)
            if request is None:
                log.warning("message %s in %s: resuming its turn, whose request an earlier attempt stored",
                            inbound.message_id, key)
            started, failed = time.perf_counter(), True
            try:
                async with adapter.typing(inbound):
                    if not hold:  # the compaction running would make hygiene's skip it
                        await run_hygiene(self.sessions, live, notices=notices, events=self.events)
                    result = await agent_turn(self.sessions, live, request, notices=notices, events=self.events,
                                              stream=stream, on_start=running.attach, answer=answer,
                                              hold_compaction=hold)
                failed = result.stop_reason is StopReason.ERROR
            finally:
                self.metrics.record_turn(time.perf_counter() - started, failed=failed)
        self.inbox.release(inbound)  # marked handled with the turn
        await self.limiter.record(inbound, sum(u.prompt_tokens + u.completion_tokens for u in result.usage))
        if answer.out is None:
            return []
        if stream is None:
            return [(answer.out, answer.delivery_id)]
        # The live reply becomes the exact final text, cut like any reply (a 1 MB answer is not 250 messages);
        # the ledger holds that text until the edit is confirmed.
        await stream.finish(answer.out.text)
        await self.deliveries.confirm(adapter, answer.delivery_id)
        return []

    def _user_message(self, key: SessionKey, live: LiveSession, inbound: Inbound, lead: str) -> dict[str, Any]:
        earlier = self.context.take(key) if key.is_group else []
        note, live.pending_note = live.pending_note, None
        return request_message(inbound, group=key.is_group, earlier=earlier, note=note, lead=lead)

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
        await asyncio.gather(self._queues.aclose(grace_seconds), self._rejoined.aclose(grace_seconds))
        await self.ahead.aclose()
        await self.observer.aclose()
