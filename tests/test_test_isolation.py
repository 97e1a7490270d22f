"""The suite's own isolation: a test that sets logging up the way `concord run` does leaves nothing behind.

The two tests run in file order (pytest's default): the first configures logging like ``concord run`` at DEBUG,
the second must find the root logger and the library loggers as they were before. Without the restoring
fixture in tests/conftest.py, adapter tests that ran after such a test missed httpx's request lines (held at
WARNING) or caught the fake servers' INFO access lines.
"""

from __future__ import annotations

import io
import logging

from gateway.ops.logsetup import configure_logging

BEFORE: dict[str, object] = {}


def _handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if not type(h).__module__.startswith("_pytest")]


def test_a_test_that_configures_logging_like_concord_run() -> None:
    root = logging.getLogger()
    BEFORE.update(level=root.level, handlers=_handlers(), httpx=logging.getLogger("httpx").level)
    configure_logging("INFO", json_logs=True, stream=io.StringIO())
    assert root.level == logging.INFO and logging.getLogger("httpx").level == logging.WARNING


def test_the_next_test_finds_logging_as_it_was() -> None:
    root = logging.getLogger()
    assert BEFORE, "runs after the test above"
    assert root.level == BEFORE["level"]
    assert logging.getLogger("httpx").level == BEFORE["httpx"]
    assert _handlers() == BEFORE["handlers"]
