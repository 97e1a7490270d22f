"""Sending answers through the delivery ledger: stored before they are sent, confirmed after.

`Deliveries.record` stores an answer (status pending) while its session's turn lock is still held, so the
ledger's order is the session's order; `Deliveries.send` hands it to the adapter and marks it sent once the
platform confirmed. A worker that dies in between leaves the answer pending: `Deliveries.recover` — at
start-up and then periodically, on every worker — claims answers pending for longer than
``delivery.resend_after_seconds`` (each claimed by one worker only), sends each once more and marks it sent
(recovered) or failed. Answers older than ``delivery.freshness_seconds`` are marked expired instead: a reply
to a question asked hours ago would only confuse.

Every answer to an inbound message is written with the message's handled mark, in the transaction that stores
what handling it produced (`MarkedAnswer`): a turn's with the turn (`gateway.conversation.turns.TurnAnswer`), a command's or
a refusal's with the mark alone. So an answer is never stored without its mark (the message would be handled
again, and answered twice) nor a mark without its answer (the reply would be lost). A transaction whose COMMIT
went through unseen (the connection lost inside it) is retried and finds the mark: the answer it stored is the
one sent, never a second one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from adapters.base import Adapter, ChatRef, Outbound, SendError
from gateway.ops.metrics import Metrics
from gateway.store import AlreadyStored, Handled, NewAnswer, Store

if TYPE_CHECKING:  # the runtime holds this room's parts; a module here only names it
    from gateway.runtime import Runtime

__all__ = ["Deliveries", "MarkedAnswer"]

log = logging.getLogger(__name__)


class Deliveries:
    """The ledger-backed send path of one worker."""

    def __init__(self, store: Store, metrics: Metrics, worker: str, *, resend_after_s: float,
                 freshness_s: float, keep_s: float, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.metrics = metrics
        self.worker = worker
        self.resend_after = timedelta(seconds=resend_after_s)
        self.freshness = timedelta(seconds=freshness_s)
        self.keep = timedelta(seconds=keep_s)
        self.clock = clock

    @classmethod
    def for_runtime(cls, rt: Runtime) -> Deliveries:
        """The ledger's send path as configured (``delivery.*``)."""
        settings = rt.settings.delivery
        return cls(rt.store, rt.metrics, rt.worker_id, resend_after_s=settings.resend_after_seconds,
                   freshness_s=settings.freshness_seconds, keep_s=settings.keep_seconds, clock=rt.clock)

    def new_answer(self, out: Outbound, session_id: str | None) -> NewAnswer:
        """The ledger row of ``out``, for the transaction that stores its turn to write (`gateway.store.Handled`)."""
        chat = out.chat
        return NewAnswer(platform=chat.platform, chat_id=chat.chat_id, thread_id=chat.thread_id,
                         reply_to=out.reply_to_message_id, text=out.text, session_id=session_id, worker=self.worker)

    async def send(self, adapter: Adapter, out: Outbound, delivery_id: int | None) -> None:
        """Deliver ``out`` and confirm it in the ledger; a send that fails is left pending for recovery."""
        try:
            await adapter.deliver(out)
        except SendError as exc:
            log.warning("%s: answer %s not delivered (%s); left for recovery", adapter.name, delivery_id, exc)
            return
        await self.confirm(adapter, delivery_id)

    async def confirm(self, adapter: Adapter, delivery_id: int | None) -> None:
        """The platform confirmed an answer ``adapter`` delivered (sent, or a live reply's final edit)."""
        self.metrics.record_sent(adapter.name)
        if delivery_id is None:
            return
        try:
            await self.store.deliveries.mark_sent(delivery_id)
        except Exception as exc:
            # The user has the answer; at worst recovery sends it a second time.
            log.warning("delivery %s sent but not confirmed in the ledger (%s)", delivery_id, type(exc).__name__)

    async def recover(self, adapters: Mapping[str, Adapter]) -> int:
        """Send once more every answer left unconfirmed by a crash (this worker's or another's) on a
        platform this worker serves; return how many were claimed."""
        now = self.clock()
        expired = await self.store.deliveries.expire_older_than(now - self.freshness)
        if expired:
            log.warning("delivery ledger: %d unconfirmed answer(s) older than %s expired, not sent", expired,
                        self.freshness)
        await self.store.deliveries.prune(now - self.keep)
        claimed = await self.store.deliveries.claim_unconfirmed(now - self.resend_after, self.worker,
                                                                platforms=tuple(adapters))
        for delivery in claimed:
            adapter = adapters[delivery.platform]
            out = Outbound(ChatRef(adapter.name, delivery.chat_id, delivery.thread_id),  # type: ignore[arg-type]
                           delivery.text, reply_to_message_id=delivery.reply_to)
            try:
                await adapter.deliver(out)
            except SendError as exc:
                log.warning("delivery %d (session %s): the recovery resend failed too (%s); given up",
                            delivery.id, delivery.session_id, exc)
                await self.store.deliveries.mark_failed(delivery.id)
                self.metrics.record_redelivery("failed")
                continue
            await self.store.deliveries.mark_sent(delivery.id)
            self.metrics.record_sent(adapter.name)
            self.metrics.record_redelivery("sent")
            log.info("delivery %d (session %s): answer recovered from worker %s and sent", delivery.id,
                     delivery.session_id, delivery.worker)
        return len(claimed)


@dataclass
class MarkedAnswer:
    """The answer ``out`` to an inbound message (None: nothing to send), stored with the message's handled mark
    ``handled`` by `write` — retried until stored, each attempt with a fresh ledger row (one whose transaction
    failed rolled back with it, or committed unseen). ``delivery_id``: the ledger row to confirm once sent."""

    handled: Handled
    ledger: Deliveries
    out: Outbound | None = None
    delivery_id: int | None = None
    # The ledger rows of this answer's failed transactions (each one rolled back, or committed unseen).
    tried_ids: set[int] = dataclasses.field(default_factory=set, init=False, repr=False)

    def marker(self, session_id: str | None) -> Handled:
        """The mark for one attempt, carrying a fresh ledger row for the answer."""
        answer = self.ledger.new_answer(self.out, session_id) if self.out is not None else None
        return dataclasses.replace(self.handled, answer=answer)

    async def write(self, session_id: str | None, store: Callable[[Handled], Awaitable[object]]) -> bool:
        """Store the mark with ``store`` (one transaction, which carries it): True once stored now; False when
        the message was marked handled already — by an earlier attempt of this answer whose COMMIT went through
        unseen (its ledger row is then the one to confirm), or by another handling of the message (which
        answers it: ``out`` becomes None, nothing is sent from here). Other errors propagate, to be retried."""
        handled = self.marker(session_id)
        try:
            await store(handled)
        except AlreadyStored as already:
            answer_id = already.handling.answer_id
            if answer_id is not None and answer_id in self.tried_ids:
                self.delivery_id = answer_id
            elif answer_id is not None or self.tried_ids:
                self.out = None
                log.warning("message %s was answered elsewhere meanwhile; this answer is not sent", handled.key)
            return False
        except Exception:
            if handled.answer is not None and handled.answer.id is not None:
                self.tried_ids.add(handled.answer.id)
            raise
        self.delivery_id = handled.answer.id if handled.answer is not None else None
        return True
