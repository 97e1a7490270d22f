"""Shared fixtures: real service URLs (PostgreSQL, Redis) with skip-or-fail semantics, the corpus root, and\nlogging put back after every test.

Tests needing a service use the ``postgres_url`` / ``redis_url`` fixtures. When the service is not
configured or not answering they skip, unless ``CONCORD_REQUIRE_SERVICES=1`` (set by .ci/run), which turns
the skip into a failure.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_ROOT = Path(os.environ.get("CONCORD_CORPUS_DIR", REPO_ROOT.parent / "shared" / "corpus"))


def _require_services() -> bool:
    return os.environ.get("CONCORD_REQUIRE_SERVICES", "") not in ("", "0", "false")


def _answering(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1):
            return True
    except OSError:
        return False


def _service(env: str, default_port: int) -> str:
    url = os.environ.get(env)
    if not url:
        message = f"{env} is not set"
    elif not _answering(url, default_port):
        message = f"{env}={url} is not answering"
    else:
        return url
    if _require_services():
        pytest.fail(f"required service missing: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """URL of a real PostgreSQL (``postgresql+asyncpg://…``) for this test run."""
    return _service("CONCORD_TEST_POSTGRES_URL", 5432)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of a real Redis (``redis://…/15``) for this test run."""
    return _service("CONCORD_TEST_REDIS_URL", 6379)


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    """The corpus folder (``CONCORD_CORPUS_DIR``, see bench/corpus.py); tests using it skip when it is absent."""
    if not CORPUS_ROOT.is_dir():
        pytest.skip(f"corpus not found at {CORPUS_ROOT}")
    return CORPUS_ROOT


def _logger_levels() -> dict[str, int]:
    manager = logging.Logger.manager
    return {name: logger.level for name, logger in list(manager.loggerDict.items())
            if isinstance(logger, logging.Logger)}


def _own_handlers(root: logging.Logger) -> list[logging.Handler]:
    """The root's handlers except pytest's capturing ones, which pytest itself adds and removes per phase."""
    return [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Put logging back as it was after each test.

    ``configure_logging`` (``concord run``'s set-up, called by some tests) changes process-wide state: the root
    logger's handlers and level, and the levels of library loggers (httpx and others held at WARNING). Left in
    place, a later test sees another test's set-up: its caplog misses records or catches ones it never expected.
    """
    root = logging.getLogger()
    handlers, level, levels = _own_handlers(root), root.level, _logger_levels()
    yield
    for handler in _own_handlers(root):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    for name in _logger_levels():
        logging.getLogger(name).setLevel(levels.get(name, logging.NOTSET))
