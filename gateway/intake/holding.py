"""Held messages: riding out a storage outage on the message path, in order.

When the database is down, a message that meets the outage is held — it stays first in its session's queue
and is retried with backoff (outside the turn lock) until storage is back, then answered; the session's later
messages wait behind it in order. Past ``gateway.held_messages_per_session`` waiting messages, the next ones
are left to the inbox's recovery when they are kept (the inbox, the spool), and otherwise answered plainly that
the bot is unavailable, instead of being queued without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from adapters.base import Adapter, Inbound
from gateway.intake.durability import StorageGuard
from gateway.intake.inbox import Inbox
from gateway.intake.keys import SessionKey

__all__ = ["TURN_POLL_S", "UNAVAILABLE_TEXT", "turned_away", "until_handled"]

T = TypeVar("T")

# How soon a worker holding a later ticket of a session asks again for the turn.
TURN_POLL_S = 0.02
UNAVAILABLE_TEXT = ("⚠️ I'm unavailable right now (my storage is down) and cannot keep more messages. "
                    "Please send this again in a few minutes.")


async def turned_away(storage: StorageGuard, inbox: Inbox, key: SessionKey, inbound: Inbound, adapter: Adapter,
                      *, held: Callable[[], int], limit: int, addressed: bool) -> bool:
    """True when ``inbound`` is not queued because storage is down and ``held()`` messages of its session, at
    ``limit``, are held already: it is left to the inbox's recovery when kept, otherwise its sender (when it
    addresses the bot) is told the bot is unavailable."""
    if not (storage.down and held() >= limit):
        return False
    if inbox.holds(inbound):
        # Kept on disk already (inbox or spool): not held in memory too; the recovery hands it on again.
        storage.throttle.warning("hold-full", "storage unavailable and %d messages already held for %s: "
                                 "more are left to the inbox's recovery", held(), key)
        inbox.release(inbound)
        return True
    storage.throttle.warning("hold-full", "storage unavailable and %d messages already held for %s: "
                             "answering that the bot is unavailable", held(), key)
    if addressed:
        await adapter.send(inbound, UNAVAILABLE_TEXT)
    return True


async def until_handled(storage: StorageGuard, attempt: Callable[[], Awaitable[T | None]],
                        held: Callable[[], str]) -> T:
    """Run ``attempt`` until it returns its result. None means an earlier message of the session (an earlier
    ticket) is still to be handled by another worker: ask again shortly. A storage outage holds the message:
    retried with backoff (`StorageGuard.run`), the outage logged with ``held()`` saying what is held."""
    while True:
        result = await storage.run(attempt, held)
        if result is not None:
            return result
        await asyncio.sleep(TURN_POLL_S)  # an earlier message of this session is at another worker
