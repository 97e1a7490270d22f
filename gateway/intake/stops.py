"""/stop across workers: a turn is cancelled where it runs, whichever worker the /stop reached.

With several workers a chat's /stop can land on a worker that is not running that chat's turn: webhooks behind
a load balancer, a message the inbox handed to another worker, a turn running on the worker that polls Telegram
while another serves the webhook port. `StopRelay` is the seam the router uses: it announces each turn it runs
(`StopRelay.watching`) and hands a /stop for a turn it does not run itself to `StopRelay.forward`, which says
what became of it. The worker running the turn decides, exactly as for a local /stop (`RunningTurn.request_stop`:
the sender of the running answer, or an admin).

* `LocalStops` — one worker (no Redis): every turn runs here, nothing elsewhere.
* `RedisStops` — a running turn is announced under ``<prefix>turn:<session>``, renewed while it runs and gone
  within `ENTRY_TTL_S` if its worker dies. A /stop elsewhere queues a request beside it
  (``<prefix>ask:<session>``, only if a turn is announced: otherwise nothing runs anywhere and the asker says
  so at once). The running turn's worker looks for requests every `POLL_S`, decides, and answers on
  ``<prefix>told:<request>``, which the asker waits for up to `ANSWER_WAIT_S`.

What the chat sees is one answer per /stop: the stopped turn's own "⏹️ Stopped." under what it had written
(the asker then says nothing), or the asker's refusal ("Only Ann, who asked, …") or "Nothing is running here
to stop." A request is taken only within `ASK_WINDOW_S` of being queued, measured on Redis's clock, and the
asker waits longer than that, so a request is never acted on after its asker gave up and answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.intake.background import beside, pause
from gateway.intake.busy import RunningTurn, StopCause, StopOutcome
from gateway.ops.logthrottle import LogThrottle, describe_cause

__all__ = ["ANSWER_WAIT_S", "ASK_WINDOW_S", "ENTRY_TTL_S", "POLL_S", "LocalStops", "RedisStops", "StopRelay"]

log = logging.getLogger(__name__)

# How often the worker running a turn looks for stop requests (and renews the turn's entry).
POLL_S = 0.25
# An entry its worker stopped renewing (the worker died) is gone after this.
ENTRY_TTL_S = 5.0
# A request is taken only this long after it was queued (Redis's clock) …
ASK_WINDOW_S = 1.5
# … and its asker waits longer for the answer, so it never answers a request that is still to be taken.
ANSWER_WAIT_S = 2.0
ANSWER_POLL_S = 0.05
_ANSWER_TTL_MS = 10_000

# KEYS[1] the turn's entry, KEYS[2] the session's requests. ARGV[1] our entry, ARGV[2] its expiry in ms,
# ARGV[3] the request window in ms. Announces (or renews) the turn — unless another turn of the session holds
# the entry — and takes the requests queued within the window.
_WATCH = """
local current = redis.call('get', KEYS[1])
if current == false or current == ARGV[1] then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
local asks = redis.call('lrange', KEYS[2], 0, -1)
if #asks == 0 then return {} end
redis.call('del', KEYS[2])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local fresh = {}
for _, ask in ipairs(asks) do
  local at, body = string.match(ask, '^(%d+) (.*)$')
  if at and now - tonumber(at) <= tonumber(ARGV[3]) then table.insert(fresh, body) end
end
return fresh
"""
# KEYS[1] the turn's entry, KEYS[2] the session's requests. ARGV[1] the request, ARGV[2] the window in ms.
# Queues the request, stamped with Redis's time, only while a turn is announced; returns whether it was.
_ASK = """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local t = redis.call('time')
redis.call('rpush', KEYS[2], t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000)) .. ' ' .. ARGV[1])
redis.call('pexpire', KEYS[2], ARGV[2])
return 1
"""
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class StopRelay(ABC):
    """Carries /stop to the worker running the turn."""

    @abstractmethod
    def watching(self, session: str, turn: RunningTurn) -> AbstractAsyncContextManager[None]:
        """Let a /stop received by another worker reach ``turn`` (of ``session``) while the block runs."""

    @abstractmethod
    async def forward(self, session: str, user_id: str, admin: bool,
                      cause: StopCause = "stop") -> tuple[StopOutcome, str]:
        """Ask the worker running ``session``'s turn to stop it for ``user_id`` (``cause``: a /stop, or a newer
        message in ``interrupt`` busy mode): what became of the request, and the name of the running answer's
        sender (for a refusal)."""


class LocalStops(StopRelay):
    """One worker: a turn not running here is not running anywhere."""

    @contextlib.asynccontextmanager
    async def watching(self, session: str, turn: RunningTurn) -> AsyncIterator[None]:
        yield

    async def forward(self, session: str, user_id: str, admin: bool,
                      cause: StopCause = "stop") -> tuple[StopOutcome, str]:
        return StopOutcome.NOTHING, ""


class RedisStops(StopRelay):
    """/stop between workers sharing one Redis (see the module docstring); ``on_error(operation)`` hears each
    failed Redis call."""

    def __init__(self, client: Redis, *, prefix: str = "concord:stop:", worker: str = "",
                 on_error: Callable[[str], None] | None = None) -> None:
        self._client = client
        self._prefix = prefix
        self._worker = worker
        self._on_error = on_error or (lambda operation: None)
        self._watch = client.register_script(_WATCH)
        self._ask = client.register_script(_ASK)
        self._release = client.register_script(_RELEASE)
        self._warn = LogThrottle(log)

    def _keys(self, session: str) -> list[str]:
        return [f"{self._prefix}turn:{session}", f"{self._prefix}ask:{session}"]

    def watching(self, session: str, turn: RunningTurn) -> AbstractAsyncContextManager[None]:
        entry = f"{self._worker} {uuid.uuid4().hex}"
        return beside(partial(self._watch_turn, session, turn, entry), f"stop-watch:{session}")

    async def _watch_turn(self, session: str, turn: RunningTurn, entry: str, stopping: asyncio.Event) -> None:
        """Announce ``turn`` and take its stop requests every `POLL_S` until ``stopping``; then withdraw it."""
        args = [entry, int(ENTRY_TTL_S * 1000), int(ASK_WINDOW_S * 1000)]
        while True:
            try:
                for ask in await self._watch(keys=self._keys(session), args=args):
                    request = json.loads(ask)
                    # A request taken as the turn ended finds nothing left to stop.
                    cause = "interrupt" if request.get("cause") == "interrupt" else "stop"
                    outcome = StopOutcome.NOTHING if stopping.is_set() else \
                        turn.request_stop(str(request["user"]), bool(request["admin"]), cause)
                    log.info("%s from %s for %s, received by another worker: %s",
                             "/stop" if cause == "stop" else "a newer message", request["user"], session,
                             outcome.value)
                    await self._answer(str(request["reply"]), outcome, turn.user_name)
            except RedisError as exc:
                self._on_error("stop_watch")
                self._warn.warning(f"watch:{type(exc).__name__}", "redis unavailable (%s): a /stop sent to "
                                   "another worker cannot reach the turn of %s until it is back",
                                   describe_cause(exc), session)
            if await pause(stopping, POLL_S):
                break
        try:
            await self._release(keys=self._keys(session)[:1], args=[entry])
        except RedisError:
            self._on_error("stop_release")  # the entry expires by itself within ENTRY_TTL_S

    async def _answer(self, reply: str, outcome: StopOutcome, name: str) -> None:
        key = f"{self._prefix}told:{reply}"
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps({"outcome": outcome.value, "name": name}))
            pipe.pexpire(key, _ANSWER_TTL_MS)
            await pipe.execute()

    async def forward(self, session: str, user_id: str, admin: bool,
                      cause: StopCause = "stop") -> tuple[StopOutcome, str]:
        reply = uuid.uuid4().hex
        request = json.dumps({"user": user_id, "admin": admin, "reply": reply, "cause": cause})
        told = f"{self._prefix}told:{reply}"
        try:
            if not await self._ask(keys=self._keys(session), args=[request, int(ASK_WINDOW_S * 1000)]):
                return StopOutcome.NOTHING, ""
            deadline = asyncio.get_running_loop().time() + ANSWER_WAIT_S
            while True:
                answer = await self._client.lpop(told)
                if answer is not None:
                    decoded = json.loads(answer)
                    return StopOutcome(decoded["outcome"]), str(decoded["name"])
                if asyncio.get_running_loop().time() >= deadline:
                    # The turn ended before its worker saw the request (or that worker died): nothing runs.
                    return StopOutcome.NOTHING, ""
                await asyncio.sleep(ANSWER_POLL_S)
        except RedisError as exc:
            self._on_error("stop_forward")
            self._warn.warning(f"forward:{type(exc).__name__}", "redis unavailable (%s): a /stop for %s cannot "
                               "reach the worker running it", describe_cause(exc), session)
            return StopOutcome.UNREACHABLE, ""
