"""Telegram polling traffic through a Redis that is killed, hung and slowed: real `concord run`
workers on PostgreSQL and a private redis-server, one and two of them. Every message is answered once, in
order, none is turned away, and no chat waits long after Redis is back — a bounded form of
``python -m bench.redis_campaign`` (which reports the wait against the issue's 5 s; here the bound only has to
tell a backlog on two busy cores from the minute-long stall behind orphaned tickets)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.redis_campaign import Campaign, run_campaign

WAIT_LIMIT_S = 10.0


@pytest.mark.parametrize("workers", [1, 2])
async def test_polling_traffic_rides_out_redis_faults(postgres_url: str, tmp_path: Path, workers: int) -> None:
    # Each fault outlasts the client's 1 s socket timeout three times over; the calm lets the backlog drain.
    campaign = Campaign(workers=workers, chats=10, rate=5.0, fault_s=3.0, calm_s=3.0)
    figures, problems = await run_campaign(campaign, postgres_url, tmp_path)
    report = "\n".join(row.line() for row in figures)
    assert problems == [], report
    for row in figures:
        assert row.sent > 0, report
        assert (row.answered, row.twice, row.never) == (row.sent, 0, 0), report
        assert (row.turned_away, row.apologies) == (0, 0), report
        assert row.longest_wait_s <= WAIT_LIMIT_S, report
