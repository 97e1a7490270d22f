"""Riding out a database that goes away: telling an outage from a bug, and retrying writes with backoff.

A storage outage (server stopped or restarting, connection dropped, disk full, file locked past the busy
timeout) is temporary: the message or write that met it is kept and retried until storage is back, never
answered with "try again" and forgotten. Everything else (a bug, a constraint violation) is not retried.
One `StorageGuard` per process knows whether storage is down right now and logs the outage as one throttled
line, cause first, and one line when it is over.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy import exc as sa_exc

from gateway.ops.logthrottle import LogThrottle, describe_cause
from gateway.store import StorageUnavailable

__all__ = ["StorageGuard", "is_storage_outage"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_OUTAGE = "storage"
# Retry delays grow from the first to the cap: a short outage is ridden out quickly, a long one costs one
# connection attempt every couple of seconds, and the first message after recovery waits at most the cap.
FIRST_DELAY_S = 0.25
MAX_DELAY_S = 2.0


# PostgreSQL SQLSTATE classes that mean "not now" rather than "never": connection exceptions (08),
# insufficient resources such as a full disk (53), operator intervention such as a shutdown or a server that
# is starting up (57P), system errors such as I/O failures (58).
_TEMPORARY_SQLSTATES = ("08", "53", "57P", "58")


def _sqlstate(exc: BaseException) -> str:
    for candidate in (getattr(exc, "orig", None), exc.__cause__):
        for source in (candidate, getattr(candidate, "__cause__", None)):
            code = getattr(source, "sqlstate", None) or getattr(source, "pgcode", None)
            if isinstance(code, str):
                return code
    return ""


def is_storage_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means storage is unreachable or cannot write right now (worth waiting for)."""
    if isinstance(exc, StorageUnavailable | sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.TimeoutError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        return bool(exc.connection_invalidated) or _sqlstate(exc).startswith(_TEMPORARY_SQLSTATES)
    # Drivers raise socket errors as they are while connecting (asyncpg: ConnectionRefusedError).
    return isinstance(exc, OSError | TimeoutError)


def backoff_delay(attempt: int) -> float:
    """The pause before retry number ``attempt`` (0-based), with ±20% jitter so workers do not retry in step."""
    return min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** attempt) * random.uniform(0.8, 1.2)


class StorageGuard:
    """Retries storage operations through an outage and keeps the outage's state and log."""

    def __init__(self, *, window_s: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.throttle = LogThrottle(log, window_s=window_s, clock=clock)
        self._clock = clock
        self._down_since: float | None = None

    @property
    def down(self) -> bool:
        """Whether the last storage operation met an outage (and none has succeeded since)."""
        return self._down_since is not None

    def failed(self, exc: BaseException, what: str | Callable[[], str]) -> None:
        """Note an outage met while doing ``what`` (one throttled line, traceback once per distinct error);
        a function is asked at the time, for a description that changes during the outage."""
        if self._down_since is None:
            self._down_since = self._clock()
        self.throttle.warning(_OUTAGE, "storage unavailable (%s): %s; kept, retrying with backoff",
                              describe_cause(exc), what() if callable(what) else what, exc=exc)

    def succeeded(self) -> None:
        """Note a storage operation that worked: an outage in progress is over."""
        if self._down_since is not None:
            lasted = self._clock() - self._down_since
            self._down_since = None
            self.throttle.recovered(_OUTAGE, "storage is back after %.1f s", lasted, level=logging.WARNING)

    async def run(self, operation: Callable[[], Awaitable[T]], what: str | Callable[[], str]) -> T:
        """``await operation()``, retried with backoff for as long as it meets a storage outage.

        Only for operations that are safe to repeat (one transaction that either committed or did not).
        Cancellation (shutdown) stops the retries.
        """
        attempt = 0
        while True:
            try:
                result = await operation()
            except Exception as exc:
                if not is_storage_outage(exc):
                    raise
                self.failed(exc, what)
                await asyncio.sleep(backoff_delay(attempt))
                attempt += 1
                continue
            self.succeeded()
            return result
