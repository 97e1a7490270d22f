"""Edits, deletions and /forget end to end through the real discord.py and python-telegram-bot clients.

The fakes send what the platforms send: Discord's MESSAGE_UPDATE (the whole message, ``edited_timestamp`` set),
MESSAGE_DELETE and MESSAGE_DELETE_BULK dispatches, Telegram's ``edited_message`` updates. An edit before the
answer changes what the model sees; after it, the edit reaches the next turn as a correction; a Discord deletion
and a /forget leave nothing of the planted text in any table or column (SQLite and PostgreSQL) or in the data
directory, where search, summaries, the evidence ledger and memory files are.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.fakes.discord_changes import delete_message, delete_messages, edit_message
from tests.fakes.discord_server import BOT_ID, CHANNEL_ID, DM_CHANNEL_ID
from tests.gateway.conftest import chatter
from tests.gateway.planted_scan import PIECE, PLANT, echoing_model, files_holding, tables_holding
from tests.platforms.conftest import DISCORD_ADMIN, TELEGRAM_ADMIN, Platforms, PlatformsFactory, until

GROUP = -100123


def _user_texts(platforms: Platforms, index: int) -> str:
    return str(platforms.llm.requests[index].messages[-1]["content"])


async def test_discord_edit_before_the_answer_changes_what_the_model_sees(platforms: Platforms) -> None:
    platforms.llm.reply("first answer", delay=0.8)
    platforms.llm.reply("second answer")
    await platforms.discord.inject_message("what is 2+2?", channel_id=DM_CHANNEL_ID)
    await until(lambda: len(platforms.llm.requests) == 1)
    typo = await platforms.discord.inject_message("and 3+3 plz thx", channel_id=DM_CHANNEL_ID)
    await edit_message(platforms.discord, typo, "and 3+3?")
    await platforms.discord.wait_for_messages(2)
    await asyncio.sleep(0.3)  # nothing more comes: the edit has no answer of its own
    assert [m.content for m in platforms.discord.sent_messages] == ["first answer", "second answer"]
    assert _user_texts(platforms, 1) == "and 3+3?"
    assert "plz" not in str([r.json for r in platforms.llm.requests])


async def test_discord_edit_after_the_answer_reaches_the_next_turn_as_a_correction(platforms: Platforms) -> None:
    question = await platforms.discord.inject_message(f"<@{BOT_ID}> book a table for 4")
    await platforms.discord.wait_for_messages(1)
    await edit_message(platforms.discord, question, f"<@{BOT_ID}> book a table for 5")
    await platforms.discord.wait_for_messages(2)
    record = await platforms.gateway.rt.store.sessions.get_active("discord", f"group:{CHANNEL_ID}")
    stored = [str(m["content"]) for m in (await platforms.gateway.rt.store.messages.load_active(record.id)).messages]
    assert stored[0] == "[alice] book a table for 4"  # the first version stays
    assert _user_texts(platforms, 1) == stored[2] == "[alice] edited their message #1: book a table for 5"
    # Embeds being filled in are updates without an edit time: nothing happens.
    await platforms.discord.dispatch("MESSAGE_UPDATE", {**question, "embeds": [], "edited_timestamp": None})
    await asyncio.sleep(0.3)
    assert len(platforms.llm.requests) == 2


async def test_telegram_edits_before_and_after_the_answer(platforms: Platforms) -> None:
    platforms.llm.reply("first answer", delay=0.8)
    platforms.llm.reply("second answer")
    platforms.llm.reply("third answer")
    platforms.telegram.inject_message("@testbot what is 2+2?", chat_id=GROUP)
    await until(lambda: len(platforms.llm.requests) == 1)
    typo = platforms.telegram.inject_message("@testbot and 3+3 plz thx", chat_id=GROUP)
    platforms.telegram.inject_edit(typo, "@testbot and 3+3?")
    await platforms.telegram.wait_for_messages(2)
    assert _user_texts(platforms, 1) == "[alice] and 3+3?"
    platforms.telegram.inject_edit(typo, "@testbot and 4+4?")
    await platforms.telegram.wait_for_messages(3)
    assert _user_texts(platforms, 2) == "[alice] edited their message #3: and 4+4?"
    assert [m.text for m in platforms.telegram.sent_messages] == ["first answer", "second answer", "third answer"]


async def _compacted_channel_with(platforms: Platforms) -> dict[str, Any]:
    """A guild channel whose history holds ``PLANT`` in a message the bot answered and memorized, in the middle
    an admin's /compress summarized; returns that message's payload."""
    echoing_model(platforms.llm)
    await platforms.discord.inject_message(f"<@{BOT_ID}> hello", user_id=43, user_name="bob")  # the head
    planted = await platforms.discord.inject_message(
        f"<@{BOT_ID}> please remember that my locker code is {PLANT}", user_id=42)
    await platforms.discord.wait_for_messages(2, 30)
    await platforms.bulk_history("discord", f"group:{CHANNEL_ID}", chatter(30, words=60))
    await platforms.discord.inject_message(f"<@{BOT_ID}> and now the last topic", user_id=43, user_name="bob")
    await platforms.discord.wait_for_messages(3, 30)
    await platforms.discord.inject_message("/compress", user_id=DISCORD_ADMIN)
    await until(lambda: any(m.content.startswith("Compressed") for m in platforms.discord.sent_messages), 30)
    return planted


async def test_a_discord_deletion_leaves_no_trace(make_platforms: PlatformsFactory, backend_storage: dict[str, Any],
                                                 tmp_path: Path) -> None:
    platforms = await make_platforms(storage=backend_storage, compression={"protect_first_n": 1, "protect_last_n": 4})
    planted = await _compacted_channel_with(platforms)
    engine = platforms.gateway.rt.store.engine
    held = {place.split(".")[0] for place in await tables_holding(engine, PLANT)}
    assert {"messages", "sessions", "deliveries", "inbox"} <= held  # what the scan sees before
    assert files_holding(tmp_path, PLANT) != []  # the user's memory file

    await delete_message(platforms.discord, planted)
    record = await platforms.gateway.rt.store.sessions.get_active("discord", f"group:{CHANNEL_ID}")
    await until_erased(platforms, record.id)
    for needle in (PLANT, PIECE):
        assert await tables_holding(engine, needle) == []
        assert files_holding(tmp_path, needle) == []
        assert await platforms.gateway.rt.store.search(needle) == []
    rows = await platforms.gateway.rt.store.messages.export(record.id, include_archived=True)
    assert any(str(r.message["content"]).startswith("[alice deleted the message they sent") for r in rows)
    # The bot still answers, and the next request carries no trace of the text.
    await platforms.discord.inject_message(f"<@{BOT_ID}> what do you know?", user_id=43, user_name="bob")
    await until(lambda: "what do you know" in platforms.discord.sent_messages[-1].content, 30)
    assert PIECE not in str(platforms.llm.requests[-1].json)


async def until_erased(platforms: Platforms, session_id: str) -> None:
    """Wait until the session's last replacement is the erasure."""
    for _ in range(1500):
        history = await platforms.gateway.rt.store.compactions.history(session_id)
        if history and history[-1].reason == "erasure":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the deletion was not handled within 30 s")


async def test_a_discord_bulk_delete_erases_each_message(platforms: Platforms) -> None:
    echoing_model(platforms.llm)
    first = await platforms.discord.inject_message(f"<@{BOT_ID}> code one is {PLANT}", user_id=42)
    second = await platforms.discord.inject_message(f"<@{BOT_ID}> code two is quartz-harbor-4410", user_id=43)
    await platforms.discord.wait_for_messages(2)
    engine = platforms.gateway.rt.store.engine
    await delete_messages(platforms.discord, [first, second])
    await until_quiet(lambda: tables_holding(engine, "quartz-harbor-4410"))
    assert await tables_holding(engine, PLANT) == []


async def until_quiet(places: Any) -> None:
    for _ in range(1500):
        if await places() == []:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"still held in {await places()}")


async def test_telegram_forget_me_erases_one_users_messages(make_platforms: PlatformsFactory,
                                                            backend_storage: dict[str, Any], tmp_path: Path) -> None:
    platforms = await make_platforms(storage=backend_storage)
    echoing_model(platforms.llm)
    platforms.telegram.inject_message(f"@testbot please remember that my locker code is {PLANT}", chat_id=GROUP)
    platforms.telegram.inject_message("@testbot mine is quartz-harbor-4410", chat_id=GROUP, user_id=43,
                                      user_name="bob")
    await platforms.telegram.wait_for_messages(2)
    engine = platforms.gateway.rt.store.engine
    assert await tables_holding(engine, PLANT) != [] and files_holding(tmp_path, PLANT) != []
    platforms.telegram.inject_message("/forget@testbot me", chat_id=GROUP)
    platforms.telegram.inject_message("@testbot and after that, hello-again-5150", chat_id=GROUP)
    [*_, reply, after] = await platforms.telegram.wait_for_messages(4)
    assert reply.text.startswith("Forgotten: "), reply.text
    assert "hello-again-5150" in after.text  # what she sends next is kept and answered as usual
    assert await tables_holding(engine, "hello-again-5150") != []
    for needle in (PLANT, PIECE):
        assert await tables_holding(engine, needle) == []
        assert files_holding(tmp_path, needle) == []
    assert await tables_holding(engine, "quartz-harbor-4410") != []  # bob's stays
    # An admin forgets someone else; a member cannot.
    platforms.telegram.inject_message("/forget@testbot telegram:43", chat_id=GROUP, user_id=44, user_name="cy")
    platforms.telegram.inject_message("/forget@testbot telegram:43", chat_id=GROUP, user_id=TELEGRAM_ADMIN)
    [*_, refused, done] = await platforms.telegram.wait_for_messages(6)
    assert refused.text.startswith("Sorry, only admins") and done.text.startswith("Forgotten: ")
    assert await tables_holding(engine, "quartz-harbor-4410") == []
