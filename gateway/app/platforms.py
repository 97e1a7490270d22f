"""The platforms Concord serves: an adapter for every platform with a token configured, the console when none is."""

from __future__ import annotations

from adapters.base import Adapter
from adapters.console import ConsoleAdapter
from gateway.app.providers import secret
from gateway.config import Settings

__all__ = ["build_adapters"]


def build_adapters(settings: Settings) -> list[Adapter]:
    """Every platform with a token configured; the console when there is none."""
    adapters: list[Adapter] = []
    discord_token = secret(settings.discord.token)
    if discord_token:
        from adapters.discord_adapter import DiscordAdapter, DiscordSettings

        d = settings.discord
        adapters.append(DiscordAdapter(DiscordSettings(
            token=discord_token, allow_bots=d.allow_bots, admin_role_ids=tuple(int(i) for i in d.admin_role_ids),
            admin_role_names=tuple(d.admin_role_names), slash_commands=d.slash_commands, streaming=d.streaming,
            max_image_bytes=d.max_image_bytes, drain_seconds=d.drain_seconds,
            shard_count=d.shard_count, shard_ids=tuple(d.shard_ids))))
    telegram_token = secret(settings.telegram.token)
    if telegram_token:
        from adapters.telegram_adapter import TelegramAdapter, TelegramSettings

        t = settings.telegram
        adapters.append(TelegramAdapter(TelegramSettings(
            token=telegram_token, api_base_url=t.api_base_url, mode=t.mode, webhook_url=t.webhook_url,
            webhook_listen=t.webhook_listen, webhook_port=t.webhook_port, webhook_path=t.webhook_path,
            webhook_secret=secret(t.webhook_secret), check_chat_admins=t.check_chat_admins,
            admin_cache_seconds=t.admin_cache_seconds, drain_seconds=t.drain_seconds, parse_mode=t.parse_mode,
            streaming=t.streaming,
            # With Redis several workers may run: only the holder of the polling lease polls.
            poll_on_start=not (t.mode == "polling" and secret(settings.redis.url)))))
    if not adapters:
        adapters.append(ConsoleAdapter(bot_name=settings.gateway.bot_name,
                                       history_path=settings.storage.data_dir / "console_history"))
    return adapters
