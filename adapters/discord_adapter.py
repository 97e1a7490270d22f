"""Discord adapter on discord.py: guild text channels, DMs and threads.

The bot needs the privileged **Message Content** intent (Developer Portal → Bot → Privileged Gateway
Intents); without it Discord blanks guild messages that do not mention the bot, so unaddressed chatter
cannot be kept as context. Replies never ping @everyone, @here or roles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import discord

from adapters.base import (
    Adapter,
    Attachment,
    ChatRef,
    ChatType,
    Inbound,
    InboundHandler,
    SendError,
    keep_alive,
    parse_command,
)

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
_USER_MESSAGE_TYPES = {discord.MessageType.default, discord.MessageType.reply}
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class DiscordSettings:
    """Everything the Discord adapter needs; the config layer maps its settings onto this."""

    token: str = field(repr=False)
    allow_bots: bool = False
    admin_role_ids: tuple[int, ...] = ()
    admin_role_names: tuple[str, ...] = ()
    typing_interval: float = 8.0
    max_retry_attempts: int = 5
    max_retry_wait: float = 120.0
    max_inbound_chars: int = 16_000
    ready_timeout: float = 60.0
    drain_seconds: float = 30.0


def intents() -> discord.Intents:
    """Default intents plus message content (privileged; enable it in the Developer Portal)."""
    wanted = discord.Intents.default()
    wanted.message_content = True
    return wanted


def _guard_parsers(client: discord.Client) -> None:
    """Make a gateway event discord.py cannot parse cost only that event.

    discord.py lets a parser's exception escape the websocket loop, which ends ``Client.start``; one
    malformed MESSAGE_CREATE would take the whole bot down. The parser table is discord.py's own
    ``ConnectionState.parsers``, stable across 2.x.
    """
    parsers: dict[str, Callable[[Any], None]] = client._connection.parsers

    def guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:
                log.warning("discord: skipping malformed %s event (%s: %s)", event, type(exc).__name__, exc)

        return run

    for event, parse in list(parsers.items()):
        parsers[event] = guarded(event, parse)


class DiscordAdapter(Adapter):
    """Discord via discord.py; ``sleep`` is the clock used for our own rate-limit backoff."""

    name = "discord"
    limit = DISCORD_LIMIT

    def __init__(self, settings: DiscordSettings, *, sleep: Sleep = asyncio.sleep) -> None:
        super().__init__()
        self.settings = settings
        self._sleep = sleep
        self.client = discord.Client(
            intents=intents(),
            allowed_mentions=discord.AllowedMentions(everyone=False, roles=False, users=True, replied_user=True),
            # discord.py sleeps through waits up to this (min 30 s) itself and raises RateLimited above it.
            max_ratelimit_timeout=30.0,
            guild_ready_timeout=0.1,
        )
        _guard_parsers(self.client)
        self.client.event(self.on_message)
        self._task: asyncio.Task[None] | None = None

    async def start(self, on_message: InboundHandler) -> None:
        """Log in and connect to the gateway; returns once the client is ready."""
        self._handler = on_message
        self._task = asyncio.create_task(self.client.start(self.settings.token))
        ready = asyncio.create_task(self.client.wait_until_ready())
        await asyncio.wait({self._task, ready}, timeout=self.settings.ready_timeout,
                           return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            ready.cancel()
            failure = self._task.exception() if self._task.done() else None
            await self.stop()
            raise ConnectionError(f"discord did not become ready: {type(failure).__name__ if failure else 'timeout'}")
        log.info("discord: connected as %s", self.client.user)

    async def stop(self) -> None:
        """Let in-flight handlers send their replies, then close the connection; idempotent."""
        if self._task is None:
            return
        task, self._task = self._task, None
        await self._drain(self.settings.drain_seconds)
        await self.client.close()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        """Trigger typing now and every ``typing_interval`` s (Discord shows it ~10 s)."""
        channel = self._channel(chat.chat if isinstance(chat, Inbound) else chat)

        async def trigger() -> None:
            await channel.typing()

        return keep_alive(trigger, self.settings.typing_interval, "discord typing")

    def _channel(self, chat: ChatRef) -> discord.PartialMessageable:
        # A thread is its own channel on Discord: messages go to the thread's id.
        return self.client.get_partial_messageable(int(chat.thread_id or chat.chat_id))

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        channel = self._channel(chat)
        reference = (
            discord.MessageReference(message_id=int(reply_to), channel_id=channel.id, fail_if_not_exists=False)
            if reply_to else None
        )
        for attempt in range(1, self.settings.max_retry_attempts + 1):
            try:
                await channel.send(text, reference=reference)  # type: ignore[arg-type]
                return
            except discord.RateLimited as exc:
                if exc.retry_after > self.settings.max_retry_wait:
                    raise SendError(f"discord asks to wait {exc.retry_after:.0f} s, over the limit") from None
                log.info("discord: rate limited, retrying in %.1f s (attempt %d)", exc.retry_after, attempt)
                await self._sleep(exc.retry_after)
            except (discord.Forbidden, discord.NotFound) as exc:
                raise SendError(f"discord refused the message: {exc.status} {exc.text}") from None
            except discord.HTTPException as exc:
                if exc.status != 429 and exc.status < 500:
                    raise SendError(f"discord rejected the message: {exc.status} {exc.text}") from None
                await self._backoff(f"HTTP {exc.status}", attempt)
            except (aiohttp.ClientError, OSError) as exc:
                await self._backoff(type(exc).__name__, attempt)
        raise SendError(f"discord send failed after {self.settings.max_retry_attempts} attempts")

    async def _backoff(self, why: str, attempt: int) -> None:
        delay = min(0.5 * 2 ** (attempt - 1), self.settings.max_retry_wait)
        log.warning("discord: send failed (%s), retrying in %.1f s (attempt %d)", why, delay, attempt)
        await self._sleep(delay)

    # -- inbound ---------------------------------------------------------------------------------
    async def on_message(self, message: discord.Message) -> None:
        """discord.py event: turn a message into an Inbound and hand it on (errors only logged)."""
        try:
            inbound = self._to_inbound(message)
        except Exception:
            log.exception("discord: could not read message %s; skipped", getattr(message, "id", "?"))
            return
        if inbound is not None:
            self._dispatch(inbound)

    def _to_inbound(self, message: discord.Message) -> Inbound | None:
        me = self.client.user
        if me is None or message.author.id == me.id or message.type not in _USER_MESSAGE_TYPES:
            return None
        if message.author.bot and not self.settings.allow_bots:
            return None
        if len(message.content) > self.settings.max_inbound_chars:
            log.warning("discord: skipping message %s of %d characters", message.id, len(message.content))
            return None
        attachments = tuple(_attachment(a) for a in message.attachments)
        if not message.content.strip() and not attachments:
            return None
        mentions_bot = any(user.id == me.id for user in message.mentions)
        text = re.sub(rf"<@!?{me.id}>", " ", message.content) if mentions_bot else message.content
        text = re.sub(r"[ \t]{2,}", " ", text).strip() if mentions_bot else text
        command = parse_command(text)
        chat_type, chat_id, thread_id = _where(message.channel)
        return Inbound(
            platform="discord",
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            user_id=str(message.author.id),
            user_name=message.author.display_name,
            message_id=str(message.id),
            text=text,
            attachments=attachments,
            mentions_bot=mentions_bot,
            reply_to_bot=_replies_to(message, me.id),
            is_command=command is not None,
            command=command[0] if command else None,
            command_args=command[1] if command else "",
            is_admin_hint=self._has_admin_role(message.author),
            received_at=message.created_at,
        )

    def _has_admin_role(self, author: discord.User | discord.Member) -> bool:
        roles = getattr(author, "roles", None) or []
        names = {name.lower() for name in self.settings.admin_role_names}
        return any(role.id in self.settings.admin_role_ids or role.name.lower() in names for role in roles)


def _where(channel: Any) -> tuple[ChatType, str, str | None]:
    """(chat type, chat id, thread id): a thread lives under its parent channel."""
    if isinstance(channel, discord.Thread):
        return "thread", str(channel.parent_id), str(channel.id)
    if isinstance(channel, discord.DMChannel):
        return "dm", str(channel.id), None
    return "group", str(channel.id), None


def _replies_to(message: discord.Message, user_id: int) -> bool:
    reference = message.reference
    resolved = reference.resolved if reference else None
    return isinstance(resolved, discord.Message) and resolved.author.id == user_id


def _attachment(item: discord.Attachment) -> Attachment:
    mime = item.content_type or "application/octet-stream"
    kind = "image" if mime.startswith("image/") else "file"
    return Attachment(kind=kind, mime=mime, size=item.size, name=item.filename, url=item.url)
