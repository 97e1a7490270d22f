"""Telegram under hostile input and lost connections, through the real python-telegram-bot client against the
fake Bot API: odd updates skipped with one line, downloads capped by the bytes read, a stalled long poll
restarted, an unreachable Telegram at start-up retried; webhook mode supervised like polling (a port in use, a
refused setWebhook, a webhook Telegram dropped, a server that stopped serving)."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest

from adapters.supervise import Backoff
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from bench.cluster import free_port
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


def _webhook(settings: TelegramSettings, port: int, **kw: object) -> TelegramSettings:
    return replace(settings, mode="webhook", webhook_port=port, webhook_path="tg",
                   webhook_url=f"http://127.0.0.1:{port}/tg", webhook_secret="s3cret", backoff=FAST,
                   watch_interval=0.05, **kw)


async def _post(port: int, fake_telegram: FakeTelegram, text: str) -> int:
    update = {"update_id": int(time.time() * 1000) % 10**9, "message": fake_telegram.make_message(text)}
    async with httpx.AsyncClient() as client:
        answer = await client.post(f"http://127.0.0.1:{port}/tg", json=update,
                                   headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"})
    return answer.status_code


async def test_a_webhook_port_in_use_is_retried_in_one_line_each_then_given_up(
    fake_telegram: FakeTelegram, telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        adapter = TelegramAdapter(_webhook(telegram_settings, port))
        with caplog.at_level(logging.WARNING), pytest.raises(ConnectionError, match="webhook failed 3 times"):
            await adapter.start(Inbox())
    await adapter.stop()
    retries = [r for r in caplog.records if "telegram: webhook failed" in r.getMessage()]
    assert len(retries) == 2 and all(f"127.0.0.1:{port}" in r.getMessage() for r in retries)
    assert all(r.exc_info is None and "\n" not in r.getMessage() for r in retries)
    assert fake_telegram.webhooks == []  # never registered a webhook nobody serves


async def test_a_refused_set_webhook_is_retried(fake_telegram: FakeTelegram, telegram_settings: TelegramSettings,
                                                caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    fake_telegram.fail_next("setWebhook", times=2, retry_after=0)
    adapter = TelegramAdapter(_webhook(telegram_settings, port))
    inbox = Inbox()
    try:
        with caplog.at_level(logging.WARNING):
            await adapter.start(inbox)
        assert fake_telegram.webhook_url == f"http://127.0.0.1:{port}/tg"
        assert caplog.text.count("telegram: webhook failed (") == 2 and "Too Many Requests" in caplog.text
        assert await _post(port, fake_telegram, "hello") == 200
        assert [m.text for m in await inbox.wait_for(1)] == ["hello"]
    finally:
        await adapter.stop()


async def test_a_webhook_telegram_dropped_is_registered_again(
    fake_telegram: FakeTelegram, telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process called deleteWebhook (a poller started with the same token, an operator): updates would
    stop arriving without a word. The check notices, logs it and sets the webhook again."""
    port = free_port()
    adapter = TelegramAdapter(_webhook(telegram_settings, port, webhook_check_seconds=0.1))
    try:
        await adapter.start(Inbox())
        with caplog.at_level(logging.ERROR):
            fake_telegram.webhook_url = ""
            for _ in range(100):
                if fake_telegram.webhook_url:
                    break
                await asyncio.sleep(0.05)
        assert fake_telegram.webhook_url == f"http://127.0.0.1:{port}/tg" and len(fake_telegram.webhooks) == 2
        [lost] = [r for r in caplog.records if "connection lost" in r.getMessage()]
        assert "Telegram no longer has this webhook for the bot (it has none)" in lost.getMessage()
        assert not adapter._supervisor.failed.done()  # type: ignore[union-attr]
    finally:
        await adapter.stop()


async def test_telegrams_delivery_error_is_logged_once(fake_telegram: FakeTelegram,
                                                       telegram_settings: TelegramSettings,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    adapter = TelegramAdapter(_webhook(telegram_settings, free_port(), webhook_check_seconds=0.05))
    try:
        await adapter.start(Inbox())
        with caplog.at_level(logging.WARNING):
            fake_telegram.webhook_error = "Connection refused"
            await asyncio.sleep(1.0)
        reports = [r for r in caplog.records if "cannot deliver to the webhook" in r.getMessage()]
        assert [r.getMessage() for r in reports] == [
            "telegram: Telegram reports it cannot deliver to the webhook: Connection refused"]
    finally:
        await adapter.stop()


async def test_a_webhook_server_that_died_is_bound_again_or_given_up(
    fake_telegram: FakeTelegram, telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    adapter = TelegramAdapter(_webhook(telegram_settings, port))
    inbox = Inbox()
    try:
        await adapter.start(inbox)
        assert adapter._webhook is not None
        await asyncio.sleep(0.2)  # supervised
        await adapter._webhook.aclose()  # the server stops serving under the adapter
        for _ in range(100):
            if adapter._webhook.serving:
                break
            await asyncio.sleep(0.05)
        assert await _post(port, fake_telegram, "back") == 200
        assert [m.text for m in await inbox.wait_for(1)] == ["back"]
        assert "telegram webhook: connection lost (ConnectionError: the webhook server stopped serving)" in caplog.text
        # Dead again, and its port taken meanwhile: every restart fails, and the adapter gives up.
        await adapter._webhook.aclose()
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", port))
            taken.listen()
            cause = await asyncio.wait_for(adapter.wait_failed(), 10)
        assert "telegram webhook: connection lost" in str(cause) and "address already in use" in str(cause).lower()
    finally:
        await adapter.stop()
