"""A lease only one worker holds at a time, taken over when its holder dies.

Telegram's long polling allows one poller per bot (a second ``getUpdates`` gets 409 Conflict), so with several
workers exactly one polls: the holder of the ``telegram-polling`` lease. `RedisLease` is a Redis key with an
expiry of ``ttl`` seconds holding its holder's token, extended every ``ttl / 3`` while held; a holder that dies
stops extending it, the key expires and a worker that finds it free twice in a row (it asks every second)
takes over, so the gap is at most about ``ttl`` seconds plus two. A holder gives the lease up rather than risk
two pollers: at once when another worker holds it, and, when Redis does not answer, once the key it last
extended may have expired there (until then nobody else can take it, so polling goes on through a short
hiccup). A holder that finds its own key still there when Redis answers again keeps it (it used to
wait out its own key's expiry), and one whose key was lost with Redis's data takes it back before another
worker's second ask. Without Redis, `SoleLease` is held from the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.intake.background import pause
from gateway.intake.locks import RELEASE_SCRIPT

__all__ = ["Lease", "RedisLease", "SoleLease"]

log = logging.getLogger(__name__)

Hook = Callable[[], Awaitable[None]]


class Lease(ABC):
    """Runs ``on_gain`` when this worker takes the lease and ``on_loss`` when it loses it."""

    @abstractmethod
    async def hold(self, on_gain: Hook, on_loss: Hook, stopping: asyncio.Event) -> None:
        """Take, keep and retake the lease until ``stopping`` is set; release it on the way out. Stopped by the
        event, not cancelled: a cancel landing mid-call may be swallowed by the Redis client
        (`gateway.intake.background`)."""


class SoleLease(Lease):
    """One worker only: the lease is ours from the start."""

    async def hold(self, on_gain: Hook, on_loss: Hook, stopping: asyncio.Event) -> None:
        await on_gain()
        await stopping.wait()


# KEYS[1] the lease, KEYS[2] who asked first for it while free; ARGV[1] our token, ARGV[2] its lifetime in ms,
# ARGV[3] '1' when we held it last, ARGV[4] how long a first ask stands, in ms. Ours: extended. Free: taken by
# its last holder at once (its key expired while Redis did not answer, or was lost with Redis's data), by another
# worker on its second ask, so that a holder whose key vanished has that long to take it back before anyone
# else polls. -> 1 held, 0 not (yet).
_TAKE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if holder then return 0 end
local first = redis.call('GET', KEYS[2])
if ARGV[3] == '1' or first == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('DEL', KEYS[2])
  return 1
end
if not first then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4]) end
return 0
"""


class RedisLease(Lease):
    """The lease as a Redis key ``name`` holding this process's token (``holder`` and a random suffix, so two
    workers given the same id never both hold it)."""

    def __init__(self, client: Redis, name: str, *, ttl_s: float, holder: str,
                 on_error: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._name = name
        self._ttl = ttl_s
        self._token = f"{holder}#{secrets.token_hex(4)}"
        self._on_error = on_error
        self._clock = clock
        self._take = client.register_script(_TAKE)
        self._release = client.register_script(RELEASE_SCRIPT)
        self.held = False
        # Whether, as far as this worker knows, it held the lease last (also after giving it up while Redis did
        # not answer): a free lease is then taken back at once, not on a second ask.
        self._last_holder = False

    async def hold(self, on_gain: Hook, on_loss: Hook, stopping: asyncio.Event) -> None:
        renew_every = self._ttl / 3
        # Not holding it: asked again often, so a dead holder's lease is taken over within two asks.
        ask_every = min(renew_every, 1.0)
        # Held through a Redis that does not answer only while the key we last extended certainly still exists
        # there (it lives ``ttl`` from that request's send), less a renewal's time to stop polling.
        confirmed = 0.0
        try:
            while not stopping.is_set():
                sent = self._clock()
                answer = await self._ask(ask_every)
                if answer is not None:
                    self._last_holder = answer
                    if answer:
                        confirmed = sent
                        if not self.held:
                            self.held = True
                            log.info("lease %s taken by %s", self._name, self._token)
                            await on_gain()
                    elif self.held:
                        await self._lose(on_loss, "taken by another worker")
                elif self.held and self._clock() >= confirmed + self._ttl - renew_every:
                    await self._lose(on_loss, "Redis does not answer")
                await pause(stopping, renew_every if self.held and answer else ask_every)
        finally:
            if self.held:
                self.held = False
                with contextlib.suppress(RedisError):
                    # The next worker takes over at once instead of after the expiry.
                    await self._release(keys=[self._name], args=[self._token])

    async def _ask(self, ask_every: float) -> bool | None:
        """Take or extend the lease: True held, False not held, None Redis did not answer."""
        args = [self._token, max(1, int(self._ttl * 1000)), "1" if self._last_holder else "0", int(ask_every * 3000)]
        try:
            return bool(await self._take(keys=[self._name, f"{self._name}:first-ask"], args=args))
        except RedisError as exc:
            if self._on_error is not None:
                self._on_error("lease_renew" if self.held else "lease_acquire")
            log.debug("lease %s: Redis did not answer (%s)", self._name, type(exc).__name__)
            return None

    async def _lose(self, on_loss: Hook, why: str) -> None:
        self.held = False
        log.warning("lease %s lost by %s (%s); stopping until it is taken again", self._name, self._token, why)
        await on_loss()
