"""`concord run` when a platform cannot be reached or its connection cannot recover: one line, exit 1 (so the
service manager restarts the process), never a process that looks alive and answers nobody."""

from __future__ import annotations

import asyncio
import logging
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.supervise import Backoff
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from gateway import app
from gateway.app import EXIT_PLATFORM_FAILED, run_gateway
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_fixture import fake_telegram, telegram_settings  # noqa: F401
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway.conftest import make_settings

FAST = Backoff(first=0.05, ceiling=0.1, max_failures=2, healthy_after=60.0)


def _serve(monkeypatch: pytest.MonkeyPatch, settings: TelegramSettings) -> None:
    monkeypatch.setattr(app, "build_adapters", lambda _: [TelegramAdapter(settings)])


async def test_a_platform_unreachable_at_start_exits_1_with_one_line(
    fake_llm: FakeLLMServer, tmp_path: Path, telegram_settings: TelegramSettings,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    _serve(monkeypatch, replace(telegram_settings, api_base_url="http://127.0.0.1:9", backoff=FAST))
    with caplog.at_level(logging.WARNING):
        status = await asyncio.wait_for(run_gateway(make_settings(fake_llm, tmp_path)), 30)
    assert status == EXIT_PLATFORM_FAILED
    assert "cannot start: telegram: getMe failed 2 times" in caplog.text
    assert "Traceback" not in caplog.text


async def test_a_connection_that_cannot_recover_ends_the_process_with_1(
    fake_llm: FakeLLMServer, tmp_path: Path, fake_telegram: FakeTelegram,  # noqa: F811
    telegram_settings: TelegramSettings, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    _serve(monkeypatch, replace(telegram_settings, backoff=FAST, stall_seconds=0.3, watch_interval=0.05))
    fake_telegram.stall_updates = True
    with caplog.at_level(logging.ERROR):
        status = await asyncio.wait_for(run_gateway(make_settings(fake_llm, tmp_path)), 30)
    fake_telegram.stall_updates = False
    assert status == EXIT_PLATFORM_FAILED
    assert "platform connection lost for good (telegram: telegram: connection lost" in caplog.text
    assert caplog.text.count("getUpdates has not answered") >= 2


async def test_a_webhook_port_that_stays_taken_exits_1_with_one_line(
    fake_llm: FakeLLMServer, tmp_path: Path, fake_telegram: FakeTelegram,  # noqa: F811
    telegram_settings: TelegramSettings, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Webhook mode fails like polling: retried with backoff, then exit 1 (before: an OSError traceback)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _serve(monkeypatch, replace(telegram_settings, backoff=FAST, mode="webhook", webhook_port=port,
                                    webhook_url=f"http://127.0.0.1:{port}/telegram", webhook_secret="s3cret"))
        with caplog.at_level(logging.WARNING):
            status = await asyncio.wait_for(run_gateway(make_settings(fake_llm, tmp_path)), 30)
    assert status == EXIT_PLATFORM_FAILED
    assert f"cannot start: telegram: webhook failed 2 times, last: OSError: telegram webhook on 127.0.0.1:{port}" \
        in caplog.text
    assert "Traceback" not in caplog.text and fake_telegram.webhooks == []
