"""Telegram forgets an update once getUpdates asks past it: that must not happen before the gateway has the
message (issue 11). Real PTB polling against the fake Bot API."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from adapters.base import Inbound
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from adapters.telegram_handoff import UpdateHandOff
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram


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
        for _ in range(100):
            if not fake_telegram._updates:
                break
            await asyncio.sleep(0.05)
        assert fake_telegram._updates == []  # confirmed once handed on
        assert inbox.messages[0].text == "keep me"
    finally:
        slow.set()
        await adapter.stop()


async def test_a_handler_that_never_returns_does_not_stop_polling() -> None:
    handoff = UpdateHandOff(max_wait_s=0.2)
    handoff.fetched([7, 8])
    handoff.handed_on(7)
    await asyncio.wait_for(handoff.wait(), 2.0)  # gives up on 8 after the bound
    assert handoff.open == 0
