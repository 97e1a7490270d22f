"""Registered secrets never appear in log output: messages, arguments and tracebacks."""

from __future__ import annotations

import io
import logging

from adapters.logsafe import redact_in_logs


def _output(log: logging.Logger) -> io.StringIO:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    return stream


def test_secrets_are_replaced_in_messages_arguments_and_tracebacks() -> None:
    secret = "999:logsafe-test-secret"
    redact_in_logs(secret, "<token>")
    log = logging.getLogger("tests.logsafe.child.of.some.library")
    out = _output(log)
    log.info("GET https://api.example/bot%s/getMe", secret)
    log.debug(f"base url https://api.example/bot{secret}")
    try:
        raise RuntimeError(f"The token `{secret}` was rejected")
    except RuntimeError:
        log.exception("start failed")
    text = out.getvalue()
    assert secret not in text
    assert text.count("<token>") == 3 and "Traceback" in text


def test_short_values_are_not_treated_as_secrets() -> None:
    redact_in_logs("abc", "<x>")
    log = logging.getLogger("tests.logsafe.short")
    out = _output(log)
    log.info("abc stays")
    assert out.getvalue() == "INFO abc stays\n"
