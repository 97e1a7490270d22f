"""Background loops that talk to Redis, stopped by a signal instead of by cancellation.

redis-py's asyncio client can swallow a cancellation that arrives while a command is in flight (its timeout
context takes the cancellation for its own: redis/redis-py#2551 and #2028; with redis-py 8.1 here about one
cancel in ten that lands mid-command). A task cancelled there carries on, and whoever awaits it after
cancelling waits forever — a turn that never ends, a lock renewed for good. So a loop that makes Redis calls
runs `beside` a block: at the block's end it is told to stop (`pause` returns True) and awaited, finishing the
call it is in, which the client's socket timeout bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["beside", "pause"]

Loop = Callable[[asyncio.Event], Awaitable[None]]


async def pause(stopping: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``, or less if ``stopping`` is set meanwhile; whether it is set (time to stop)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


@contextlib.asynccontextmanager
async def beside(loop: Loop, name: str) -> AsyncIterator[None]:
    """Run ``loop(stopping)`` in its own task while the block runs; at the end set ``stopping`` and wait until
    the loop has returned."""
    stopping = asyncio.Event()
    task = asyncio.create_task(loop(stopping), name=name)
    try:
        yield
    finally:
        stopping.set()
        await task
