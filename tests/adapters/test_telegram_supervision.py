"""Telegram under hostile input and lost connections, through the real python-telegram-bot client against the
fake Bot API: odd updates skipped with one line, downloads capped by the bytes read, a stalled long poll
restarted, an unreachable Telegram at start-up retried."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from adapters.supervise import Backoff
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram

FAST = Backoff(first=0.05, ceiling=0.2, max_failures=3, healthy_after=60.0)


@pytest.fixture
async def adapter(telegram_settings: TelegramSettings) -> AsyncIterator[TelegramAdapter]:
    made = TelegramAdapter(replace(telegram_settings, backoff=FAST, stall_seconds=1.0, watch_interval=0.1))
    yield made
    await made.stop()


async def test_odd_updates_are_skipped_with_one_line_and_cost_no_turn(
    fake_telegram: FakeTelegram, adapter: TelegramAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    await adapter.start(inbox)
    good = fake_telegram.make_message("kept", chat_type="private", chat_id=42)
    with caplog.at_level(logging.WARNING):
        fake_telegram.inject_update({"message": {**good, "message_id": 1, "text": 12345}})
        fake_telegram.inject_update({"message": {**good, "message_id": 2, "chat": {"id": "abc", "type": "private"}}})
        fake_telegram.inject_update({"message": {key: v for key, v in good.items() if key != "chat"}})
        fake_telegram.inject_update({"message": {**good, "message_id": 3, "text": "half \ud83d surrogate"}})
        fake_telegram.inject_update({"message": {**good, "message_id": 4, "text": "nul \x00 byte"}})
        fake_telegram.inject_update({"message": good})
        messages = await inbox.wait_for(3)
    assert [m.text for m in messages] == ["half \ufffd surrogate", "nul \ufffd byte", "kept"]
    skipped = [r for r in caplog.records if "skipping" in r.getMessage()]
    assert len(skipped) == 3 and all(r.exc_info is None for r in skipped)
    assert "Traceback" not in caplog.text


async def test_a_photo_without_a_declared_size_is_capped_by_the_bytes_read(
    fake_telegram: FakeTelegram, telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture
) -> None:
    fake_telegram.declare_file_sizes = False
    fake_telegram.files["huge"] = b"\xff\xd8" + b"x" * 20_000_000
    fake_telegram.files["small"] = b"\xff\xd8small"
    adapter = TelegramAdapter(replace(telegram_settings, max_attachment_bytes=5_000_000))
    inbox = Inbox()
    await adapter.start(inbox)
    try:
        with caplog.at_level(logging.INFO):
            fake_telegram.inject_message("look", photo_file_id="huge", chat_type="private", chat_id=42)
            fake_telegram.inject_message("and this", photo_file_id="small", chat_type="private", chat_id=42)
            huge, small = await inbox.wait_for(2, within_s=20)
        assert huge.text == "look" and huge.attachments == ()
        assert small.attachments and small.attachments[0].size == len(fake_telegram.files["small"])
        assert "over 5000000 bytes while downloading" in caplog.text
    finally:
        await adapter.stop()


async def test_a_stalled_long_poll_is_restarted(
    fake_telegram: FakeTelegram, adapter: TelegramAdapter, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    await adapter.start(inbox)
    with caplog.at_level(logging.ERROR):
        fake_telegram.stall_updates = True
        for _ in range(100):
            if "connection lost" in caplog.text:
                break
            await asyncio.sleep(0.05)
        fake_telegram.stall_updates = False
        fake_telegram.inject_message("after the stall", chat_type="private", chat_id=42)
        [inbound] = await inbox.wait_for(1)
    assert inbound.text == "after the stall"
    assert "getUpdates has not answered" in caplog.text


async def test_an_unreachable_telegram_at_start_is_retried_then_given_up(
    telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = TelegramAdapter(replace(telegram_settings, api_base_url="http://127.0.0.1:9", backoff=FAST))
    with caplog.at_level(logging.WARNING), pytest.raises(ConnectionError, match="failed 3 times"):
        await adapter.start(Inbox())
    retries = [r for r in caplog.records if "telegram: getMe failed" in r.getMessage()]
    assert len(retries) == 2 and all(r.exc_info is None for r in retries)
    assert telegram_settings.token not in caplog.text
