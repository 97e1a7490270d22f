"""`adapters.supervise`: start-up retries, restarts with backoff, giving up, fatal causes (no platform)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapters.supervise import Backoff, Supervisor, Unrecoverable, retry_start

FAST = Backoff(first=0.01, ceiling=0.02, max_failures=3, healthy_after=60.0)


def test_backoff_doubles_up_to_its_ceiling() -> None:
    backoff = Backoff(first=1.0, ceiling=5.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    with pytest.raises(ValueError):
        Backoff(first=2.0, ceiling=1.0)


async def test_retry_start_retries_then_succeeds_or_gives_up(caplog: pytest.LogCaptureFixture) -> None:
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError("connection refused\nsecond line")
        return "up"

    with caplog.at_level(logging.WARNING):
        assert await retry_start(flaky, what="x: connect", backoff=FAST) == "up"
    assert len(attempts) == 3
    assert caplog.text.count("x: connect failed (OSError: connection refused)") == 2 and "second line" not in caplog.text

    async def down() -> None:
        raise OSError("refused")

    with pytest.raises(Unrecoverable, match="failed 3 times, last: OSError: refused"):
        await retry_start(down, what="x: connect", backoff=FAST)

    async def rejected() -> None:
        raise PermissionError("bad token")

    with pytest.raises(PermissionError):
        await retry_start(rejected, what="x", backoff=FAST, fatal=(PermissionError,))


async def test_a_connection_is_restarted_until_it_keeps_failing(caplog: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []

    async def connection() -> None:
        runs.append(1)
        raise ValueError("bad frame")

    supervisor = Supervisor("x", FAST)
    with caplog.at_level(logging.ERROR):
        supervisor.watch(connection)
        cause = await asyncio.wait_for(supervisor.failed, 2)
    assert isinstance(cause, Unrecoverable) and "lost 3 times in a row, last: ValueError: bad frame" in str(cause)
    assert len(runs) == 4 and supervisor.restarts == 3
    assert caplog.text.count("x: connection lost (ValueError: bad frame); restarting in") == 3
    await supervisor.stop()


async def test_a_run_that_made_progress_resets_the_count_and_fatal_ends_at_once() -> None:
    runs: list[int] = []

    async def connection() -> None:
        runs.append(1)
        if len(runs) == 8:
            raise PermissionError("token revoked")
        raise ValueError("dropped")

    supervisor = Supervisor("x", FAST, fatal=(PermissionError,), progressed=lambda started: len(runs) % 2 == 0)
    supervisor.watch(connection)
    cause = await asyncio.wait_for(supervisor.failed, 2)
    assert len(runs) == 8 and "PermissionError: token revoked" in str(cause)


async def test_stop_is_not_a_failure() -> None:
    closed = asyncio.Event()

    async def connection() -> None:
        await closed.wait()

    supervisor = Supervisor("x", FAST)
    supervisor.watch(connection)
    await asyncio.sleep(0.01)

    async def close() -> None:
        closed.set()

    await supervisor.stop(close)
    await supervisor.stop()
    assert not supervisor.failed.done()
