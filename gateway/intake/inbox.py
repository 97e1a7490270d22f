"""The inbox: messages kept in the store from receipt until handled, so a worker that dies loses none.

Telegram forgets a polled update once the next getUpdates confirms its offset, and Discord never sends an event
twice: a message held only in a worker's memory dies with it. So those adapters hand every fetched batch to
`Inbox.keep` — one transaction — before the platform may forget it (Telegram: before the offset is confirmed;
Discord: before the message is queued). A kept row is claimed by the worker process that took it
(``<worker id>#<per-process suffix>``), which renews the claim while it still holds the message.

A message is marked handled where the router marks its inbound id handled, always together with its answer's
ledger row: for an agent turn inside the turn's own transaction (`gateway.conversation.turns.TurnAnswer`), for any other
answer in a transaction of the two (`Inbox.answer`), for an observed group line in its batch's transaction;
for a message answered outside the turn lock (a refusal, /stop) when the router is done with it. A command
that changes something first stores that it began (`Inbox.begin`), so it runs at most once.

`Inbox.recover` — at start-up and every third of ``inbox.stale_after_seconds``, on every worker — claims the
rows whose worker stopped renewing them that long ago (each row to one worker) and returns them to be handled
again; the router's de-dup drops any that was handled after all. Handled rows stay for
``gateway.dedupe_ttl_seconds``: they are also the store's record that a turn was stored, which a retried
message (a webhook redelivery after a crash) checks before running its turn a second time. Then they are
pruned.

Webhook mode keeps nothing on receipt: its POST is answered only after handling, so Telegram itself retries.

`Inbox.keep_or_spool` is the keep of a platform that never delivers a message again (Discord): when the
database cannot take a message within ``KEEP_TIMEOUT_S`` it is appended to the worker's spool file instead
(`gateway.intake.spool`), and for ``KEEP_PAUSE_S`` the next messages go there at once. `recover` first moves every
spool — this worker's, and those of workers that are gone — into the inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from adapters.base import Attachment, Inbound
from gateway.delivery.delivery import MarkedAnswer
from gateway.intake.durability import StorageGuard, is_storage_outage
from gateway.intake.keys import Scope, SessionKey, session_key
from gateway.intake.spool import Spool
from gateway.ops.faults import crash_point
from gateway.store import AlreadyStored, Handled, Handling, InboxEntry, Progress, Store

if TYPE_CHECKING:  # the runtime holds this room's parts; a module here only names it
    from gateway.runtime import Runtime

__all__ = ["Inbox", "decode", "encode", "inbound_key", "message_key"]

log = logging.getLogger(__name__)

# How long a message of a platform that never redelivers may wait for the database before it is spooled, and
# how long after that the next messages are spooled at once.
KEEP_TIMEOUT_S = 5.0
KEEP_PAUSE_S = 5.0


def message_key(inbound: Inbound) -> str:
    """The key of the message ``inbound`` is about (its platform id within its chat and thread), whether
    ``inbound`` is that message, an edit of it or its deletion: what stored rows name as their origin."""
    return f"inbound:{inbound.platform}:{inbound.chat_id}:{inbound.thread_id or ''}:{inbound.message_id}"


def inbound_key(inbound: Inbound) -> str:
    """The de-duplication key of an inbound event: the message's key; an edit's and a deletion's are their own,
    so each is handled once and never taken for the message itself."""
    if inbound.kind == "edit":
        return f"{message_key(inbound)}:edit:{inbound.edit_id}"
    if inbound.kind == "delete":
        return f"{message_key(inbound)}:delete"
    return message_key(inbound)


def encode(inbound: Inbound) -> str:
    """``inbound`` as JSON (ASCII, so any text is storable)."""
    data = dataclasses.asdict(inbound)
    data["received_at"] = inbound.received_at.isoformat()
    return json.dumps(data)


def decode(payload: str) -> Inbound:
    """The inverse of `encode`."""
    data = json.loads(payload)
    data["attachments"] = tuple(Attachment(**a) for a in data["attachments"])
    data["role_ids"] = tuple(data["role_ids"])
    data["received_at"] = datetime.fromisoformat(data["received_at"])
    return Inbound(**data)


class Inbox:
    """One worker's side of the inbox: what it kept, the marks it writes, and the recovery it runs."""

    def __init__(self, store: Store, storage: StorageGuard, worker: str, scope_for: Callable[[str], Scope], *,
                 stale_after_s: float, keep_handled_s: float, clock: Callable[[], datetime],
                 spool_dir: Path | None = None) -> None:
        self.store = store
        self.storage = storage
        # A restarted worker with a configured id is a new claimer: the dead one's rows are not renewed as ours.
        self.claimer = f"{worker}#{secrets.token_hex(3)}"
        self.spool = Spool(spool_dir, self.claimer) if spool_dir is not None else None
        self._spool_until = 0.0  # monotonic time until which kept messages go to the spool at once
        self.scope_for = scope_for
        self.stale_after = timedelta(seconds=stale_after_s)
        self.keep_handled = timedelta(seconds=keep_handled_s)
        self.clock = clock
        self._kept: set[str] = set()  # keys this process kept or took over and has not marked handled yet
        self._taken: set[str] = set()  # of those, the ones taken over from a stopped worker

    @classmethod
    def for_runtime(cls, rt: Runtime) -> Inbox:
        """The inbox as configured (``inbox.*``, handled rows kept for ``gateway.dedupe_ttl_seconds``)."""
        settings = rt.settings
        return cls(rt.store, rt.storage, rt.worker_id, settings.gateway.scope_for,
                   stale_after_s=settings.inbox.stale_after_seconds,
                   keep_handled_s=settings.gateway.dedupe_ttl_seconds, clock=rt.clock,
                   spool_dir=settings.storage.data_dir / "spool")

    def session_of(self, inbound: Inbound) -> SessionKey:
        """The session ``inbound`` belongs to."""
        return session_key(inbound, self.scope_for(inbound.platform))

    def _entries(self, batch: Sequence[Inbound], at: datetime | None = None) -> list[InboxEntry]:
        """Rows for ``batch``, received at ``at`` (default: when each message says it was)."""
        return [InboxEntry(key=inbound_key(i), platform=i.platform, session_key=str(self.session_of(i)),
                           payload=encode(i), received_at=at or i.received_at) for i in batch]

    async def keep(self, batch: Sequence[Inbound]) -> None:
        """Store a received batch in one transaction, before its platform may forget it. Raises when the store
        cannot take it; the adapter decides how long to retry (it does not tell the platform meanwhile)."""
        at = self.clock()
        entries = self._entries(batch, at)
        try:
            await self.store.inbox.keep(entries, self.claimer, at=at)
        except Exception as exc:
            if is_storage_outage(exc):
                self.storage.failed(exc, f"{len(batch)} received message(s) not in the inbox yet")
            raise
        self.storage.succeeded()
        self._kept.update(e.key for e in entries)
        crash_point("inbox-kept")

    async def keep_or_spool(self, batch: Sequence[Inbound]) -> None:
        """`keep`, or — the database down, or slower than ``KEEP_TIMEOUT_S`` — append ``batch`` to this
        worker's spool, which `recover` moves into the inbox later. Raises only when neither can take it."""
        if self.spool is None:
            await self.keep(batch)
            return
        if time.monotonic() >= self._spool_until:
            try:
                await asyncio.wait_for(self.keep(batch), KEEP_TIMEOUT_S)
                return
            except Exception as exc:
                if not (isinstance(exc, TimeoutError) or is_storage_outage(exc)):
                    raise
                self._spool_until = time.monotonic() + KEEP_PAUSE_S
        await self.spool.append([encode(i) for i in batch])
        self.storage.throttle.warning("spool", "%d received message(s) spooled to %s until the inbox can take "
                                      "them", len(batch), self.spool.path)
        self._kept.update(inbound_key(i) for i in batch)
        crash_point("inbox-kept")

    async def _keep_spooled(self, lines: list[str], ours: bool) -> None:
        """Put spooled messages into the inbox: claimed by this worker if it still holds them, otherwise left
        for the recovery to claim (a dead worker's spool, or a message this one gave up on)."""
        batch: list[Inbound] = []
        for line in lines:
            try:
                batch.append(decode(line))
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("spool: a message cannot be read (%s); dropped", type(exc).__name__)
        held = [i for i in batch if ours and inbound_key(i) in self._kept]
        others = [i for i in batch if not (ours and inbound_key(i) in self._kept)]
        await self.store.inbox.keep(self._entries(held), self.claimer, at=self.clock(),
                                    unclaimed=self._entries(others))

    async def answer(self, inbound: Inbound, answer: MarkedAnswer, session_id: str | None) -> None:
        """Store ``answer`` with ``inbound``'s handled mark in one transaction, held through a storage outage
        (`MarkedAnswer.write`); this worker no longer holds the message."""
        await self.storage.run(lambda: answer.write(session_id, self.store.inbox.mark_handled),
                               f"the answer to message {inbound.message_id} is held until it is stored")
        self.release(inbound)

    async def begin(self, inbound: Inbound, key: SessionKey, handling: Handling) -> bool:
        """Store that handling ``inbound`` starts something that must run at most once (a command changing
        something): a progress step from 0, held through a storage outage. False when an earlier attempt
        started it (it may or may not have taken effect), or another handling did."""
        if handling.progress:
            return False
        marker = self.marker(inbound, key)
        step = Progress(marker.key, marker.platform, marker.session_key, 0, 1)
        try:
            await self.storage.run(lambda: self.store.inbox.advance(step),
                                   f"message {inbound.message_id} is held until its start is stored")
        except AlreadyStored as already:
            # This attempt read progress 0: the step's COMMIT went through unseen, unless another handling stored it.
            return not already.handling.handled and already.handling.progress == step.to
        return True

    def marker(self, inbound: Inbound, key: SessionKey) -> Handled:
        """What marks ``inbound`` handled inside the transaction that stores its turn."""
        return Handled(inbound_key(inbound), inbound.platform, str(key))

    def taken_over(self, inbound: Inbound) -> bool:
        """Whether this worker took ``inbound`` over from a stopped worker and has not finished with it."""
        return inbound_key(inbound) in self._taken

    def holds(self, inbound: Inbound) -> bool:
        """Whether ``inbound`` is kept (in the inbox or the spool) and not yet handled: released, it is handled
        again once the recovery finds it unclaimed."""
        return inbound_key(inbound) in self._kept

    def release(self, inbound: Inbound) -> None:
        """This worker no longer holds ``inbound`` unhandled — marked handled with its turn, or its handling
        stopped short: its claim is not renewed any more (recovery hands it on once stale, if unhandled)."""
        key = inbound_key(inbound)
        self._kept.discard(key)
        self._taken.discard(key)

    async def settle(self, inbound: Inbound) -> None:
        """Mark ``inbound`` handled if this worker kept it and has not marked it yet; a failure is only logged
        (recovery then hands it on once more, and the de-dup drops it)."""
        key = inbound_key(inbound)
        if key not in self._kept:
            return
        self._kept.discard(key)
        self._taken.discard(key)
        try:
            await self.store.inbox.mark_handled(self.marker(inbound, self.session_of(inbound)))
        except AlreadyStored:
            pass  # its handling stored the mark
        except Exception as exc:
            log.warning("inbox: message %s not marked handled (%s); it will be looked at again",
                        inbound.message_id, type(exc).__name__)

    def close(self) -> None:
        """Let go of this worker's spool (what it still holds is drained by the next worker to look)."""
        if self.spool is not None:
            self.spool.close()

    async def recover(self, platforms: Sequence[str]) -> list[Inbound]:
        """Renew this worker's claims, prune old handled rows, and take over the messages on ``platforms`` a
        dead worker left unhandled: returned to be handled again."""
        if self.spool is not None:
            await self.spool.drain(self._keep_spooled)
        now = self.clock()
        if self._kept:
            await self.store.inbox.renew(self.claimer, sorted(self._kept), at=now)
        await self.store.inbox.prune(now - self.keep_handled)
        rows = await self.store.inbox.claim_stale(now - self.stale_after, self.claimer, platforms=platforms, at=now)
        taken: list[Inbound] = []
        for row in rows:
            assert row.payload is not None  # claim_stale only returns kept messages
            self._kept.add(row.key)
            try:
                taken.append(decode(row.payload))
            except (ValueError, TypeError, KeyError) as exc:
                log.warning("inbox: row %d cannot be read (%s); dropped", row.id, type(exc).__name__)
                with contextlib.suppress(AlreadyStored):
                    await self.store.inbox.mark_handled(Handled(row.key, row.platform, row.session_key))
                self._kept.discard(row.key)
                continue
            self._taken.add(row.key)
        if rows:
            log.warning("inbox: taking over %d message(s) a stopped worker left unhandled (the oldest received "
                        "%s)", len(rows), rows[0].received_at.isoformat(timespec="seconds"))
        return taken
