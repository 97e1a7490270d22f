"""Expiring claims (inbound de-dup, scheduled-run slots): in-process and in Redis, one winner per key, and a
Redis that is down answers fail-open."""

from __future__ import annotations

import asyncio
import uuid

from gateway.intake.claims import InProcessClaims, RedisClaims
from gateway.intake.locks import fail_fast_client


async def test_in_process_claims_expire_and_stay_bounded() -> None:
    now = [0.0]
    claims = InProcessClaims(capacity=3, clock=lambda: now[0])
    assert await claims.claim("a", 10) is True
    assert await claims.claim("a", 10) is False
    assert await claims.claimed("a")
    now[0] = 10.5
    assert not await claims.claimed("a")
    assert await claims.claim("a", 10) is True
    for key in "bcd":
        await claims.claim(key, 100)
    assert not await claims.claimed("a")  # the oldest fell out past the capacity
    assert all([await claims.claimed(k) for k in "bcd"])


async def test_redis_claims_have_one_winner_and_expire(redis_url: str) -> None:
    prefix = f"concord-test:{uuid.uuid4().hex}:"
    workers = [RedisClaims(fail_fast_client(redis_url), prefix=prefix) for _ in range(3)]
    try:
        wins = await asyncio.gather(*(w.claim("inbound:telegram:1", 0.3) for w in workers for _ in range(4)))
        assert sum(wins) == 1
        assert await workers[2].claimed("inbound:telegram:1")
        await asyncio.sleep(0.4)
        assert not await workers[0].claimed("inbound:telegram:1")
        assert await workers[1].ping()
    finally:
        for w in workers:
            await w.aclose()


async def test_a_dead_redis_fails_open_and_is_counted() -> None:
    errors: list[str] = []
    claims = RedisClaims(fail_fast_client("redis://127.0.0.1:9/0"), on_error=errors.append)
    try:
        assert await claims.claim("x", 10) is True  # better a duplicate answer than a lost one
        assert await claims.claimed("x") is False
    finally:
        await claims.aclose()
    assert errors == ["claim_claim", "claim_check"]
