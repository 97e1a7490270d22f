"""Telegram forgets an update once getUpdates asks past it: that must not happen before the gateway has the
message safe — read, kept in the inbox in one write per fetched batch, handed on. Real PTB
polling against the fake Bot API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

import pytest

from adapters.base import Inbound
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from adapters.telegram_handoff import UpdateHandOff
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram


async def _confirmed(fake_telegram: FakeTelegram, within_s: float = 5.0) -> bool:
    for _ in range(int(within_s / 0.05)):
        if not fake_telegram._updates:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_an_update_is_confirmed_only_after_it_was_handed_to_the_gateway(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings) -> None:
    adapter = TelegramAdapter(replace(telegram_settings))
    slow = asyncio.Event()
    read = adapter._to_inbound

    async def slow_read(message: object) -> Inbound | None:
        await slow.wait()  # e.g. a getChatMember lookup or a download that takes its time
        return await read(message)  # type: ignore[arg-type]

    adapter._to_inbound = slow_read  # type: ignore[method-assign]
    inbox = Inbox()
    await adapter.start(inbox)
    try:
        fake_telegram.inject_message("keep me")
        pending = [u["update_id"] for u in fake_telegram._updates]
        await asyncio.sleep(1.0)  # PTB fetched it long ago and would normally have asked past it
        assert [u["update_id"] for u in fake_telegram._updates] == pending
        assert adapter.handoff.open == 1
        slow.set()
        await inbox.wait_for(1)
        assert await _confirmed(fake_telegram)  # confirmed once handed on
        assert inbox.messages[0].text == "keep me"
    finally:
        slow.set()
        await adapter.stop()


async def test_a_batch_is_kept_in_one_write_before_it_is_handed_on_or_confirmed(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings) -> None:
    adapter = TelegramAdapter(replace(telegram_settings))
    writes: list[list[str]] = []
    inbox = Inbox()
    release = asyncio.Event()

    async def keep(batch: Sequence[Inbound]) -> None:
        writes.append([m.text for m in batch])
        assert inbox.messages == []  # nothing handed on before it is kept
        await release.wait()  # a slow database

    adapter.keep = keep
    for text in ("one", "two", "three"):
        fake_telegram.inject_message(text)
    await adapter.start(inbox)
    try:
        await asyncio.sleep(1.0)
        assert writes == [["one", "two", "three"]] and inbox.messages == []
        assert len(fake_telegram._updates) == 3  # not confirmed while the write is in flight
        release.set()
        await inbox.wait_for(3)
        assert await _confirmed(fake_telegram)
        assert writes == [["one", "two", "three"]]
    finally:
        release.set()
        await adapter.stop()


async def test_an_inbox_that_fails_keeps_the_offset_until_it_works_again(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings) -> None:
    adapter = TelegramAdapter(replace(telegram_settings))
    attempts: list[int] = []

    async def keep(batch: Sequence[Inbound]) -> None:
        attempts.append(len(batch))
        if len(attempts) < 4:
            raise ConnectionRefusedError("database down")

    adapter.keep = keep
    inbox = Inbox()
    fake_telegram.inject_message("during the outage")
    await adapter.start(inbox)
    try:
        await inbox.wait_for(1, within_s=10)
        assert len(attempts) == 4  # retried with backoff, Telegram still holding the update meanwhile
        assert await _confirmed(fake_telegram)
    finally:
        await adapter.stop()


async def test_a_long_outage_keeps_the_update_at_telegram_and_polling_waits(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings) -> None:
    # Never confirmed while it is kept nowhere: no bound after which it would be held in memory only.
    adapter = TelegramAdapter(replace(telegram_settings))
    down = asyncio.Event()
    down.set()
    attempts: list[int] = []

    async def keep(batch: Sequence[Inbound]) -> None:
        attempts.append(len(batch))
        if down.is_set():
            raise ConnectionRefusedError("database down")

    adapter.keep = keep
    inbox = Inbox()
    fake_telegram.inject_message("during the outage")
    await adapter.start(inbox)
    try:
        await asyncio.sleep(6.0)
        assert len(attempts) >= 4 and inbox.messages == []
        fake_telegram.inject_message("sent meanwhile")  # not fetched: polling waits for the first batch
        assert [u["message"]["text"] for u in fake_telegram._updates] == ["during the outage", "sent meanwhile"]
        down.clear()
        await inbox.wait_for(2, within_s=10)
        assert [m.text for m in inbox.messages] == ["during the outage", "sent meanwhile"]
        assert await _confirmed(fake_telegram)
    finally:
        await adapter.stop()


async def test_a_batch_unkept_when_polling_stops_is_held_back_and_fetched_again(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings, caplog: pytest.LogCaptureFixture) -> None:
    # The polling lease lost (or a shutdown) in the middle of an outage: the batch is neither handed on nor
    # confirmed — PTB's closing getUpdates and the next poll ask from it again.
    adapter = TelegramAdapter(replace(telegram_settings, poll_on_start=False))
    down = asyncio.Event()
    down.set()

    async def keep(batch: Sequence[Inbound]) -> None:
        if down.is_set():
            raise ConnectionRefusedError("database down")

    adapter.keep = keep
    inbox = Inbox()
    fake_telegram.inject_message("kept nowhere yet")
    caplog.set_level(logging.WARNING, logger="adapters.telegram_adapter")
    await adapter.start(inbox)
    try:
        await adapter.start_polling()
        for _ in range(100):
            if adapter.handoff.open:
                break
            await asyncio.sleep(0.05)
        await adapter.stop_polling()
        assert adapter.handoff.held_back == 1 and inbox.messages == []
        assert [u["message"]["text"] for u in fake_telegram._updates] == ["kept nowhere yet"]  # not confirmed
        assert "polling stopped; not confirmed" in caplog.text
        down.clear()
        fake_telegram.inject_message("after")
        await adapter.start_polling()
        await inbox.wait_for(2, within_s=10)
        assert [m.text for m in inbox.messages] == ["kept nowhere yet", "after"]
        assert await _confirmed(fake_telegram)
        assert adapter.handoff.held_back == 0
    finally:
        await adapter.stop()


async def test_a_handler_that_never_returns_does_not_stop_polling_nor_confirm_its_update() -> None:
    handoff = UpdateHandOff(read_timeout_s=0.2)
    handoff.fetched([7, 8])
    assert handoff.read(7, None) is None  # 8 is still being read
    await asyncio.wait_for(handoff.wait(), 2.0)  # gives up waiting for 8 after the bound
    assert handoff.open == 0 and handoff.held_back == 2
    assert handoff.confine(9) == 7  # the next getUpdates asks from 7 again
    late = handoff.read(8, None)  # its batch was held back: it is settled alone
    assert late is not None and late.ids == (8,)
    handoff.resent()
    assert handoff.confine(9) == 9


async def test_polling_stopped_and_started_again_does_not_wait_for_what_its_stop_fetched(
        fake_telegram: FakeTelegram, telegram_settings: TelegramSettings) -> None:
    # A worker losing and retaking the polling lease (a Redis hiccup): PTB's closing getUpdates call
    # fetches what arrived meanwhile only to discard it. Noted as fetched, those updates never settled, and the
    # restarted poller waited the whole bound (a minute) before asking Telegram again.
    adapter = TelegramAdapter(replace(telegram_settings))
    inbox = Inbox()
    await adapter.start(inbox)
    try:
        fake_telegram.inject_message("before")
        await inbox.wait_for(1)
        fake_telegram.stall_updates = True  # the long poll in flight sees nothing new ...
        fake_telegram.inject_message("meanwhile")
        await adapter.stop_polling()  # ... and the closing call fetches "meanwhile" and drops it
        fake_telegram.stall_updates = False
        assert adapter.handoff.open == 0
        await adapter.start_polling()
        await inbox.wait_for(2, within_s=5)
        assert [m.text for m in inbox.messages] == ["before", "meanwhile"]
    finally:
        await adapter.stop()
