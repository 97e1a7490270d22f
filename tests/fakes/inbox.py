"""A callback for adapters under test: records every Inbound and lets a test wait for them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from adapters.base import Inbound


class Inbox:
    """``await adapter.start(inbox)``; then ``await inbox.wait_for(n)``. An optional ``reply`` coroutine
    runs for each message (e.g. to answer through the adapter), like the gateway would."""

    def __init__(self, reply: Callable[[Inbound], Awaitable[None]] | None = None) -> None:
        self.messages: list[Inbound] = []
        self.reply = reply

    async def __call__(self, inbound: Inbound) -> None:
        self.messages.append(inbound)
        if self.reply is not None:
            await self.reply(inbound)

    async def wait_for(self, count: int, within_s: float = 10.0) -> list[Inbound]:
        """Wait until at least ``count`` messages arrived; returns them all."""
        deadline = time.monotonic() + within_s
        while len(self.messages) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"got {len(self.messages)} of {count} inbound messages")
            await asyncio.sleep(0.02)
        return list(self.messages)
