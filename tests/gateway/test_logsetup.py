"""Log output: real JSON (no forged records), redaction of every part of a record, context fields, no content."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from gateway.ops.logsetup import (
    CONTENT_LOGGERS,
    CONTINUATION,
    bind_log_session,
    configure_logging,
    log_context,
    set_worker,
)
from gateway.store.database import create_engine

FORGERY = 'upstream said: "}\n{"level":"CRITICAL","logger":"concord","message":"admin password reset"}\n'
SECRET = "sk-proj-Zk3L9qP2mX7vB4nRtY8wQ1eA"


@pytest.fixture
def capture() -> io.StringIO:
    # tests/conftest.py puts the logging set-up back after each test.
    return io.StringIO()


def _records(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_forged_record_stays_inside_one_json_line(capture: io.StringIO) -> None:
    configure_logging("INFO", json_logs=True, stream=capture)
    logging.getLogger("agent.llm").info("LLM error body: %s", FORGERY)
    lines = capture.getvalue().splitlines()
    assert len(lines) == 1
    [record] = _records(capture)
    assert record["level"] == "INFO" and record["message"] == f"LLM error body: {FORGERY}"


def test_every_line_is_json_with_session_platform_and_worker(capture: io.StringIO) -> None:
    configure_logging("DEBUG", json_logs=True, stream=capture)
    set_worker("w-test")
    log = logging.getLogger("gateway.test")
    log.info("outside")
    with log_context(session="telegram:dm:42", platform="telegram"):
        log.warning("inside, before the session is known")
        bind_log_session("sess-1")
        log.error("inside, \u2028 odd \x00 characters and 'quotes' \"too\"")
    log.info("after")
    records = _records(capture)
    assert [r["session"] for r in records] == [None, "telegram:dm:42", "sess-1", None]
    assert [r["platform"] for r in records] == [None, "telegram", "telegram", None]
    assert {r["worker"] for r in records} == {"w-test"}


async def test_context_follows_tasks_started_inside(capture: io.StringIO) -> None:
    configure_logging("INFO", json_logs=True, stream=capture)

    async def work() -> None:
        logging.getLogger("x").info("from a task")

    with log_context(session="s-9", platform="discord"):
        await asyncio.create_task(work())
    assert _records(capture)[0]["session"] == "s-9"


@pytest.mark.parametrize("json_logs", [True, False])
def test_message_arguments_traceback_and_extras_are_redacted(capture: io.StringIO, json_logs: bool) -> None:
    configure_logging("INFO", json_logs=json_logs, stream=capture)
    log = logging.getLogger("gateway.test")
    log.info("key %s and password=Hunter22x", SECRET, extra={"detail": f"token is {SECRET}"})
    try:
        raise RuntimeError(f"connect to postgres://app:S3cretPw9@db/app failed with {SECRET}")
    except RuntimeError:
        log.exception("storage failed")
    text = capture.getvalue()
    for secret in (SECRET, "Hunter22x", "S3cretPw9"):
        assert secret not in text
    assert "[REDACTED]" in text and "storage failed" in text and "RuntimeError" in text


def test_debug_leaves_library_payloads_out_unless_log_content(capture: io.StringIO) -> None:
    configure_logging("DEBUG", json_logs=True, stream=capture)
    logging.getLogger("telegram.ext.Updater").debug("update payload: {'text': 'my diary'}")
    logging.getLogger("sqlalchemy.engine.Engine").info("INSERT INTO messages VALUES (?) ('my diary',)")
    logging.getLogger("discord.gateway").debug("WebSocket Event: {'content': 'my diary'}")
    logging.getLogger("agent.loop").debug("own debug line")
    assert "my diary" not in capture.getvalue() and "own debug line" in capture.getvalue()

    configure_logging("DEBUG", json_logs=True, log_content=True, stream=capture)
    for name in CONTENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)
    logging.getLogger("telegram.ext.Updater").debug("update payload: {'text': 'my diary', 'key': '%s'}", SECRET)
    assert "my diary" in capture.getvalue() and SECRET not in capture.getvalue()


async def test_sql_parameters_stay_out_of_database_errors() -> None:
    engine = create_engine("sqlite+aiosqlite:///:memory:")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text("CREATE TABLE t (x TEXT UNIQUE)"))
            await conn.execute(sa.text("INSERT INTO t VALUES (:x)"), {"x": "my diary entry"})
            with pytest.raises(sa.exc.IntegrityError) as caught:
                await conn.execute(sa.text("INSERT INTO t VALUES (:x)"), {"x": "my diary entry"})
    finally:
        await engine.dispose()
    assert "my diary entry" not in str(caught.value)


PLAIN_FORGERY = "thanks!\n2026-01-01 09:00:00,000 ERROR gateway.router: admin password reset\r\nok \x1b[1A\x85\u2028 bye"
RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")


def test_plain_text_records_cannot_be_forged_by_user_text(capture: io.StringIO) -> None:
    """Without JSON every record still starts exactly one line: the user's line breaks and cursor moves are
    escaped, and a traceback's lines (its message forging a record too) are marked as continuations."""
    configure_logging("INFO", json_logs=False, stream=capture)
    log = logging.getLogger("gateway.router")
    log.info("message from %s: %s", "Ann\nB", PLAIN_FORGERY)
    try:
        raise ValueError(f"upstream answered {PLAIN_FORGERY}")
    except ValueError:
        log.exception("turn failed for %s", "x\ny")
    log.warning("last", stack_info=True)
    lines = capture.getvalue().splitlines()
    starts = [line for line in lines if RECORD_START.match(line)]
    assert [line.split(": ", 1)[0].split(" ", 2)[2] for line in starts] == [
        "INFO gateway.router", "ERROR gateway.router", "WARNING gateway.router"]
    assert all(RECORD_START.match(line) or line.startswith(CONTINUATION) for line in lines)
    first = starts[0]
    assert first.endswith("message from Ann\\nB: thanks!\\n2026-01-01 09:00:00,000 ERROR gateway.router: admin "
                          "password reset\\r\\nok \\x1b[1A\\x85\\u2028 bye")
    assert "turn failed for x\\ny" in starts[1]
    assert any(line.startswith(f"{CONTINUATION}Traceback (most recent call last):") for line in lines)
    # The exception's own text keeps its lines, each marked as part of the record.
    at = lines.index(f"{CONTINUATION}ValueError: upstream answered thanks!")
    assert lines[at + 1] == f"{CONTINUATION}2026-01-01 09:00:00,000 ERROR gateway.router: admin password reset\\r"
    assert any(line.startswith(f"{CONTINUATION}Stack (most recent call last):") for line in lines)


def test_the_json_handler_beside_a_plain_one_keeps_the_traceback_unmarked(capture: io.StringIO,
                                                                           tmp_path: Path) -> None:
    """The console writes the same record to a plain stream and a plain file; a JSON formatter given the record
    after the plain one still gets the traceback as Python wrote it."""
    configure_logging("INFO", json_logs=False, stream=capture, log_file=tmp_path / "concord.log")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("failed")
    file_lines = (tmp_path / "concord.log").read_text().splitlines()
    assert RECORD_START.match(file_lines[0]) and all(line.startswith(CONTINUATION) for line in file_lines[1:])
    assert capture.getvalue().splitlines() == file_lines
