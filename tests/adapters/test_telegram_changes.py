"""Telegram edits through the real python-telegram-bot client: an ``edited_message`` update (polled or posted to
the webhook) becomes an edit `Inbound` of its message, keyed by its update id. (The Bot API reports no
deletions.)"""

from __future__ import annotations

import httpx

from tests.adapters.test_telegram import StartFn, _free_port, start_telegram  # noqa: F401
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram


async def test_a_polled_edit_becomes_an_edit_event(fake_telegram: FakeTelegram,
                                                   start_telegram: StartFn) -> None:  # noqa: F811
    inbox = Inbox()
    await start_telegram(inbox)
    message = fake_telegram.inject_message("@testbot book a table for 4", chat_id=-100123)
    fake_telegram.inject_edit(message, "@testbot book a table for 5")
    fake_telegram.inject_edit(message, "never mind")
    original, first, second = await inbox.wait_for(3)
    assert (original.kind, first.kind, second.kind) == ("message", "edit", "edit")
    assert first.message_id == second.message_id == original.message_id == str(message["message_id"])
    assert (first.text, first.mentions_bot, second.text, second.mentions_bot) == (
        "book a table for 5", True, "never mind", False)
    assert first.edit_id != second.edit_id and first.edit_id.isdigit()


async def test_an_edit_posted_to_the_webhook_is_read_the_same_way(fake_telegram: FakeTelegram,
                                                                  start_telegram: StartFn) -> None:  # noqa: F811
    port = _free_port()
    inbox = Inbox()
    await start_telegram(inbox, mode="webhook", webhook_port=port, webhook_path="tg",
                         webhook_url=f"http://127.0.0.1:{port}/tg", webhook_secret="s3cret")
    message = fake_telegram.make_message("@testbot first")
    edited = {**message, "text": "@testbot second", "edit_date": message["date"] + 5}
    async with httpx.AsyncClient() as client:
        answer = await client.post(f"http://127.0.0.1:{port}/tg", json={"update_id": 91, "edited_message": edited},
                                   headers={"X-Telegram-Bot-Api-Secret-Token": "s3cret"})
    assert answer.status_code == 200
    [inbound] = await inbox.wait_for(1)
    assert (inbound.kind, inbound.edit_id, inbound.text) == ("edit", "91", "second")
    assert inbound.received_at.timestamp() == message["date"] + 5
