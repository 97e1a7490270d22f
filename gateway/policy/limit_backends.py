"""Where rate-limit state lives, behind one interface: in-process for one worker, Redis for many.

Two kinds of state, keyed by subject (``user:discord:42``, ``chat:discord:group:3000``):

* **message buckets**: token buckets of ``per_minute`` capacity refilled at ``per_minute / 60`` a second.
  Taking is all-or-nothing over several buckets (the sender's and the chat's), so a refused message costs
  neither. On Redis one Lua script does it on the server's clock, so workers never disagree about time;
* **daily token counters**: prompt + completion tokens per subject and UTC day — the agent's calls and the
  summary calls of the compactions the subject caused — with the summaries' share, and of it their answers',
  kept beside the total (for ``/usage``) and a per-day ranking of users for ``/stats``. Counters expire two days
  after their day.

A broken Redis must not stop the bot: calls log a warning and fail open (the message is allowed, the tokens
go uncounted) — the same trade as the locks make.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.intake.locks import fail_fast_client
from gateway.ops.logthrottle import LogThrottle, describe_cause

__all__ = ["Bucket", "InProcessLimits", "LimitBackend", "RedisLimits"]

log = logging.getLogger(__name__)

_DAY_TTL_SECONDS = 2 * 86_400


@dataclass(frozen=True, slots=True)
class Bucket:
    """One message bucket: its subject and how many messages a minute it allows."""

    subject: str
    per_minute: int


class LimitBackend(ABC):
    """Message buckets and daily token counters."""

    @abstractmethod
    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        """Take one message from every bucket, or from none: None when taken, else (the index of a bucket
        that is empty, seconds until it holds a message again)."""

    @abstractmethod
    async def spent(self, subjects: Sequence[str], day: str) -> list[int]:
        """Tokens each subject spent on ``day`` (``YYYY-MM-DD``, UTC)."""

    @abstractmethod
    async def add(self, subjects: Sequence[str], day: str, tokens: int, *, summary: bool = False,
                  output: int = 0) -> None:
        """Count ``tokens`` against every subject on ``day``; ``summary``: they were a summary call's, which
        are also counted apart, and so are the ``output`` tokens of them its answer took."""

    @abstractmethod
    async def summary_spent(self, subjects: Sequence[str], day: str) -> list[tuple[int, int]]:
        """Of what each subject spent on ``day``, the tokens of summary calls and, of those, their answers'."""

    @abstractmethod
    async def top(self, day: str, count: int) -> list[tuple[str, int]]:
        """The ``count`` users who spent most on ``day``: (subject, tokens), highest first."""

    async def aclose(self) -> None:  # noqa: B027 — nothing to release for backends without connections
        """Release connections. Idempotent."""


class InProcessLimits(LimitBackend):
    """State of one process; ``max_subjects`` bounds each map (the least recently used subject goes)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_subjects: int = 100_000) -> None:
        self._clock = clock
        self._max = max_subjects
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        # (day, subject) → tokens, and (day, "summary:" + subject) → the summaries' share of them.
        self._tokens: OrderedDict[tuple[str, str], int] = OrderedDict()

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        now = self._clock()
        levels = []
        for index, bucket in enumerate(buckets):
            level, at = self._buckets.get(bucket.subject, (float(bucket.per_minute), now))
            rate = bucket.per_minute / 60.0
            level = min(float(bucket.per_minute), level + (now - at) * rate)
            if level < 1.0:
                return index, (1.0 - level) / rate
            levels.append(level)
        for bucket, level in zip(buckets, levels, strict=True):
            self._put(self._buckets, bucket.subject, (level - 1.0, now))
        return None

    async def spent(self, subjects: Sequence[str], day: str) -> list[int]:
        return [self._tokens.get((day, subject), 0) for subject in subjects]

    async def add(self, subjects: Sequence[str], day: str, tokens: int, *, summary: bool = False,
                  output: int = 0) -> None:
        for subject in subjects:
            counts = [((day, subject), tokens)]
            if summary:
                counts += [((day, f"summary:{subject}"), tokens), ((day, f"summary-output:{subject}"), output)]
            for key, count in counts:
                self._put(self._tokens, key, self._tokens.get(key, 0) + count)

    async def summary_spent(self, subjects: Sequence[str], day: str) -> list[tuple[int, int]]:
        tokens = await self.spent([f"summary:{subject}" for subject in subjects], day)
        outputs = await self.spent([f"summary-output:{subject}" for subject in subjects], day)
        return list(zip(tokens, outputs, strict=True))

    async def top(self, day: str, count: int) -> list[tuple[str, int]]:
        users = [(subject, tokens) for (d, subject), tokens in self._tokens.items()
                 if d == day and subject.startswith("user:")]
        return sorted(users, key=lambda item: (-item[1], item[0]))[:count]

    def _put(self, table: OrderedDict, key: object, value: object) -> None:  # type: ignore[type-arg]
        table[key] = value
        table.move_to_end(key)
        while len(table) > self._max:
            table.popitem(last=False)


# KEYS: one hash per bucket. ARGV: per-minute capacity of each. Returns {} when taken, else {index, wait ms}.
_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local levels = {}
for i, key in ipairs(KEYS) do
  local cap = tonumber(ARGV[i])
  local rate = cap / 60.0
  local state = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(state[1]) or cap
  local at = tonumber(state[2]) or now
  level = math.min(cap, level + math.max(0, now - at) * rate)
  if level < 1 then
    return {i - 1, math.ceil((1 - level) / rate * 1000)}
  end
  levels[i] = level
end
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'level', tostring(levels[i] - 1), 'at', tostring(now))
  redis.call('EXPIRE', key, 120)
end
return {}
"""


class RedisLimits(LimitBackend):
    """State shared by every worker on one Redis; keys start with ``prefix``."""

    def __init__(self, client: Redis, *, prefix: str = "concord:limits:") -> None:
        self._client = client
        self._prefix = prefix
        self._take = client.register_script(_TAKE)
        self._closed = False
        # Through an outage every message fails the same way: one line per kind of failure, repeats counted.
        self._warn = LogThrottle(log)

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "concord:limits:") -> RedisLimits:
        """Limits over a fail-fast client for ``url``."""
        return cls(fail_fast_client(url), prefix=prefix)

    def _tokens_key(self, day: str, subject: str) -> str:
        return f"{self._prefix}tokens:{day}:{subject}"

    def _summary_key(self, day: str, subject: str) -> str:
        return f"{self._prefix}summary-tokens:{day}:{subject}"

    def _summary_output_key(self, day: str, subject: str) -> str:
        return f"{self._prefix}summary-output:{day}:{subject}"

    def _top_key(self, day: str) -> str:
        return f"{self._prefix}top:{day}"

    async def take(self, buckets: Sequence[Bucket]) -> tuple[int, float] | None:
        keys = [f"{self._prefix}bucket:{b.subject}" for b in buckets]
        try:
            result = await self._take(keys=keys, args=[b.per_minute for b in buckets])
        except RedisError as exc:
            self._warn.warning(f"take:{type(exc).__name__}", "rate limits unavailable (%s); allowing the message",
                               describe_cause(exc))
            return None
        if not result:
            return None
        index, wait_ms = result
        return int(index), int(wait_ms) / 1000.0

    async def spent(self, subjects: Sequence[str], day: str) -> list[int]:
        return await self._counts([self._tokens_key(day, s) for s in subjects])

    async def summary_spent(self, subjects: Sequence[str], day: str) -> list[tuple[int, int]]:
        counts = await self._counts([key(day, s) for s in subjects
                                     for key in (self._summary_key, self._summary_output_key)])
        return list(zip(counts[::2], counts[1::2], strict=True))

    async def _counts(self, keys: list[str]) -> list[int]:
        if not keys:
            return []
        try:
            values = await self._client.mget(keys)
        except RedisError as exc:
            self._warn.warning(f"spent:{type(exc).__name__}", "token budgets unavailable (%s); not enforced for "
                               "this message", describe_cause(exc))
            return [0] * len(keys)
        return [int(v) if v is not None else 0 for v in values]

    async def add(self, subjects: Sequence[str], day: str, tokens: int, *, summary: bool = False,
                  output: int = 0) -> None:
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                for subject in subjects:
                    counts = [(self._tokens_key(day, subject), tokens)]
                    if summary:
                        counts += [(self._summary_key(day, subject), tokens),
                                   (self._summary_output_key(day, subject), output)]
                    for key, count in counts:
                        pipe.incrby(key, count)
                        pipe.expire(key, _DAY_TTL_SECONDS)
                    if subject.startswith("user:"):
                        pipe.zincrby(self._top_key(day), tokens, subject)
                pipe.expire(self._top_key(day), _DAY_TTL_SECONDS)
                await pipe.execute()
        except RedisError as exc:
            self._warn.warning(f"add:{type(exc).__name__}", "could not count %d tokens (%s); they go unbudgeted",
                               tokens, describe_cause(exc))

    async def top(self, day: str, count: int) -> list[tuple[str, int]]:
        try:
            rows = await self._client.zrevrange(self._top_key(day), 0, count - 1, withscores=True)
        except RedisError as exc:
            self._warn.warning(f"top:{type(exc).__name__}", "top spenders unavailable (%s)", describe_cause(exc))
            return []
        return [(member.decode() if isinstance(member, bytes) else str(member), int(score)) for member, score in rows]

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._client.aclose()
