"""Arrival order of a session's messages across workers.

Inside one worker the per-session FIFO (`gateway.intake.queues`) keeps arrival order. Behind a load balancer two
messages of one chat can reach two workers, and the turn lock alone would let whichever asks first go first.
So each message draws a ticket when it arrives (the next number of the session's counter in Redis: the order
in which workers received them), and the turn lock's holder handles a message only when its ticket is the one
being served; otherwise it lets the lock go and asks again shortly. Handling a message (or dropping it as a
duplicate) releases its ticket.

Every ticket drawn is recorded with its holder (a token the drawing worker made up), and released when its
message is done; the ticket being served moves past every released one at once. That is what keeps a Redis
hiccup from stopping a session: a draw that timed out on the client may still be run by a hung
server when it resumes, leaving a ticket no message holds — so the worker remembers the draw's token and
cancels the ticket by it as soon as Redis answers (or, should the draw arrive later still, marks the token so
that the draw takes no ticket). A release that timed out is made again the same way (`gateway.intake.redo`). Neither
waits for the staleness below.

A ticket whose worker died before handling it would stop the session forever, so a ticket served for longer
than ``stale_after_s`` with nobody handling it is skipped (that message is then lost to this worker — the
platform's redelivery brings it back, with a new ticket). A message the inbox takes over from a stopped worker
`rejoin`s instead: it takes the ticket being served — the one stuck since its worker died, most likely its
own — so it is handled before the messages that arrived after it, and they stop waiting for the skip. Redis
failing means no ticket: the message is handled in the order the lock gives (fail-open), as without this
module. A Redis that restarted empty starts a new epoch: tickets of the old one wait for nothing.

Inside one worker a session's tickets are drawn one at a time: concurrent draws go out over different pooled
connections and can be answered in any order, and a message queued in the FIFO ahead of one holding an
earlier ticket would wait for that ticket (``stale_after_s``) and then skip it — a minute's stall, then the two
answered out of order. The caller queues a message before its next await after ``arrive`` returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.intake.redo import Redo

__all__ = ["ArrivalOrder", "InProcessOrder", "RedisArrivalOrder", "Turn"]

log = logging.getLogger(__name__)

KEY_TTL_S = 86_400


@dataclass
class Turn:
    """A message's ticket (None: no cross-worker order), the epoch it was drawn in, and where the ticket
    being served stood when it first looked, and since when."""

    ticket: int | None
    epoch: str = ""
    seen_serving: int | None = None
    seen_at: float = 0.0


class ArrivalOrder(ABC):
    """Tickets per session key."""

    @abstractmethod
    async def arrive(self, key: str) -> Turn:
        """Draw the next ticket of ``key`` (``Turn(None)``: no cross-worker order, handle when the lock allows)."""

    @abstractmethod
    async def rejoin(self, key: str) -> Turn:
        """A ticket for a message taken over from a stopped worker: the one being served (handled next)."""

    @abstractmethod
    async def ready(self, key: str, turn: Turn) -> bool:
        """With the turn lock held: whether ``turn`` may be handled now (skipping a dead worker's ticket)."""

    @abstractmethod
    async def served(self, key: str, turn: Turn) -> None:
        """With the turn lock held: ``turn`` is done; the next ticket is served."""

    async def aclose(self) -> None:  # noqa: B027 — nothing to finish without Redis
        """Finish what Redis still answers for (tickets to cancel or release). Idempotent."""


class InProcessOrder(ArrivalOrder):
    """One worker: the FIFO queue already keeps arrival order."""

    async def arrive(self, key: str) -> Turn:
        return Turn(None)

    async def rejoin(self, key: str) -> Turn:
        return Turn(None)

    async def ready(self, key: str, turn: Turn) -> bool:
        return True

    async def served(self, key: str, turn: Turn) -> None:
        return None


# Moves the ticket being served past every ticket no message holds any more (released or cancelled). Every
# number up to ``next`` was drawn with its ``own:`` field in the same script, so a missing field means done.
_ADVANCE = """
local function advance(h)
  local s = tonumber(redis.call('HGET', h, 'serving'))
  local first = s
  local n = tonumber(redis.call('HGET', h, 'next'))
  while s <= n and redis.call('HEXISTS', h, 'own:' .. s) == 0 do s = s + 1 end
  if s ~= first then redis.call('HSET', h, 'serving', s) end
  return s
end
"""
# KEYS[1] the session's hash, KEYS[2] the draw's cancel mark; ARGV token, ttl. -> {ticket (0: cancelled), epoch}
_DRAW = """
if redis.call('DEL', KEYS[2]) == 1 then return {0, ''} end
if redis.call('HSETNX', KEYS[1], 'epoch', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'next', 0, 'serving', 1)
end
local t = redis.call('HINCRBY', KEYS[1], 'next', 1)
redis.call('HSET', KEYS[1], 'own:' .. t, ARGV[1], 'tok:' .. ARGV[1], t)
redis.call('EXPIRE', KEYS[1], ARGV[2])
return {t, redis.call('HGET', KEYS[1], 'epoch')}
"""
# KEYS as for a draw; ARGV token, ttl. -> the ticket cancelled, or 0 (the draw has not run: it never will)
_CANCEL = _ADVANCE + """
local t = redis.call('HGET', KEYS[1], 'tok:' .. ARGV[1])
if t then
  redis.call('HDEL', KEYS[1], 'tok:' .. ARGV[1], 'own:' .. t)
  advance(KEYS[1])
  return tonumber(t)
end
redis.call('SET', KEYS[2], 1, 'EX', ARGV[2])
return 0
"""
# KEYS[1] the session's hash; ARGV ticket, epoch, ttl. -> the ticket now served (-1: another epoch)
_RELEASE = _ADVANCE + """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[2] then return -1 end
local owner = redis.call('HGET', KEYS[1], 'own:' .. ARGV[1])
if owner then redis.call('HDEL', KEYS[1], 'own:' .. ARGV[1], 'tok:' .. owner) end
local s = advance(KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return s
"""
# KEYS[1] the session's hash; ARGV epoch ('' for any). -> {the ticket served (-1: another epoch or none), epoch}
_SERVING = _ADVANCE + """
local e = redis.call('HGET', KEYS[1], 'epoch')
if not e or (ARGV[1] ~= '' and e ~= ARGV[1]) then return {-1, ''} end
return {advance(KEYS[1]), e}
"""


class RedisArrivalOrder(ArrivalOrder):
    """Tickets in Redis: one hash per session (``<prefix>tickets:<key>``) with the last ticket drawn
    (``next``), the one served (``serving``), the epoch, and each held ticket's holder token."""

    def __init__(self, client: Redis, *, stale_after_s: float, prefix: str = "concord:order:",
                 clock: Callable[[], float] = time.monotonic,
                 on_error: Callable[[str], None] | None = None, redo_interval: float = 0.25) -> None:
        self._client = client
        self._stale_after = stale_after_s
        self._prefix = prefix
        self._clock = clock
        self._on_error = on_error
        self._draw_script = client.register_script(_DRAW)
        self._cancel_script = client.register_script(_CANCEL)
        self._release_script = client.register_script(_RELEASE)
        self._serving_script = client.register_script(_SERVING)
        # Draws and releases that timed out: put right as soon as Redis answers.
        self._redo = Redo("arrival-tickets", interval=redo_interval)
        # Per session key: the lock its draws in this worker take turns on, and how many want it.
        self._drawing: dict[str, tuple[asyncio.Lock, int]] = {}

    @property
    def unconfirmed(self) -> int:
        """Draws to cancel and releases to make again once Redis answers."""
        return self._redo.pending

    def _tickets(self, key: str) -> str:
        return f"{self._prefix}tickets:{key}"

    def _cancel_mark(self, token: str) -> str:
        return f"{self._prefix}cancelled:{token}"

    async def arrive(self, key: str) -> Turn:
        lock, waiting = self._drawing.get(key) or (asyncio.Lock(), 0)
        self._drawing[key] = (lock, waiting + 1)
        try:
            async with lock:  # FIFO: the draws of ``key`` in the order they were asked for
                return await self._draw(key)
        finally:
            lock, waiting = self._drawing[key]
            if waiting > 1:
                self._drawing[key] = (lock, waiting - 1)
            else:
                del self._drawing[key]

    async def _draw(self, key: str) -> Turn:
        token = uuid.uuid4().hex
        keys = [self._tickets(key), self._cancel_mark(token)]
        try:
            ticket, epoch = await self._draw_script(keys=keys, args=[token, KEY_TTL_S])
        except RedisError as exc:
            # The draw may still run when Redis resumes: its ticket, held by nobody, is cancelled by its token.
            self._redo.add(("cancel", key, token), partial(self._cancel_script, keys=keys, args=[token, KEY_TTL_S]),
                           ttl=KEY_TTL_S, done=partial(self._cancelled, key))
            self._failed("order_arrive", exc)
            return Turn(None)
        return Turn(int(ticket), _text(epoch)) if int(ticket) else Turn(None)

    def _cancelled(self, key: str, ticket: object) -> None:
        if ticket:
            log.info("session %s: cancelled arrival ticket %s, drawn by a request that had timed out", key, ticket)

    async def rejoin(self, key: str) -> Turn:
        try:
            serving, epoch = await self._serving_script(keys=[self._tickets(key)], args=[""])
        except RedisError as exc:
            self._failed("order_rejoin", exc)
            return Turn(None)
        # Nothing served (the session's tickets expired): no ticket is stuck, so a fresh one waits for nobody.
        return Turn(int(serving), _text(epoch)) if int(serving) > 0 else await self.arrive(key)

    async def ready(self, key: str, turn: Turn) -> bool:
        if turn.ticket is None:
            return True
        try:
            serving, _ = await self._serving_script(keys=[self._tickets(key)], args=[turn.epoch])
        except RedisError as exc:
            self._failed("order_check", exc)
            return True
        serving = int(serving)
        if serving < 0 or serving >= turn.ticket:  # another epoch (Redis restarted empty), or its turn
            return True
        now = self._clock()
        if turn.seen_serving != serving:
            turn.seen_serving, turn.seen_at = serving, now
            return False
        if now - turn.seen_at < self._stale_after:
            return False
        log.warning("session %s: message ticket %d not handled for %.0f s (its worker died?); skipping it",
                    key, serving, now - turn.seen_at)
        try:
            serving = int(await self._release(key, serving, turn.epoch))
        except RedisError as exc:
            self._failed("order_skip", exc)
            return True
        turn.seen_serving, turn.seen_at = serving, now
        return serving < 0 or serving >= turn.ticket

    async def served(self, key: str, turn: Turn) -> None:
        if turn.ticket is None:
            return
        try:
            await self._release(key, turn.ticket, turn.epoch)
        except RedisError as exc:
            # Until it is released the session's later messages wait for it: released again once Redis answers.
            self._redo.add(("release", key, turn.ticket), partial(self._release, key, turn.ticket, turn.epoch),
                           ttl=KEY_TTL_S)
            self._failed("order_serve", exc)

    def _release(self, key: str, ticket: int, epoch: str) -> Awaitable[Any]:
        return self._release_script(keys=[self._tickets(key)], args=[ticket, epoch, KEY_TTL_S])

    def _failed(self, operation: str, exc: RedisError) -> None:
        if self._on_error is not None:
            self._on_error(operation)
        log.debug("arrival order: %s failed (%s)", operation, type(exc).__name__)

    async def aclose(self) -> None:
        await self._redo.aclose()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
