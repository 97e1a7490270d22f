"""Keep platform secrets out of every log record, whichever library writes it.

A Telegram bot token is part of every Bot API and file URL, and libraries log those URLs: httpx writes each
request line at INFO, python-telegram-bot writes its base URLs at DEBUG. Filters on a logger do not reach
its children, so the redaction sits in the log record factory: a record that mentions a registered secret
gets its message (and traceback text) rewritten before any handler sees it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["redact_in_logs"]

_secrets: dict[str, str] = {}
_lock = threading.Lock()
_installed = False


def redact_in_logs(secret: str, label: str) -> None:
    """From now on, log records in this process show ``label`` wherever ``secret`` would appear."""
    global _installed
    if len(secret) < 8:  # too short to be a real credential, and replacing it would mangle ordinary text
        return
    with _lock:
        _secrets[secret] = label
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            return _scrub(previous(*args, **kwargs))

        logging.setLogRecordFactory(factory)


def _redact(text: str) -> str:
    for secret, label in list(_secrets.items()):
        text = text.replace(secret, label)
    return text


def _scrub(record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # malformed arguments: leave the record for logging's own error handling
        return record
    clean = _redact(message)
    if clean != message:
        record.msg, record.args = clean, ()
    if record.exc_info and record.exc_info[1] is not None:
        formatted = logging.Formatter().formatException(record.exc_info)
        clean = _redact(formatted)
        if clean != formatted:
            record.exc_text = clean  # formatters use exc_text when it is set
    return record
