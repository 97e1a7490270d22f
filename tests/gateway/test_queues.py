"""Per-session FIFO: order kept, nothing dropped or run twice, sessions concurrent, bounded map."""

from __future__ import annotations

import asyncio

import pytest

from gateway.intake.queues import QueueClosed, SessionQueues


async def test_same_key_runs_in_order_one_at_a_time_and_keys_run_concurrently() -> None:
    log: list[tuple[str, str, int]] = []
    running: dict[str, int] = {}
    overlap = {"same": 0, "cross": 0}

    async def process(key: str, item: int) -> None:
        running[key] = running.get(key, 0) + 1
        overlap["same"] = max(overlap["same"], running[key])
        overlap["cross"] = max(overlap["cross"], sum(1 for v in running.values() if v))
        log.append(("start", key, item))
        await asyncio.sleep(0.01)
        running[key] -= 1

    queues: SessionQueues[str, int] = SessionQueues(process)
    await asyncio.gather(*(queues.submit(key, i) for i in range(10) for key in ("a", "b")))
    for key in ("a", "b"):
        assert [i for _, k, i in log if k == key] == list(range(10))
    assert overlap == {"same": 1, "cross": 2}
    assert queues.busy == 0  # drained lanes are removed


async def test_a_failing_item_fails_only_its_own_submitter() -> None:
    done: list[int] = []

    async def process(key: str, item: int) -> None:
        if item == 1:
            raise ValueError("boom")
        done.append(item)

    queues: SessionQueues[str, int] = SessionQueues(process)
    results = await asyncio.gather(*(queues.submit("k", i) for i in range(3)), return_exceptions=True)
    assert results[0] is None and isinstance(results[1], ValueError) and results[2] is None
    assert done == [0, 2]


async def test_cancelled_submitter_does_not_drop_its_message() -> None:
    done: list[int] = []
    gate = asyncio.Event()

    async def process(key: str, item: int) -> None:
        await gate.wait()
        done.append(item)

    queues: SessionQueues[str, int] = SessionQueues(process)
    first = asyncio.create_task(queues.submit("k", 1))
    second = asyncio.create_task(queues.submit("k", 2))
    await asyncio.sleep(0)
    assert queues.pending("k") == 2
    second.cancel()
    gate.set()
    await first
    await asyncio.sleep(0.01)
    assert done == [1, 2]


async def test_close_finishes_queued_work_then_refuses() -> None:
    done: list[int] = []

    async def process(key: str, item: int) -> None:
        await asyncio.sleep(0.01)
        done.append(item)

    queues: SessionQueues[str, int] = SessionQueues(process)
    tasks = [asyncio.create_task(queues.submit("k", i)) for i in range(3)]
    await asyncio.sleep(0)
    await queues.aclose(grace_seconds=5)
    await asyncio.gather(*tasks)
    assert done == [0, 1, 2]
    with pytest.raises(QueueClosed):
        await queues.submit("k", 9)


async def test_close_cancels_work_past_the_timeout() -> None:
    async def process(key: str, item: int) -> None:
        await asyncio.sleep(10)

    queues: SessionQueues[str, int] = SessionQueues(process)
    task = asyncio.create_task(queues.submit("k", 1))
    await asyncio.sleep(0)
    await queues.aclose(grace_seconds=0.05)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queues.busy == 0


async def test_close_stops_a_lane_whose_item_swallowed_the_cancellation() -> None:
    # The agent loop turns a cancellation into a CANCELLED turn and returns normally; the lane must still stop
    # instead of running every message queued behind it after the shutdown grace period.
    done: list[int] = []

    async def process(key: str, item: int) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass
        done.append(item)

    queues: SessionQueues[str, int] = SessionQueues(process)
    tasks = [asyncio.create_task(queues.submit("k", i)) for i in range(3)]
    await asyncio.sleep(0)
    await asyncio.wait_for(queues.aclose(grace_seconds=0.05), 2)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert done == [0]
    assert results[0] is None
    assert all(isinstance(r, asyncio.CancelledError) for r in results[1:])
    assert queues.busy == 0
