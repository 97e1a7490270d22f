"""Discord replies out: messages to a channel or thread with bounded retries, live (edited) replies, and replies to
a slash command through its interaction while that lasts (`adapters.discord_slash`).

`DiscordSending` is the sending part of `adapters.discord_adapter.DiscordAdapter` (mixed into it). Rate limits
are waited out up to ``max_retry_wait`` (discord.py itself sleeps through short ones), server errors and network
failures backed off, up to ``max_retry_attempts``; a refusal raises `SendError` at once.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

import aiohttp
import discord

from adapters.base import Adapter, ChatRef, Inbound, Outbound, SendError, split_message
from adapters.discord_settings import DiscordSettings
from adapters.discord_slash import PendingInteraction, PendingInteractions
from adapters.live import ChatThrottle, EditedReply, LiveRateLimited

__all__ = ["DiscordSending", "Sleep"]

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


class DiscordSending(Adapter):
    """Replies for `DiscordAdapter` (mixed into it), sent with the adapter's discord.py client."""

    settings: DiscordSettings
    client: discord.Client
    _sleep: Sleep
    _mentions: discord.AllowedMentions
    _interactions: PendingInteractions
    _throttle: ChatThrottle

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
