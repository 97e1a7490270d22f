"""Discord adapter on discord.py: guild text channels, DMs and threads.

The bot needs the privileged **Message Content** intent (Developer Portal → Bot → Privileged Gateway
Intents); without it Discord blanks guild messages that do not mention the bot, so unaddressed chatter
cannot be kept as context. Replies never ping @everyone, @here or roles. With ``slash_commands`` the
commands are also offered as native slash commands (see `adapters.discord_slash`).

Discord never sends an event twice, so each message is kept (``keep``) before it is handed on, in arrival
order: in the gateway's inbox, or — the database down or slow — in the worker's spool on disk, from which it
reaches the inbox once the database answers (`gateway.intake.spool`). A worker that dies mid-turn, or mid-outage,
leaves it to be handled again. Only when neither can take it is it handed on from memory alone.

Edits (MESSAGE_UPDATE with an edit time) and deletions (MESSAGE_DELETE, MESSAGE_DELETE_BULK, one event per
message) take the same path, as `Inbound` events of their kind (`adapters.discord_inbound` reads every event).
discord.py's raw events are used, so messages older than its cache count too.

The adapter is put together from its parts, one module each: events read into `Inbound` events
(`adapters.discord_inbound`), replies sent (`adapters.discord_send`), gateway events and frames discord.py cannot
read made to cost only themselves (`adapters.discord_guards`). This module holds the lifecycle (log in, connect
under supervision, stop), the slash commands' sync and acknowledgement, and the intake: an event kept, then
handed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
import discord

from adapters.base import ChatRef, Inbound, InboundHandler, keep_alive
from adapters.discord_guards import guard_frames, guard_parsers, quiet_reconnects
from adapters.discord_inbound import DiscordInbound
from adapters.discord_send import DiscordSending, Sleep
from adapters.discord_settings import DiscordSettings
from adapters.discord_slash import PendingInteractions, build_tree
from adapters.live import ChatThrottle
from adapters.supervise import Supervisor, describe, retry_start

__all__ = ["DISCORD_LIMIT", "DiscordAdapter", "DiscordSettings", "intents"]

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
# What waiting cannot fix: a rejected token, a privileged intent not enabled in the Developer Portal.
_FATAL = (discord.LoginFailure, discord.PrivilegedIntentsRequired)


def intents() -> discord.Intents:
    """Default intents plus message content (privileged; enable it in the Developer Portal)."""
    wanted = discord.Intents.default()
    wanted.message_content = True
    return wanted


class DiscordAdapter(DiscordSending):
    """Discord via discord.py; ``sleep`` is the clock used for our own rate-limit backoff."""

    name = "discord"
    limit = DISCORD_LIMIT
    redelivers = False

    def __init__(self, settings: DiscordSettings, *, sleep: Sleep = asyncio.sleep) -> None:
        super().__init__()
        self.settings = settings
        self._sleep = sleep
        self._mentions = discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True)
        self.client = _client(settings, intents=intents(), allowed_mentions=self._mentions,
                              # discord.py sleeps through waits up to this (min 30 s) itself and raises
                              # RateLimited above it.
                              max_ratelimit_timeout=30.0, guild_ready_timeout=0.1)
        self.inbound = DiscordInbound(self.client, settings)
        guard_parsers(self.client)
        guard_frames(self.client)
        quiet_reconnects()
        self.client.event(self.on_message)
        self.client.event(self.on_raw_message_edit)
        self.client.event(self.on_raw_message_delete)
        self.client.event(self.on_raw_bulk_message_delete)
        self._supervisor: Supervisor | None = None
        self._interactions = PendingInteractions()
        self._throttle = ChatThrottle(settings.edit_interval)
        self._intake = asyncio.Lock()  # FIFO: messages are kept and handed on in the order they arrived
        if settings.slash_commands:
            self.tree = build_tree(self.client, self.on_slash_command)
            # discord.py awaits setup_hook in login(), after the application id is known, before the gateway.
            self.client.setup_hook = self._sync_commands  # type: ignore[method-assign]

    async def start(self, on_message: InboundHandler) -> None:
        """Log in (retrying an unreachable Discord with backoff) and connect under supervision; returns once
        the client is ready. A rejected token raises ConnectionError at once."""
        self._handler = on_message
        try:
            await retry_start(self._login, what="discord: login", backoff=self.settings.backoff,
                              fatal=(discord.LoginFailure,))
        except discord.LoginFailure:
            await self.client.close()
            raise ConnectionError("discord rejected the bot token (check discord.token)") from None
        except ConnectionError:
            await self.client.close()
            raise
        self._supervisor = Supervisor("discord", self.settings.backoff, fatal=_FATAL)
        self._supervisor.watch(self._connection)
        ready = asyncio.ensure_future(self.client.wait_until_ready())
        failed = self._supervisor.failed
        await asyncio.wait({failed, ready}, timeout=self.settings.ready_timeout, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            why = str(failed.result()) if failed.done() else "timeout"
            await self.stop()
            raise ConnectionError(f"discord did not become ready: {why}")
        log.info("discord: connected as %s", self.client.user)

    @property
    def connected(self) -> bool:
        """Logged in, ready and not closed (``/readyz``)."""
        return self._supervisor is not None and self.client.is_ready() and not self.client.is_closed()

    async def _login(self) -> None:
        if self.client.is_closed():
            # discord.py closes the client on close codes it will not reconnect on; clear() reopens it, but the
            # HTTP connector closed with it would make every later request fail ("Session is closed").
            self.client.clear()
            connector = self.client.http.connector
            if connector is not discord.utils.MISSING and connector.closed:
                self.client.http.connector = discord.utils.MISSING  # login builds a new one
        await self.client.login(self.settings.token)

    async def _connection(self) -> None:
        """One supervised run of the gateway connection: returns or raises when it is lost.

        discord.py reconnects on its own after network drops, and an unreadable frame costs only that frame
        (`adapters.discord_guards`); what reaches here is what it gives up on (a close code it treats as final), so the
        connection is rebuilt from login.
        """
        try:
            if self.client.is_closed() or self.client.http.token is None:
                await self._login()
            await self.client.connect(reconnect=True)
        finally:
            ws = self.client.ws
            if ws is not None and not self.client.is_closed():
                # The broken socket's heartbeat thread would otherwise keep it open beside the new one.
                with contextlib.suppress(Exception):
                    await ws.close(code=4000)

    async def wait_failed(self) -> BaseException:
        """The cause, once Discord cannot be reconnected (see `adapters.supervise`)."""
        if self._supervisor is None:
            return await super().wait_failed()
        return await self._supervisor.failed

    async def stop(self) -> None:
        """Let in-flight handlers send their replies, then close the connection; idempotent."""
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is None:
            return
        await self._drain(self.settings.drain_seconds)
        await supervisor.stop(self.client.close)

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        """Trigger typing now and every ``typing_interval`` s (Discord shows it ~10 s)."""
        channel = self._channel(chat.chat if isinstance(chat, Inbound) else chat)

        async def trigger() -> None:
            await channel.typing()

        return keep_alive(trigger, self.settings.typing_interval, "discord typing")

    # -- slash commands --------------------------------------------------------------------------
    async def _sync_commands(self) -> None:
        try:
            synced = await self.tree.sync()
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: slash command sync failed (%s); typed commands still work", _why(exc))
            return
        log.info("discord: %d slash commands synced", len(synced))

    async def on_slash_command(self, interaction: discord.Interaction, name: str, args: str) -> None:
        """Acknowledge a slash command at once (Discord's 3 s deadline), then hand it on as a command Inbound."""
        try:
            await interaction.response.defer(thinking=True)
        except (discord.DiscordException, aiohttp.ClientError, OSError) as exc:
            log.warning("discord: could not acknowledge /%s (%s); skipped", name, _why(exc))
            return
        self._interactions.add(interaction)
        try:
            inbound = self.inbound.interaction(interaction, name, args)
        except Exception as exc:
            log.warning("discord: skipping unreadable interaction %s (%s)", interaction.id, describe(exc))
            return
        await self._take(inbound)

    # -- inbound ---------------------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        """discord.py event: turn a message into an Inbound and hand it on (errors only logged)."""
        try:
            inbound = self.inbound.message(message)
        except Exception as exc:
            log.warning("discord: skipping unreadable message %s (%s)", getattr(message, "id", "?"), describe(exc))
            return
        if inbound is not None:
            await self._take(inbound)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """discord.py event: an edited message becomes an edit Inbound (its new text)."""
        try:
            inbound = self.inbound.edit(payload)
        except Exception as exc:
            log.warning("discord: skipping unreadable edit of message %s (%s)", payload.message_id, describe(exc))
            return
        if inbound is not None:
            await self._take(inbound)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        """discord.py event: a deleted message becomes a delete Inbound."""
        await self._take_deletions(payload.channel_id, payload.guild_id,
                                   [(payload.message_id, payload.cached_message)])

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        """discord.py event: a moderator's bulk delete becomes one delete Inbound per message, oldest first."""
        cached = {m.id: m for m in payload.cached_messages}
        await self._take_deletions(payload.channel_id, payload.guild_id,
                                   [(message_id, cached.get(message_id)) for message_id in sorted(payload.message_ids)])

    async def _take_deletions(self, channel_id: int, guild_id: int | None,
                              messages: list[tuple[int, discord.Message | None]]) -> None:
        try:
            deletions = self.inbound.deletions(channel_id, guild_id, messages)
        except Exception as exc:
            log.warning("discord: skipping a deletion in channel %s (%s)", channel_id, describe(exc))
            return
        for deletion in deletions:
            await self._take(deletion)

    async def _take(self, inbound: Inbound) -> None:
        """Keep ``inbound`` in the gateway's inbox, then hand it on (see the module docstring)."""
        async with self._intake:
            if self.keep is not None:
                try:
                    await self.keep([inbound])
                except Exception as exc:
                    log.error("discord: message %s kept nowhere (%s); handled from memory only",
                              inbound.message_id, describe(exc))
            self._dispatch(inbound)


def _client(settings: DiscordSettings, **options: Any) -> discord.Client:
    """A plain client for one shard (or no sharding); an AutoShardedClient when this process runs several
    shards or all of a sharded bot's shards."""
    if settings.shard_count is None:
        return discord.Client(**options)
    if len(settings.shard_ids) == 1:
        return discord.Client(shard_id=settings.shard_ids[0], shard_count=settings.shard_count, **options)
    return discord.AutoShardedClient(shard_count=settings.shard_count, shard_ids=list(settings.shard_ids) or None,
                                     **options)


def _why(exc: BaseException) -> str:
    """A short reason without request details (which could carry an interaction token)."""
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__} {status}" if status else type(exc).__name__
