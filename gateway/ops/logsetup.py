"""Log output: one record per line, secrets redacted, and who it was about (session, platform, worker).

- JSON logs (``logging.json_logs``) come from a real encoder: a message holding ``"}\\n{"level":"CRITICAL"``
  stays a string inside one record, and every line parses.
- Plain-text logs keep one record's message on one line too: line breaks and other control characters in it
  (user text, an upstream error body) are written as visible escapes (``\\n``, ``\\x1b``), so no text can
  forge a record of its own. A traceback keeps its lines, each continuation line starting with ``  | ``, which
  no record's first line (its timestamp) ever does.
- Every record passes the redactor (`redact_secrets`) — message, traceback and extra fields — whichever
  library wrote it, because a handler filter sees them all.
- Session id, platform and worker are context variables (`log_context`), so every line written while a
  message is handled carries them, including lines from libraries, without passing them around.
- Message content stays out: libraries that dump payloads or SQL parameters below INFO (python-telegram-bot
  updates, discord.py gateway events, SQLAlchemy statements, aiosqlite calls, HTTP/2 headers) are held at
  INFO or above unless ``logging.log_content`` is true; SQL parameters are hidden from statements and errors
  by the engine itself (``hide_parameters``).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from agent.compression.redact import redact_secrets

__all__ = ["CONTENT_LOGGERS", "CONTINUATION", "JsonFormatter", "PlainFormatter", "RedactingFilter",
           "bind_log_session", "configure_logging", "log_context", "set_worker"]

_session: contextvars.ContextVar[str | None] = contextvars.ContextVar("concord_log_session", default=None)
_platform: contextvars.ContextVar[str | None] = contextvars.ContextVar("concord_log_platform", default=None)
_worker = f"{socket.gethostname()}:{os.getpid()}"

# logger -> the lowest level it may log at when content is left out (below it: payloads, SQL, parameters).
CONTENT_LOGGERS: dict[str, int] = {
    "telegram": logging.INFO,
    "discord": logging.INFO,
    "sqlalchemy": logging.WARNING,
    "aiosqlite": logging.INFO,
    "asyncpg": logging.INFO,
    "httpcore": logging.INFO,
    "hpack": logging.INFO,
    "h2": logging.INFO,
}
# Per-request and per-job chatter that drowns the console chat below DEBUG; their warnings stay.
_NOISY = ("httpx", "alembic", "apscheduler", "discord.gateway", "telegram.ext")
_CONTEXT_FIELDS = ("session", "platform", "worker")
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
# Plain text: every character a terminal, a pager or `str.splitlines` may treat as a line break or a cursor
# move (C0 and C1 controls but the tab, DEL, the Unicode line and paragraph separators), as a visible escape.
_CONTROLS = str.maketrans({
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09},
    0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"})
# Starts every line of a plain-text record after its first (traceback, stack): a record's first line starts
# with its timestamp, so a line starting with this always belongs to the record above it.
CONTINUATION = "  | "
_PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


@contextlib.contextmanager
def log_context(*, session: str | None = None, platform: str | None = None) -> Iterator[None]:
    """Lines logged inside this block (and in tasks it starts) name ``session`` and ``platform``."""
    tokens = []
    if session is not None:
        tokens.append((_session, _session.set(session)))
    if platform is not None:
        tokens.append((_platform, _platform.set(platform)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def bind_log_session(session_id: str) -> None:
    """From here to the end of the enclosing `log_context`, lines name ``session_id`` (the store's id, once
    the chat's session is known)."""
    _session.set(session_id)


def set_worker(name: str) -> None:
    """Name this process in every log line (default ``host:pid``)."""
    global _worker
    _worker = name


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    return redact_secrets(str(value))


class RedactingFilter(logging.Filter):
    """Adds session / platform / worker to a record and redacts its message, traceback and extras."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Always keeps the record, after rewriting it."""
        for name, value in (("session", _session.get()), ("platform", _platform.get()), ("worker", _worker)):
            if getattr(record, name, None) is None:
                setattr(record, name, value)
        try:
            message = record.getMessage()
        except Exception:  # malformed arguments: logging's own error handling reports them
            return True
        record.msg, record.args = redact_secrets(message), ()
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_secrets(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_secrets(record.stack_info)
        for key, value in list(record.__dict__.items()):
            if key not in _STANDARD:
                setattr(record, key, _clean(value))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, session, platform, worker, extras, exc."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (newlines and quotes escaped by the encoder)."""
        data: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_FIELDS:
            data[name] = getattr(record, name, None)
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in data:
                data[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exc"] = record.exc_text
        if record.stack_info:
            data["stack"] = record.stack_info
        line = json.dumps(data, ensure_ascii=False, default=str)
        # The encoder escapes control characters; these three are line breaks to many readers as well.
        return line.translate(_LINE_BREAKS)


class PlainFormatter(logging.Formatter):
    """``time LEVEL logger: message`` on one line; a traceback or stack follows on continuation lines."""

    def __init__(self) -> None:
        super().__init__(_PLAIN_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """The record with its message on one line (control characters escaped) and every further line
        marked with `CONTINUATION`."""
        record.message = record.getMessage().translate(_CONTROLS)
        record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        more = [text for text in (record.exc_text, record.stack_info and self.formatStack(record.stack_info))
                if text]
        if not more:
            return line
        # Not cached on the record: another handler (the JSON one, the console's file) formats it too.
        rest = [CONTINUATION + part.translate(_CONTROLS) for text in more for part in text.split("\n")]
        return "\n".join([line, *rest])


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is now: the console's prompt swaps in a proxy that prints above it."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure_logging(level: str, *, json_logs: bool, log_content: bool = False, stream: IO[str] | None = None,
                      log_file: Path | None = None) -> list[logging.Handler]:
    """Send every log record to ``stream`` (default: the current stderr, so logs never mix with the console
    chat or JSONL on stdout). With ``log_file`` (the interactive console) everything also goes there and the
    stream only shows WARNING and up."""
    handlers: list[logging.Handler] = [logging.StreamHandler(stream) if stream is not None else _CurrentStderr()]
    if log_file is not None:
        handlers[0].setLevel(logging.WARNING)
        try:
            handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
        except OSError as exc:
            print(f"concord: warning: cannot write the log file {log_file} ({exc.strerror}); only warnings are shown",
                  file=sys.stderr)
    for handler in handlers:
        handler.addFilter(RedactingFilter())
        handler.setFormatter(JsonFormatter() if json_logs else PlainFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    if level != "DEBUG":
        for noisy in _NOISY:
            logging.getLogger(noisy).setLevel(logging.WARNING)
    if not log_content:
        for name, floor in CONTENT_LOGGERS.items():
            logger = logging.getLogger(name)
            if logger.getEffectiveLevel() < floor:
                logger.setLevel(floor)
    return handlers
