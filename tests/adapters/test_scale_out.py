"""Adapters for several workers: Discord shards (this worker identifies as its own shard, or runs several over
one AutoShardedClient), Telegram polling that waits for the gateway's lease, and webhook updates confirmed only
once handled."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace

import discord
import httpx
import pytest

from adapters.base import Inbound
from adapters.discord_adapter import DiscordAdapter, DiscordSettings, _client
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from gateway.config import ConfigError, load_settings
from tests.fakes.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    OTHER_CHANNEL_ID,
    OTHER_GUILD_ID,
    FakeDiscord,
    shard_of,
)
from tests.fakes.inbox import Inbox
from tests.fakes.telegram_server import FakeTelegram


async def test_a_discord_worker_identifies_as_its_shard(fake_discord: FakeDiscord,
                                                        discord_settings: DiscordSettings) -> None:
    adapter = DiscordAdapter(replace(discord_settings, shard_count=3, shard_ids=(2,)))
    await adapter.start(Inbox())
    try:
        assert fake_discord.identifies[-1]["shard"] == [2, 3]
        assert adapter.connected
    finally:
        await adapter.stop()
    assert not adapter.connected


async def test_one_worker_runs_two_shards_and_answers_each_guild_and_a_dm_once(
        fake_discord: FakeDiscord, discord_settings: DiscordSettings) -> None:
    fake_discord.add_guild(OTHER_GUILD_ID, OTHER_CHANNEL_ID)
    assert (shard_of(GUILD_ID, 2), shard_of(OTHER_GUILD_ID, 2)) == (0, 1)
    adapter = DiscordAdapter(replace(discord_settings, shard_count=2, shard_ids=(0, 1)))

    async def answer(inbound: Inbound) -> None:
        await adapter.send(inbound, f"re: {inbound.text}")

    inbox = Inbox(answer)
    assert isinstance(adapter.client, discord.AutoShardedClient)
    await adapter.start(inbox)  # discord.py waits 5 s before the second IDENTIFY, as Discord's limit asks
    try:
        assert adapter.connected
        assert sorted(c.shard for c in fake_discord.open_connections()) == [(0, 2), (1, 2)]
        assert {g.id: g.shard_id for g in adapter.client.guilds} == {GUILD_ID: 0, OTHER_GUILD_ID: 1}
        asked = [await fake_discord.inject_message(f"<@{BOT_ID}> one", channel_id=CHANNEL_ID),
                 await fake_discord.inject_message(f"<@{BOT_ID}> two", channel_id=OTHER_CHANNEL_ID),
                 await fake_discord.inject_message("a dm", channel_id=DM_CHANNEL_ID)]
        assert [fake_discord.shards_of(m["id"]) for m in asked] == [[(0, 2)], [(1, 2)], [(0, 2)]]
        await fake_discord.wait_for_messages(3)
        await asyncio.sleep(0.3)  # room for a (wrong) second answer
        answers = {(m.reference_id, m.channel_id, m.content) for m in fake_discord.sent_messages}
        assert len(fake_discord.sent_messages) == 3
        assert answers == {(int(asked[0]["id"]), CHANNEL_ID, "re: one"), (int(asked[1]["id"]), OTHER_CHANNEL_ID,
                           "re: two"), (int(asked[2]["id"]), DM_CHANNEL_ID, "re: a dm")}
        # Each shard's connection reads on its own, so the two guilds' messages may arrive in either order.
        assert sorted((m.message_id, m.guild_id, m.chat_type) for m in inbox.messages) == [
            (asked[0]["id"], str(GUILD_ID), "group"), (asked[1]["id"], str(OTHER_GUILD_ID), "group"),
            (asked[2]["id"], None, "dm")]
    finally:
        await adapter.stop()
    assert not adapter.connected


def test_several_shards_per_worker_use_the_auto_sharded_client() -> None:
    plain = _client(DiscordSettings(token="t"), intents=discord.Intents.default())
    assert type(plain) is discord.Client and plain.shard_count is None
    several = _client(DiscordSettings(token="t", shard_count=4, shard_ids=(0, 2)), intents=discord.Intents.default())
    assert isinstance(several, discord.AutoShardedClient)
    assert several.shard_count == 4 and several.shard_ids == [0, 2]


def test_shard_settings_are_validated() -> None:
    assert load_settings(discord={"shard_count": 4, "shard_ids": "1,3"}).discord.shard_ids == [1, 3]
    with pytest.raises(ConfigError, match=r"needs discord\.shard_count"):
        load_settings(discord={"shard_ids": "1"})
    with pytest.raises(ConfigError, match=r"outside 0\.\.3"):
        load_settings(discord={"shard_count": 4, "shard_ids": "4"})


async def test_telegram_polls_only_when_told(fake_telegram: FakeTelegram,
                                             telegram_settings: TelegramSettings) -> None:
    inbox = Inbox()
    adapter = TelegramAdapter(replace(telegram_settings, poll_on_start=False))
    await adapter.start(inbox)
    try:
        fake_telegram.inject_message("waiting for the lease", chat_type="private", chat_id=5)
        await asyncio.sleep(0.5)
        assert "getUpdates" not in fake_telegram.calls and not adapter.polling
        assert adapter.connected  # a standby worker is ready: it sends and can take over
        await adapter.start_polling()
        [message] = await inbox.wait_for(1, within_s=5)
        assert message.text == "waiting for the lease"
        await adapter.stop_polling()
        assert not adapter.polling
    finally:
        await adapter.stop()


async def test_a_webhook_update_is_confirmed_only_once_handled(fake_telegram: FakeTelegram,
                                                               telegram_settings: TelegramSettings) -> None:
    release = asyncio.Event()
    handled: list[str] = []

    async def slow(inbound: Inbound) -> None:
        await release.wait()
        handled.append(inbound.text)

    port = _free_port()
    adapter = TelegramAdapter(replace(telegram_settings, mode="webhook", webhook_port=port, webhook_path="tg",
                                      webhook_url=f"http://127.0.0.1:{port}/tg", webhook_secret="s3cret"))
    await adapter.start(slow)
    url, headers = f"http://127.0.0.1:{port}/tg", {"X-Telegram-Bot-Api-Secret-Token": "s3cret"}
    update = {"update_id": 5, "message": fake_telegram.make_message("hello", chat_type="private", chat_id=9)}
    try:
        async with httpx.AsyncClient() as client:
            post = asyncio.create_task(client.post(url, json=update, headers=headers))
            await asyncio.sleep(0.3)
            assert not post.done()  # Telegram still holds the update: a crash now means it comes again
            release.set()
            assert (await post).status_code == 200 and handled == ["hello"]
            assert (await client.post(url, json={"update_id": 6}, headers=headers)).status_code == 200  # not ours
            await adapter.stop_receiving()
            late = await client.post(url, json={**update, "update_id": 7}, headers=headers)
            assert late.status_code == 503  # shutting down: deliver it to another worker
    finally:
        await adapter.stop()
    assert handled == ["hello"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
