"""Operator-readable failure logging: one line per failure class, cause first, repeats counted.

During an outage the same failure happens once per message (or per lock call); logging each one buries the
cause under thousands of identical lines. A `LogThrottle` logs the first failure of a class, counts the
repeats for ``window_s`` seconds, and logs the next one with the count ("… 156 more times in the last
30 s"); `recovered` closes the class with one line and the total. A traceback is attached once per distinct
error (type, message, where it was raised), never once per message.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LogThrottle", "describe_cause", "root_cause"]


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception of ``exc``'s ``raise … from`` chain (what a wrapper says actually failed).

    Only explicit causes are followed: an implicit ``__context__`` is often bookkeeping (the CancelledError
    behind a client timeout), not the reason.
    """
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


def describe_cause(exc: BaseException) -> str:
    """``Type: first line of the message`` of the root cause, for the front of a log line."""
    cause = root_cause(exc)
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0]}" if text else type(cause).__name__


def _signature(exc: BaseException) -> tuple[str, str, str]:
    cause = root_cause(exc)
    tb = cause.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else ""
    return type(cause).__name__, str(cause).split("\n", 1)[0], where


@dataclass(slots=True)
class _Class:
    logged_at: float
    suppressed: int = 0
    total: int = 1


class LogThrottle:
    """Throttles one logger's failure lines per class (a short key such as ``"storage"``).

    Memory is bounded: at most ``max_classes`` classes and ``max_tracebacks`` error signatures are kept,
    the oldest forgotten first.
    """

    def __init__(self, logger: logging.Logger, *, window_s: float = 30.0, max_classes: int = 256,
                 max_tracebacks: int = 256, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.window_s = window_s
        self._clock = clock
        self._classes: OrderedDict[str, _Class] = OrderedDict()
        self._tracebacks: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._max_classes = max_classes
        self._max_tracebacks = max_tracebacks

    def log(self, level: int, key: str, message: str, *args: object, exc: BaseException | None = None) -> bool:
        """Log ``message % args`` unless class ``key`` was logged less than ``window_s`` ago; True if logged.

        A line logged after suppressed repeats ends with how many there were; ``exc`` gets its traceback
        attached the first time that error is seen.
        """
        now = self._clock()
        entry = self._classes.get(key)
        if entry is not None and now - entry.logged_at < self.window_s:
            entry.suppressed += 1
            entry.total += 1
            return False
        text = message % args if args else message
        if entry is not None and entry.suppressed:
            text += f" (and {entry.suppressed} more times in the last {now - entry.logged_at:.0f} s)"
        if entry is None:
            entry = self._classes[key] = _Class(now)
            while len(self._classes) > self._max_classes:
                self._classes.popitem(last=False)
        else:
            entry.logged_at, entry.suppressed = now, 0
            entry.total += 1
            self._classes.move_to_end(key)
        self.logger.log(level, "%s", text, exc_info=self._first_traceback(exc))
        return True

    def warning(self, key: str, message: str, *args: object, exc: BaseException | None = None) -> bool:
        """`log` at WARNING."""
        return self.log(logging.WARNING, key, message, *args, exc=exc)

    def error(self, key: str, message: str, *args: object, exc: BaseException | None = None) -> bool:
        """`log` at ERROR."""
        return self.log(logging.ERROR, key, message, *args, exc=exc)

    def active(self, key: str) -> bool:
        """Whether class ``key`` failed since it last recovered."""
        return key in self._classes

    def recovered(self, key: str, message: str, *args: object, level: int = logging.INFO) -> bool:
        """Close class ``key`` with one line (``message`` plus the failure count); False if it was not failing."""
        entry = self._classes.pop(key, None)
        if entry is None:
            return False
        text = message % args if args else message
        times = "once" if entry.total == 1 else f"{entry.total} times"
        self.logger.log(level, "%s (after failing %s)", text, times)
        return True

    def _first_traceback(self, exc: BaseException | None) -> BaseException | None:
        if exc is None:
            return None
        signature = _signature(exc)
        if signature in self._tracebacks:
            return None
        self._tracebacks[signature] = None
        while len(self._tracebacks) > self._max_tracebacks:
            self._tracebacks.popitem(last=False)
        return exc
