"""Access control and rate limits through the real discord.py and PTB clients against the fakes."""

from __future__ import annotations

import asyncio

from gateway.policy.admission import PAIRING_TEXT, REFUSED_DM
from tests.fakes.discord_server import ADMIN_ROLE_ID, BOT_ID, CHANNEL_ID, DM_CHANNEL_ID, GUILD_ID
from tests.platforms.conftest import TELEGRAM_ADMIN, PlatformsFactory, until

GROUP = -100123


async def test_discord_guild_and_role_lists(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms(discord={"admin_role_ids": [], "allow_role_ids": [str(ADMIN_ROLE_ID)],
                                              "allow_guilds": [str(GUILD_ID)]},
                                     gateway={"dm_policy": "allowlist"})
    platforms.llm.responder = lambda body: "hello member"
    await platforms.discord.inject_message(f"<@{BOT_ID}> hi", user_id=5)  # no role: quietly refused
    await platforms.discord.inject_message("hi", channel_id=DM_CHANNEL_ID, user_id=5)  # DM: one line
    [refusal] = await platforms.discord.wait_for_messages(1)
    assert refusal.content == REFUSED_DM and refusal.channel_id == DM_CHANNEL_ID
    await platforms.discord.inject_message(f"<@{BOT_ID}> hi", user_id=6, role_ids=(ADMIN_ROLE_ID,))
    await until(lambda: len(platforms.discord.sent_messages) == 2)
    assert platforms.discord.sent_messages[-1].content == "hello member"
    assert platforms.discord.sent_messages[-1].channel_id == CHANNEL_ID
    assert len(platforms.llm.requests) == 1


async def test_discord_server_outside_allow_guilds_is_ignored(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms(discord={"allow_guilds": ["1"]})
    await platforms.discord.inject_message(f"<@{BOT_ID}> hi", user_id=5)
    await platforms.discord.inject_message("/status", user_id=5)
    await asyncio.sleep(0.5)
    assert platforms.discord.sent_messages == [] and platforms.llm.requests == []


async def test_telegram_pairing_with_approve(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms(gateway={"dm_policy": "pairing"})
    platforms.llm.responder = lambda body: "nice to meet you"
    platforms.telegram.inject_message("hello", chat_id=7, chat_type="private", user_id=7, user_name="newbie")
    [pairing] = await platforms.telegram.wait_for_messages(1)
    code = pairing.text.split("code is ")[1].split(":")[0]
    assert pairing.text == PAIRING_TEXT.format(code=code) and int(pairing.chat_id) == 7
    platforms.telegram.inject_message(f"/approve {code}", chat_id=TELEGRAM_ADMIN, chat_type="private",
                                      user_id=TELEGRAM_ADMIN)
    await until(lambda: len(platforms.telegram.sent_messages) == 2)
    assert platforms.telegram.sent_messages[-1].text == "Approved telegram:7: they can use the bot now."
    platforms.telegram.inject_message("hello again", chat_id=7, chat_type="private", user_id=7, user_name="newbie")
    await until(lambda: len(platforms.telegram.sent_messages) == 3)
    assert platforms.telegram.sent_messages[-1].text == "nice to meet you"
    assert len(platforms.llm.requests) == 1


async def test_telegram_group_rate_limit_notice(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms(limits={"user_messages_per_minute": 1})
    platforms.llm.responder = lambda body: "first answer"
    platforms.telegram.inject_message("@testbot one", chat_id=GROUP, user_id=7)
    await until(lambda: len(platforms.telegram.sent_messages) == 1)
    platforms.telegram.inject_message("@testbot two", chat_id=GROUP, user_id=7)
    platforms.telegram.inject_message("chatter nobody asked about", chat_id=GROUP, user_id=7)
    await until(lambda: len(platforms.telegram.sent_messages) == 2)
    assert [m.text for m in platforms.telegram.sent_messages] == [
        "first answer", "⏳ You can send 1 message a minute; try again in 1 min."]
    assert len(platforms.llm.requests) == 1
