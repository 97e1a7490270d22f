"""One line per failure class, cause first, repeats counted, a traceback once per distinct error."""

from __future__ import annotations

import logging

import pytest

from gateway.ops.logthrottle import LogThrottle, describe_cause

LOGGER = "tests.throttle"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _fail(text: str) -> Exception:
    try:
        try:
            raise ConnectionRefusedError(111, text)
        except OSError as inner:
            raise RuntimeError("the store could not connect") from inner
    except RuntimeError as outer:
        return outer


def test_repeats_are_counted_into_the_next_line_and_the_recovery(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = Clock()
    throttle = LogThrottle(logging.getLogger(LOGGER), window_s=30, clock=clock)
    for _ in range(156):
        throttle.warning("storage", "storage unavailable (%s): message held", "down")
        clock.now += 0.1
    clock.now = 31
    assert throttle.warning("storage", "storage unavailable (%s): message held", "down")
    assert throttle.recovered("storage", "storage is back")
    assert not throttle.recovered("storage", "storage is back")  # closed once
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["storage unavailable (down): message held",
                     "storage unavailable (down): message held (and 155 more times in the last 31 s)",
                     "storage is back (after failing 157 times)"]


def test_classes_are_throttled_apart(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    throttle = LogThrottle(logging.getLogger(LOGGER), clock=Clock())
    assert throttle.warning("a", "first a") and throttle.warning("b", "first b")
    assert not throttle.warning("a", "second a")
    assert [r.getMessage() for r in caplog.records] == ["first a", "first b"]


def test_a_traceback_once_per_distinct_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    clock = Clock()
    throttle = LogThrottle(logging.getLogger(LOGGER), window_s=1, clock=clock)
    for step in range(5):
        clock.now = step * 2.0  # every call is past the window: each one logs a line
        throttle.error("storage", "failed", exc=_fail("Connect call failed"))
    throttle.error("storage-other", "failed", exc=_fail("another reason"))
    with_traceback = [r for r in caplog.records if r.exc_info]
    assert len(caplog.records) == 6 and len(with_traceback) == 2


def test_the_cause_comes_first_from_the_bottom_of_the_chain() -> None:
    assert describe_cause(_fail("Connect call failed")) == "ConnectionRefusedError: [Errno 111] Connect call failed"
    assert describe_cause(ValueError()) == "ValueError"
