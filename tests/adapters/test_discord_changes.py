"""Discord edits and deletions through the real discord.py client: MESSAGE_UPDATE, MESSAGE_DELETE and
MESSAGE_DELETE_BULK become `Inbound` events of their kind, kept (the inbox) and handed on like messages."""

from __future__ import annotations

import asyncio

from adapters.base import Inbound
from tests.adapters.test_discord import StartFn, start_discord  # noqa: F401
from tests.fakes.discord_changes import delete_message, delete_messages, edit_message
from tests.fakes.discord_server import BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, THREAD_ID, FakeDiscord
from tests.fakes.inbox import Inbox


async def test_an_edit_becomes_an_edit_event_with_an_id_of_its_own(fake_discord: FakeDiscord,
                                                                   start_discord: StartFn) -> None:  # noqa: F811
    inbox = Inbox()
    adapter = await start_discord(inbox)
    kept: list[Inbound] = []

    async def keep(batch: list[Inbound]) -> None:
        kept.extend(batch)

    adapter.keep = keep
    message = await fake_discord.inject_message(f"<@{BOT_ID}> book a table for 4", user_id=42)
    await edit_message(fake_discord, message, f"<@{BOT_ID}> book a table for 5")
    await edit_message(fake_discord, message, "never mind")
    original, first, second = await inbox.wait_for(3)
    assert (original.kind, first.kind, second.kind) == ("message", "edit", "edit")
    assert first.message_id == second.message_id == original.message_id
    assert (first.text, first.mentions_bot, second.text, second.mentions_bot) == (
        "book a table for 5", True, "never mind", False)
    assert first.edit_id and second.edit_id and first.edit_id != second.edit_id
    assert kept == [original, first, second]  # kept before they are handed on, as messages are


async def test_updates_that_are_no_edit_are_skipped(fake_discord: FakeDiscord, start_discord: StartFn) -> None:  # noqa: F811
    inbox = Inbox()
    await start_discord(inbox)
    message = await fake_discord.inject_message("look at https://example.com")
    await inbox.wait_for(1)
    # An embed filled in (no edit time), and an edit of the bot's own (streamed) answer.
    await fake_discord.dispatch("MESSAGE_UPDATE", {**message, "embeds": [], "edited_timestamp": None})
    own = {**fake_discord.make_message("answer so far"), "author": {"id": str(BOT_ID), "username": "testbot",
                                                                    "discriminator": "0", "avatar": None, "bot": True}}
    await edit_message(fake_discord, own, "the whole answer")
    await fake_discord.inject_message("next")
    await inbox.wait_for(2)
    await asyncio.sleep(0.1)
    assert [m.kind for m in inbox.messages] == ["message", "message"]


async def test_deletions_name_the_message_and_where_it_was(fake_discord: FakeDiscord,
                                                         start_discord: StartFn) -> None:  # noqa: F811
    inbox = Inbox()
    await start_discord(inbox)
    in_channel = await fake_discord.inject_message("oops, a secret", user_id=42)
    in_thread = await fake_discord.inject_message("in a thread", channel_id=THREAD_ID, user_id=43, user_name="bob")
    in_dm = await fake_discord.inject_message("in a dm", channel_id=DM_CHANNEL_ID)
    await inbox.wait_for(3)
    await delete_message(fake_discord, in_channel)
    await delete_message(fake_discord, in_thread)
    await delete_message(fake_discord, in_dm)
    await delete_messages(fake_discord, [{**in_channel, "id": "777"}, {**in_channel, "id": "55"}])
    deletions = (await inbox.wait_for(8))[3:]
    assert all(d.kind == "delete" and d.text == "" for d in deletions)
    channel, thread, dm, *bulk = deletions
    assert (channel.message_id, channel.chat_type, channel.chat_id, channel.thread_id) == (
        in_channel["id"], "group", str(CHANNEL_ID), None)
    assert (channel.user_id, channel.user_name) == ("42", "alice")  # discord.py still had it cached
    assert (thread.chat_type, thread.chat_id, thread.thread_id) == ("thread", str(CHANNEL_ID), str(THREAD_ID))
    assert (dm.chat_type, dm.chat_id) == ("dm", str(DM_CHANNEL_ID))
    assert [d.message_id for d in bulk] == ["55", "777"]  # oldest first
    assert all(d.user_id == "" for d in bulk)  # never cached: the gateway finds the rest in its store
