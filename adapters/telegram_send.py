"""Telegram replies out: sending, retries, HTML formatting with a plain-text fallback, and live (edited) replies.

The model writes Markdown, which Telegram does not render, so by default (``parse_mode="html"``) each split
chunk is converted to Telegram HTML (:mod:`adapters.telegram_format`) and sent with parse mode HTML. Should
Telegram still refuse a chunk's markup ("can't parse entities"), that chunk goes again as plain text, so a reply
is never lost. ``parse_mode="plain"`` sends the Markdown as it is. `TelegramSending` is the sending part of
`adapters.telegram_adapter.TelegramAdapter` (mixed into it); sendMessage and editMessageText are retried within
bounds (Retry-After waited out up to ``max_retry_wait``, network errors backed off).
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal

from telegram import Message, ReplyParameters
from telegram.error import BadRequest, Forbidden, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application

from adapters.base import Adapter, ChatRef, Inbound, Outbound, SendError, split_message, utf16_len
from adapters.live import ChatThrottle, EditedReply, LiveRateLimited
from adapters.telegram_format import markdown_to_telegram_html
from adapters.telegram_settings import TelegramSettings

__all__ = ["TelegramSending"]

log = logging.getLogger(__name__)


class _UnparsableMarkup(Exception):
    """Telegram could not parse the entities of a formatted message (its 400 "can't parse entities")."""


def _refuses_markup(description: str) -> bool:
    """Whether a 400 is about the formatting: unparsable entities, or markup that leaves no visible text
    (the plain Markdown of a chunk is never blank)."""
    lowered = description.lower()
    return "can't parse entities" in lowered or "text is empty" in lowered


def _unchanged(description: str) -> bool:
    """Telegram's 400 for an edit that changes nothing (the text is already what we sent)."""
    return "message is not modified" in description.lower()


def _seconds(value: int | float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


class TelegramSending(Adapter):
    """Replies for `TelegramAdapter` (mixed into it), sent with the adapter's PTB bot."""

    settings: TelegramSettings
    app: Application[Any, Any, Any, Any, Any, Any]
    _throttle: ChatThrottle

    async def deliver(self, out: Outbound) -> None:
        """Send an Outbound, as HTML converted chunk by chunk unless ``parse_mode`` is "plain"; the reply
        reference goes on the first chunk only."""
        if self.settings.parse_mode == "plain":
            await super().deliver(out)
            return
        # Split the Markdown, not the HTML: the splitter closes and reopens code fences per chunk, so each
        # chunk converts to balanced HTML on its own.
        for index, pair in enumerate(self._pairs(out)):
            await self._post_pair(out.chat, pair, out.reply_to_message_id if index == 0 else None)

    def _pairs(self, out: Outbound) -> list[tuple[str, str]]:
        """(Markdown, HTML) per message of ``out``."""
        chunks = split_message(out.text, self.limit, self.length, out.continuation_prefix)
        return [pair for chunk in chunks for pair in self._formatted(chunk, out.continuation_prefix)]

    async def _post_pair(self, chat: ChatRef, pair: tuple[str, str], reply_to: str | None) -> None:
        markdown, markup = pair
        try:
            await self._post(chat, markup, reply_to, "HTML")
        except _UnparsableMarkup:
            log.warning("telegram: formatted chunk refused (can't parse entities); sending it as plain text")
            await self._post(chat, markdown, reply_to, None)

    # -- live replies (adapters.live.LiveEditor) ---------------------------------------------------------
    def live_reply(self, target: Inbound) -> EditedReply | None:
        """An answer that grows in one edited message (``streaming``)."""
        return EditedReply(self, target, self._throttle) if self.settings.streaming else None

    async def post_live(self, chat: ChatRef, text: str, reply_to: str | None) -> str:
        """Post the live message (plain text while it grows); its id."""
        return str((await self._post(chat, text, reply_to, None)).message_id)

    async def edit_live(self, chat: ChatRef, message_id: str, text: str) -> None:
        """One edit of the live message; a 429 or a network error skips it."""
        try:
            await self.app.bot.edit_message_text(text, chat_id=int(chat.chat_id), message_id=int(message_id))
        except RetryAfter as exc:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raise LiveRateLimited(_seconds(exc.retry_after)) from None
        except BadRequest as exc:
            if not _unchanged(exc.message):
                raise SendError(f"telegram refused the edit: {exc.message}") from None
        except Forbidden as exc:
            raise SendError(f"telegram refused the edit: {exc.message}") from None
        except NetworkError:
            raise LiveRateLimited(1.0) from None

    async def finish_live(self, out: Outbound, message_id: str) -> bool:
        """The final text rendered as for `deliver`: the first message replaces the live one, the rest follow."""
        html = self.settings.parse_mode != "plain"
        if html:
            pairs = self._pairs(out)
        else:
            pairs = [(chunk, chunk) for chunk in split_message(out.text, self.limit, self.length,
                                                              out.continuation_prefix)]
        (markdown, markup), rest = pairs[0], pairs[1:]
        try:
            try:
                await self._edit(out.chat, message_id, markup, "HTML" if html else None)
            except _UnparsableMarkup:
                log.warning("telegram: formatted final text refused (can't parse entities); editing in plain text")
                await self._edit(out.chat, message_id, markdown, None)
        except SendError as exc:
            log.warning("telegram: could not put the final text into the live message (%s)", exc)
            return False
        for pair in rest:
            if html:
                await self._post_pair(out.chat, pair, None)
            else:
                await self._post(out.chat, pair[0], None, None)
        return True

    async def _edit(self, chat: ChatRef, message_id: str, text: str, parse_mode: str | None) -> None:
        """editMessageText with the same bounded retries as sending."""
        await self._with_retries(
            lambda: self.app.bot.edit_message_text(text, chat_id=int(chat.chat_id), message_id=int(message_id),
                                                   parse_mode=parse_mode),
            "edit", parse_mode)

    def _formatted(self, markdown: str, prefix: str) -> list[tuple[str, str]]:
        """(Markdown, HTML) pairs for one chunk; tags and entities lengthen the text, so a chunk whose HTML
        is over the limit is split again, in proportion, until every piece fits."""
        markup = markdown_to_telegram_html(markdown)
        size, converted = utf16_len(markdown), utf16_len(markup)
        if converted <= self.limit:
            return [(markdown, markup)]
        smaller = min(size - 1, size * self.limit // converted)
        return [pair for piece in split_message(markdown, smaller, utf16_len, prefix)
                for pair in self._formatted(piece, prefix)]

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        await self._post(chat, text, reply_to, None)

    async def _post(self, chat: ChatRef, text: str, reply_to: str | None, parse_mode: str | None) -> Message:
        """sendMessage with bounded retries; raises _UnparsableMarkup when Telegram refuses the markup."""
        reply = ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None
        thread = int(chat.thread_id) if chat.thread_id else None
        sent = await self._with_retries(
            lambda: self.app.bot.send_message(int(chat.chat_id), text, message_thread_id=thread,
                                              reply_parameters=reply, parse_mode=parse_mode),
            "send", parse_mode)
        assert isinstance(sent, Message)  # only an edit can come back "unchanged"
        return sent

    async def _with_retries(self, call: Callable[[], Awaitable[Any]], what: Literal["send", "edit"],
                            parse_mode: str | None) -> Any:
        """``call()`` (sendMessage or editMessageText) with bounded retries: Retry-After waited out up to
        ``max_retry_wait``, network errors backed off, refusals raised as SendError (or _UnparsableMarkup when
        the markup is refused). An edit Telegram calls unchanged returns None."""
        refused = "the edit" if what == "edit" else "the message"
        for attempt in range(1, self.settings.max_retry_attempts + 1):
            try:
                return await call()
            except RetryAfter as exc:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    wait = _seconds(exc.retry_after)
                if wait > self.settings.max_retry_wait:
                    raise SendError(f"telegram asks to wait {wait:.0f} s, over the limit") from None
                if what == "send":
                    log.info("telegram: rate limited, retrying in %.1f s (attempt %d)", wait, attempt)
                await asyncio.sleep(wait)
            except (BadRequest, Forbidden) as exc:
                if what == "edit" and isinstance(exc, BadRequest) and _unchanged(exc.message):
                    return None
                if parse_mode and isinstance(exc, BadRequest) and _refuses_markup(exc.message):
                    raise _UnparsableMarkup from None
                raise SendError(f"telegram refused {refused}: {exc.message}") from None
            except NetworkError as exc:
                log.warning("telegram: %s failed (%s), attempt %d", what, type(exc).__name__, attempt)
                await asyncio.sleep(min(2.0**attempt * 0.25, self.settings.max_retry_wait))
            except TelegramError as exc:
                raise SendError(f"telegram error: {type(exc).__name__}") from None
        raise SendError(f"telegram {what} failed after {self.settings.max_retry_attempts} attempts")
