"""Per-session and job locks (R-S5, R-G4) behind one interface: in-process for one worker, Redis for many.

Two locks per session, on separate keys:

* the **turn lock** (``session_turn``) serializes every message of a session across workers; it waits;
* the **compression lock** (``try_compression_lock``) never waits: contention yields False and the caller
  leaves the messages unchanged while the holder finishes (fail-safe).

and one per scheduled job that must not run twice at once anywhere (``try_job_lock``: the hygiene sweep, which
a worker's schedule and a ``concord sweep`` from cron may start together), which never waits either.

A broken lock backend must never wedge a session: the locks then log a warning (throttled: one line per
failure class, repeats counted) and let the caller proceed unlocked (fail-open), which risks one overlapping
turn or compaction — the store refuses a stale compaction and a turn then appends after the winner — but
never a frozen conversation.

Redis locks cannot be orphaned: a request that timed out on the client may still be executed by a slow or
resumed server, and a release that timed out leaves the key behind; both are remembered with their token
and deleted (compare-and-delete, so never someone else's lock) as soon as Redis answers again. Waiting for a
held turn lock is bounded by the lock's expiry, logged while it lasts, and then fails open.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial

from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from gateway.intake.background import beside, pause
from gateway.intake.redo import Redo
from gateway.ops.logthrottle import LogThrottle, describe_cause

__all__ = ["InProcessLocks", "LockBackend", "RedisLocks", "fail_fast_client"]

log = logging.getLogger(__name__)


class LockBackend(ABC):
    """Per-session turn and compression locks."""

    @abstractmethod
    def session_turn(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Hold the session's turn lock for the block, waiting for the current holder (fail-open)."""

    @abstractmethod
    def try_compression_lock(self, session_id: str) -> AbstractAsyncContextManager[bool]:
        """Yield True if the compression lock was taken, False if someone else holds it (fail-open: True)."""

    @abstractmethod
    async def compression_running(self, session_id: str) -> bool:
        """Whether someone holds the session's compression lock now (a compaction ahead of need runs), without
        taking it; False when the backend cannot tell (fail-open: the caller goes on as if none ran)."""

    @abstractmethod
    def try_job_lock(self, job: str) -> AbstractAsyncContextManager[bool]:
        """Yield True while this process runs ``job`` (a sweep) and no other may, False if another process is
        running it (fail-open: True). Held as long as the block runs."""

    async def aclose(self) -> None:  # noqa: B027 — nothing to release for backends without connections
        """Release connections. Idempotent."""


@dataclass(slots=True)
class _Slot:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class InProcessLocks(LockBackend):
    """Locks for a single gateway process.

    The per-session map only holds sessions someone is using or waiting on; an entry is evicted when its
    last user leaves, so the map is bounded by concurrent work, not by how many sessions ever existed.
    """

    def __init__(self) -> None:
        self._turns: dict[str, _Slot] = {}
        self._held: set[str] = set()  # the try-locks taken: compression per session, jobs

    @asynccontextmanager
    async def session_turn(self, session_id: str) -> AsyncIterator[None]:
        slot = self._turns.setdefault(session_id, _Slot())
        slot.users += 1
        try:
            async with slot.lock:
                yield
        finally:
            slot.users -= 1
            if slot.users == 0:
                del self._turns[session_id]

    def try_compression_lock(self, session_id: str) -> AbstractAsyncContextManager[bool]:
        return self._try(f"compress:{session_id}")

    async def compression_running(self, session_id: str) -> bool:
        return f"compress:{session_id}" in self._held

    def try_job_lock(self, job: str) -> AbstractAsyncContextManager[bool]:
        return self._try(f"job:{job}")

    @asynccontextmanager
    async def _try(self, name: str) -> AsyncIterator[bool]:
        if name in self._held:
            yield False
            return
        self._held.add(name)
        try:
            yield True
        finally:
            self._held.discard(name)

    def held_keys(self) -> int:
        """How many sessions currently have a turn-lock entry (for tests and metrics)."""
        return len(self._turns)


def fail_fast_client(url: str, *, connect_timeout: float = 0.5, socket_timeout: float = 1.0) -> Redis:
    """A Redis client that gives up at once on a dead server instead of retrying for seconds."""
    return Redis.from_url(url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=connect_timeout,
                          socket_timeout=socket_timeout)


# KEYS[1] the lock, ARGV[1] our token (, ARGV[2] the new expiry in ms): act only on a lock we own.
RENEW_SCRIPT = ("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end "
                "return 0")
RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


@dataclass(frozen=True, slots=True)
class _Held:
    key: str
    token: str
    owner: str  # what the lock is for, as the log says it: "session telegram:dm:42", "job hygiene-sweep"


class RedisLocks(LockBackend):
    """Redis locks (``SET NX PX`` with a random token) with an expiry, renewed in the background while held,
    so a dead holder frees the lock after at most ``ttl`` seconds but a live one keeps it as long as it works.

    ``max_wait`` bounds the wait for a held turn lock (default: the turn lock's expiry); ``wait_note_s`` is
    how often a long wait is logged.
    """

    def __init__(self, client: Redis, *, prefix: str = "concord:lock:", turn_ttl: float = 30.0,
                 compression_ttl: float = 60.0, poll_interval: float = 0.05, max_wait: float | None = None,
                 wait_note_s: float = 5.0, cleanup_interval: float = 0.25,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        # Hears each failed Redis call by operation (acquire, renew, release, lost): the metrics' lock errors.
        self._on_error = on_error or (lambda operation: None)
        self._prefix = prefix
        self._turn_ttl = turn_ttl
        self._compression_ttl = compression_ttl
        self._poll = poll_interval
        self._max_wait = turn_ttl if max_wait is None else max_wait
        self._wait_note = wait_note_s
        self._renew = client.register_script(RENEW_SCRIPT)
        self._release_script = client.register_script(RELEASE_SCRIPT)
        self._warn = LogThrottle(log)
        # Locks that may exist in Redis without anybody holding them: deleted by their token once Redis answers.
        self._orphans = Redo("redis-locks", interval=cleanup_interval)
        self._closed = False

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "concord:lock:", turn_ttl: float = 30.0,
                 compression_ttl: float = 60.0, max_wait: float | None = None,
                 on_error: Callable[[str], None] | None = None) -> RedisLocks:
        """Locks over a fail-fast client for ``url`` (``redis://host:port/db``)."""
        return cls(fail_fast_client(url), prefix=prefix, turn_ttl=turn_ttl, compression_ttl=compression_ttl,
                   max_wait=max_wait, on_error=on_error)

    @property
    def orphans(self) -> int:
        """Lock requests or releases that Redis has not confirmed yet and that are still to be cleaned up."""
        return self._orphans.pending

    @asynccontextmanager
    async def session_turn(self, session_id: str) -> AsyncIterator[None]:
        held = _Held(f"{self._prefix}turn:{session_id}", uuid.uuid4().hex, f"session {session_id}")
        if not await self._acquire(held, self._turn_ttl, wait=True,
                                  what="turn lock", fallback="proceeding WITHOUT serialization"):
            yield
            return
        async with self._holding(held, self._turn_ttl):
            yield

    def try_compression_lock(self, session_id: str) -> AbstractAsyncContextManager[bool]:
        held = _Held(f"{self._prefix}compress:{session_id}", uuid.uuid4().hex, f"session {session_id}")
        return self._try(held, what="compression lock", fallback="compressing without it")

    async def compression_running(self, session_id: str) -> bool:
        try:
            return bool(await self._client.exists(f"{self._prefix}compress:{session_id}"))
        except RedisError as exc:
            self._on_error("acquire")
            self._warn.warning(f"unavailable:compression check:{type(exc).__name__}", "lock backend unavailable "
                               "(%s): cannot tell whether session %s is being compacted; going on as if not",
                               describe_cause(exc), session_id)
            return False

    def try_job_lock(self, job: str) -> AbstractAsyncContextManager[bool]:
        held = _Held(f"{self._prefix}job:{job}", uuid.uuid4().hex, f"job {job}")
        return self._try(held, what="job lock", fallback="running it without it")

    @asynccontextmanager
    async def _try(self, held: _Held, *, what: str, fallback: str) -> AsyncIterator[bool]:
        """Yield True while ``held`` is ours (renewed, released after), False when another holds it."""
        acquired = await self._acquire(held, self._compression_ttl, wait=False, what=what, fallback=fallback)
        if acquired is None:
            yield True
            return
        if not acquired:
            yield False
            return
        async with self._holding(held, self._compression_ttl):
            yield True

    async def _acquire(self, held: _Held, ttl: float, *, wait: bool, what: str, fallback: str) -> bool | None:
        """True/False as Redis answered; None when the caller proceeds unlocked (Redis broken, or waited too
        long for the holder: fail-open)."""
        started = time.monotonic()
        noted = started
        while True:
            try:
                if await self._client.set(held.key, held.token, nx=True, px=max(1, int(ttl * 1000))):
                    return True
            except RedisError as exc:
                # The request may still reach Redis (a hung server executes it when resumed): remember it, so
                # the key is deleted by its token instead of blocking the session until it expires.
                self._orphan(held, ttl)
                self._on_error("acquire")
                self._warn.warning(f"unavailable:{what}:{type(exc).__name__}", "lock backend unavailable (%s): %s "
                                   "for %s; %s", describe_cause(exc), what, held.owner, fallback)
                return None
            if not wait:
                return False
            now = time.monotonic()
            if now - started >= self._max_wait:
                log.warning("%s: gave up waiting for its %s after %.1f s (the holder keeps renewing it); "
                            "%s", held.owner, what, now - started, fallback)
                return None
            if now - noted >= self._wait_note:
                noted = now
                log.info("%s: waiting for its %s, held by another worker, for %.1f s so far",
                         held.owner, what, now - started)
            await asyncio.sleep(self._poll)

    @asynccontextmanager
    async def _holding(self, held: _Held, ttl: float) -> AsyncIterator[None]:
        # Renewed beside the block, and told to stop rather than cancelled (`gateway.intake.background`: a cancel
        # mid-renewal could be swallowed, renewing the lock for good and never returning).
        try:
            async with beside(partial(self._keep, held, ttl), f"lock-renewal:{held.key}"):
                yield
        finally:
            await self._release(held, ttl)

    async def _keep(self, held: _Held, ttl: float, stopping: asyncio.Event) -> None:
        while not await pause(stopping, ttl / 3):
            try:
                owned = await self._renew(keys=[held.key], args=[held.token, max(1, int(ttl * 1000))])
            except RedisError as exc:
                self._on_error("renew")
                self._warn.warning(f"renew:{type(exc).__name__}", "could not renew lock %s for %s (%s); "
                                   "retrying", held.key, held.owner, describe_cause(exc))
                continue
            if not owned:
                self._on_error("lost")
                self._warn.warning("lost", "lock %s for %s expired or was lost while held (Redis "
                                   "restarted or stalled); work may overlap, proceeding", held.key,
                                   held.owner)
                return

    async def _release(self, held: _Held, ttl: float) -> None:
        try:
            released = await self._release_script(keys=[held.key], args=[held.token])
        except RedisError as exc:
            self._orphan(held, ttl)
            self._on_error("release")
            self._warn.warning(f"release:{type(exc).__name__}", "could not release lock %s for %s (%s); "
                               "it is deleted as soon as Redis answers", held.key, held.owner,
                               describe_cause(exc))
            return
        if not released:
            self._on_error("lost")
            self._warn.warning("lost-before-release", "lock %s for %s was lost before release (expired "
                               "or Redis restarted)", held.key, held.owner)

    def _orphan(self, held: _Held, ttl: float) -> None:
        def deleted(result: object) -> None:
            if result:
                log.info("deleted lock %s for %s, set by a request that had timed out", held.key, held.owner)

        self._orphans.add(held, partial(self._release_script, keys=[held.key], args=[held.token]), ttl=ttl,
                          done=deleted)

    async def aclose(self) -> None:
        """Delete what orphans Redis still answers for, stop, and close the connection pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._orphans.aclose()
        await self._client.aclose()
