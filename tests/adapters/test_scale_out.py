"""Adapters for several workers: Discord shards (this worker identifies as its own shard) and Telegram
polling that waits for the gateway's lease."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import discord
import pytest

from adapters.discord_adapter import DiscordAdapter, DiscordSettings, _client
from adapters.telegram_adapter import TelegramAdapter, TelegramSettings
from gateway.config import ConfigError, load_settings
from tests.fakes.discord_server import FakeDiscord
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
