"""Keeping a platform connection alive: start-up retries, restarts with backoff, and giving up loudly.

A platform client that dies (an exception its library does not handle, a frame it cannot parse) or stops
receiving must never leave a process that looks alive and answers nobody. `Supervisor` runs the connection,
logs each loss at ERROR with its cause, restarts it with exponential backoff, and after too many failures in
a row resolves `Supervisor.failed`, which the gateway turns into a non-zero exit so the service manager
(systemd ``Restart=on-failure``, docker ``restart: unless-stopped``) starts a fresh process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Backoff", "Supervisor", "Unrecoverable", "describe", "retry_start"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]


class Unrecoverable(ConnectionError):
    """The platform connection cannot be (re)established; the process should exit non-zero."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff between attempts, and how many failures in a row are tolerated.

    A connection that stayed up for ``healthy_after`` seconds counts as recovered: the failure count restarts.
    """

    first: float = 1.0
    ceiling: float = 60.0
    max_failures: int = 8
    healthy_after: float = 120.0

    def __post_init__(self) -> None:
        if self.first < 0 or self.ceiling < self.first or self.max_failures < 1 or self.healthy_after < 0:
            raise ValueError("backoff needs 0 <= first <= ceiling, max_failures >= 1, healthy_after >= 0")

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1-based)."""
        return min(self.ceiling, self.first * 2 ** max(failures - 1, 0))


def describe(exc: BaseException) -> str:
    """A one-line cause: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def retry_start(attempt: Callable[[], Awaitable[T]], *, what: str, backoff: Backoff,
                      fatal: tuple[type[BaseException], ...] = (), sleep: Sleep = asyncio.sleep) -> T:
    """Run ``attempt`` until it succeeds, one log line per failure; `Unrecoverable` after ``max_failures``.

    An exception in ``fatal`` (a rejected token) is re-raised at once: waiting cannot fix it.
    """
    for failures in range(1, backoff.max_failures + 1):
        try:
            return await attempt()
        except fatal:
            raise
        except Exception as exc:
            if failures == backoff.max_failures:
                raise Unrecoverable(f"{what} failed {failures} times, last: {describe(exc)}") from None
            delay = backoff.delay(failures)
            log.warning("%s failed (%s); retrying in %.1f s (attempt %d/%d)", what, describe(exc), delay,
                        failures, backoff.max_failures)
            await sleep(delay)
    raise AssertionError("unreachable")  # the loop always returns or raises


@dataclass
class Supervisor:
    """Runs one connection coroutine again and again until it is stopped or cannot recover.

    ``run`` returns or raises when the connection is lost; an exception in ``fatal`` ends supervision at once.
    ``progressed(started)`` tells whether the run that began at ``started`` made progress, which resets the
    failure count; by default a run that lasted ``backoff.healthy_after`` seconds did.
    """

    name: str
    backoff: Backoff = field(default_factory=Backoff)
    fatal: tuple[type[BaseException], ...] = ()
    sleep: Sleep = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    progressed: Callable[[float], bool] | None = None
    restarts: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.failed: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def watch(self, run: Callable[[], Awaitable[None]]) -> None:
        """Start running ``run`` under supervision (in its own task)."""
        self._task = asyncio.create_task(self._loop(run), name=f"{self.name}-supervisor")

    async def stop(self, close: Callable[[], Awaitable[object]] | None = None) -> None:
        """Stop supervising: from now on a lost connection is no failure; ``close`` then closes it; idempotent."""
        self._stopping = True
        if close is not None:
            await close()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _loop(self, run: Callable[[], Awaitable[None]]) -> None:
        failures = 0
        while not self._stopping:
            started = self.clock()
            try:
                await run()
                cause = "the connection ended"
            except asyncio.CancelledError:
                raise
            except self.fatal as exc:
                self._give_up(Unrecoverable(f"{self.name}: {describe(exc)}"))
                return
            except Exception as exc:
                cause = describe(exc)
            if self._stopping:
                return
            failures = 1 if self._progressed(started) else failures + 1
            if failures > self.backoff.max_failures:
                self._give_up(Unrecoverable(f"{self.name}: connection lost {failures - 1} times in a row, "
                                            f"last: {cause}"))
                return
            delay = self.backoff.delay(failures)
            log.error("%s: connection lost (%s); restarting in %.1f s (attempt %d/%d)", self.name, cause, delay,
                      failures, self.backoff.max_failures)
            await self.sleep(delay)
            self.restarts += 1

    def _progressed(self, started: float) -> bool:
        if self.progressed is not None:
            return self.progressed(started)
        return self.clock() - started >= self.backoff.healthy_after

    def _give_up(self, error: Unrecoverable) -> None:
        log.error("%s: giving up (%s)", self.name, error)
        if not self.failed.done():
            self.failed.set_result(error)
