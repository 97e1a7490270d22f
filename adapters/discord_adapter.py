"""Discord adapter on discord.py: guild text channels, DMs and threads.

The bot needs the privileged **Message Content** intent (Developer Portal → Bot → Privileged Gateway
Intents); without it Discord blanks guild messages that do not mention the bot, so unaddressed chatter
cannot be kept as context. Replies never ping @everyone, @here or roles. With ``slash_commands`` the
commands are also offered as native slash commands (see `adapters.discord_slash`).

Discord never sends an event twice, so each message is kept (``keep``) before it is handed on, in arrival
order: in the gateway's inbox, or — the database down or slow — in the worker's spool on disk, from which it
reaches the inbox once the database answers (`gateway.spool`). A worker that dies mid-turn, or mid-outage,
leaves it to be handled again. Only when neither can take it is it handed on from memory alone.

Edits (MESSAGE_UPDATE with an edit time) and deletions (MESSAGE_DELETE, MESSAGE_DELETE_BULK, one event per
message) take the same path, as `Inbound` events of their kind (`adapters.discord_inbound` reads every event).
discord.py's raw events are used, so messages older than its cache count too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import aiohttp
import discord
from discord.gateway import ReconnectWebSocket, WebSocketClosure

from adapters.base import (
    Adapter,
    ChatRef,
    Inbound,
    InboundHandler,
    Outbound,
    SendError,
    keep_alive,
    split_message,
)
from adapters.discord_inbound import DiscordInbound
from adapters.discord_slash import PendingInteraction, PendingInteractions, build_tree
from adapters.live import ChatThrottle, EditedReply, LiveRateLimited
from adapters.supervise import Backoff, Supervisor, describe, retry_start

log = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
Sleep = Callable[[float], Awaitable[None]]
# What waiting cannot fix: a rejected token, a privileged intent not enabled in the Developer Portal.
_FATAL = (discord.LoginFailure, discord.PrivilegedIntentsRequired)
T = TypeVar("T")


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
    # Larger images are passed on as files: the strictest vision API (Anthropic) refuses images over 5 MB.
    max_image_bytes: int = 5_000_000
    ready_timeout: float = 60.0
    drain_seconds: float = 30.0
    slash_commands: bool = False
    # Sharding: the bot's total shard count and the shards this process runs (empty: all of them). Discord
    # routes each guild to shard (guild_id >> 22) % shard_count and DMs to shard 0.
    shard_count: int | None = None
    shard_ids: tuple[int, ...] = ()
    backoff: Backoff = field(default_factory=Backoff)
    # Show answers as they grow by editing one message, at most once per ``edit_interval`` s per channel.
    streaming: bool = True
    edit_interval: float = 1.0


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
                log.warning("discord: skipping malformed %s event (%s)", event, describe(exc))

        return run

    for event, parse in list(parsers.items()):
        parsers[event] = guarded(event, parse)


# What discord.py's own connection loops handle (reconnect, resume, give up): never swallowed here.
_LIBRARY_HANDLED = (ReconnectWebSocket, WebSocketClosure, discord.ConnectionClosed, discord.HTTPException,
                    discord.GatewayNotFound, aiohttp.ClientError, OSError, asyncio.TimeoutError)


class _BrokenStream(Exception):
    """The compressed gateway stream could not be inflated: every later frame depends on it."""


class _Inflater:
    """The socket's decompressor, with its failures told apart from a frame that inflated but is unreadable."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def decompress(self, data: bytes, /) -> str | None:
        try:
            return self._inner.decompress(data)  # type: ignore[no-any-return]
        except Exception as exc:
            raise _BrokenStream(describe(exc)) from None


def _guard_frames(client: discord.Client) -> None:
    """Make a gateway frame discord.py cannot read cost that frame (or, at worst, a RESUME), never a new
    IDENTIFY.

    discord.py reads a frame in ``DiscordWebSocket.received_message`` before any parser runs: a frame that is
    not JSON, not an object, or a READY / RESUMED it cannot read raises there, with an exception discord.py does
    not reconnect on, so ``Client.connect`` ended and the connection was rebuilt from login — a new session,
    to which Discord replays nothing sent meanwhile. Each new gateway socket passes through the client state's
    ``_update_references`` (discord.py's own hook, 2.x) before it reads its first frame; there its
    ``received_message`` is wrapped: an unreadable frame is skipped with one line. A compressed stream that
    cannot be inflated is broken for every frame after it, so then the socket is closed for a RESUME, which
    replays the events from the last one read.
    """
    state = client._connection
    update_references = state._update_references

    def guard(ws: Any) -> None:
        update_references(ws)
        ws._decompressor = _Inflater(ws._decompressor)
        ws.received_message = _tolerant(ws, ws.received_message)

    state._update_references = guard  # type: ignore[method-assign]


def _tolerant(ws: Any, receive: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    async def received_message(msg: Any, /) -> None:
        try:
            await receive(msg)
        except _LIBRARY_HANDLED:
            raise
        except _BrokenStream as exc:
            log.warning("discord: a compressed gateway frame could not be inflated (%s); resuming the session",
                        exc)
            await ws.close(code=4000)  # not 1000: that would end the session instead of letting it resume
            raise ReconnectWebSocket(ws.shard_id, resume=True) from None
        except Exception as exc:
            log.warning("discord: skipping an unreadable gateway frame (%s)", describe(exc))

    return received_message


class _OneLineReconnects(logging.Filter):
    """discord.py logs every reconnect of the gateway with a full traceback; one line with the cause is enough
    (a dropped connection is routine, and a dead one is reported by our supervisor at ERROR)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Attempting a reconnect"):
            cause = record.exc_info[1]
            record.msg = f"discord: gateway connection dropped ({describe(cause) if cause else 'unknown'}); " \
                         "discord.py reconnects in %.2fs"
            record.exc_info = record.exc_text = None
        return True


def _quiet_reconnects() -> None:
    library = logging.getLogger("discord.client")
    if not any(isinstance(f, _OneLineReconnects) for f in library.filters):
        library.addFilter(_OneLineReconnects())


class DiscordAdapter(Adapter):
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
        _guard_parsers(self.client)
        _guard_frames(self.client)
        _quiet_reconnects()
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
        (`_guard_frames`); what reaches here is what it gives up on (a close code it treats as final), so the
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

    def _channel(self, chat: ChatRef) -> discord.PartialMessageable:
        # A thread is its own channel on Discord: messages go to the thread's id.
        return self.client.get_partial_messageable(int(chat.thread_id or chat.chat_id))

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        await self._post(chat, text, reply_to)

    async def _post(self, chat: ChatRef, text: str, reply_to: str | None) -> discord.Message:
        channel = self._channel(chat)
        reference = (
            discord.MessageReference(message_id=int(reply_to), channel_id=channel.id, fail_if_not_exists=False)
            if reply_to else None
        )
        return await self._with_retries(lambda: channel.send(text, reference=reference))  # type: ignore[arg-type]

    # -- live replies (adapters.live.LiveEditor) ---------------------------------------------------------
    def live_reply(self, target: Inbound) -> EditedReply | None:
        """An answer that grows in one edited message (``streaming``); slash commands answer at the end."""
        if not self.settings.streaming or self._interactions.get(target.message_id) is not None:
            return None
        return EditedReply(self, target, self._throttle)

    async def post_live(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        """Post the live message; its id."""
        return str((await self._post(chat, text, reply_to)).id)

    async def edit_live(self, chat: ChatRef, message_id: str, text: str) -> None:
        """One edit of the live message; a rate limit skips it (discord.py already waits out short ones)."""
        message = self._channel(chat).get_partial_message(int(message_id))
        try:
            await message.edit(content=text)
        except discord.RateLimited as exc:
            raise LiveRateLimited(exc.retry_after) from None
        except (discord.Forbidden, discord.NotFound) as exc:
            raise SendError(f"discord refused the edit: {exc.status}") from None
        except discord.HTTPException as exc:
            if exc.status == 429 or exc.status >= 500:
                raise LiveRateLimited(1.0) from None
            raise SendError(f"discord rejected the edit: {exc.status}") from None
        except (aiohttp.ClientError, OSError):
            raise LiveRateLimited(1.0) from None

    async def finish_live(self, out: Outbound, message_id: str) -> bool:
        """The final text: its first chunk replaces the live message, the rest follow as new messages."""
        chunks = split_message(out.text, self.limit, self.length, out.continuation_prefix)
        message = self._channel(out.chat).get_partial_message(int(message_id))
        try:
            await self._with_retries(lambda: message.edit(content=chunks[0]))
        except SendError as exc:
            log.warning("discord: could not put the final text into the live message (%s)", exc)
            return False
        for chunk in chunks[1:]:
            await self._send_chunk(out.chat, chunk, None)
        return True

    async def _with_retries(self, send: Callable[[], Awaitable[T]]) -> T:
        """Run one send, waiting out rate limits and transient failures up to ``max_retry_attempts``."""
        for attempt in range(1, self.settings.max_retry_attempts + 1):
            try:
                return await send()
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

    async def deliver(self, out: Outbound) -> None:
        """Send an Outbound; a reply to a slash command goes out through its interaction while that lasts."""
        pending = self._interactions.get(out.reply_to_message_id)
        if pending is None:
            await super().deliver(out)
            return
        for chunk in split_message(out.text, self.limit, self.length, out.continuation_prefix):
            await self._with_retries(partial(self._interaction_send, pending, chunk))

    async def _interaction_send(self, pending: PendingInteraction, chunk: str) -> None:
        # The first chunk replaces the deferred "thinking" message; later ones are followups.
        if pending.answered:
            await pending.interaction.followup.send(chunk, allowed_mentions=self._mentions)
        else:
            await pending.interaction.edit_original_response(content=chunk, allowed_mentions=self._mentions)
            pending.answered = True

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
