"""Telegram adapter on python-telegram-bot: private chats, groups, supergroups, forum topics, channels.

The adapter is put together from its parts, one module each: long polling by default
(:mod:`adapters.telegram_polling`): a fetched batch is kept in the gateway's inbox (``keep``, one write) before
the next getUpdates confirms it (:mod:`adapters.telegram_handoff`), so a worker that dies mid-turn leaves its
messages to another worker. Webhook mode with a secret token by configuration (:mod:`adapters.telegram_webhook`),
answered only once an update has been handled, so any worker behind a load balancer can take any update and one
that dies mid-turn gets it delivered again; ``api_base_url`` points at a local Bot API server. Messages are read
into `Inbound` events by :mod:`adapters.telegram_inbound`; replies go out through :mod:`adapters.telegram_send`
(Telegram HTML from the model's Markdown, :mod:`adapters.telegram_format`). This module holds the lifecycle
(log in, start, stop) and the intake: an update read, kept and handed on.

Both modes are supervised (:mod:`adapters.supervise`): what cannot be restarted after ``backoff.max_failures``
failures in a row ends the process's wait (exit 1, so the service manager restarts it).

Edits (``edited_message``, ``edited_channel_post``) become edit `Inbound` events, keyed by their update id.
The Bot API never reports deleted messages: a message deleted in Telegram stays in the bot's history (users
can still erase theirs with ``/forget me``).

Privacy mode: with BotFather's privacy mode on (the default), Telegram delivers only commands, @mentions
and replies to the bot in groups. Turn it off (``/setprivacy``) for unaddressed chatter to reach the
callback as context.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from typing import Any

from telegram import Message, Update
from telegram.error import InvalidToken
from telegram.ext import Application, ContextTypes, TypeHandler

from adapters.base import ChatRef, Inbound, InboundHandler, KeepHandler, keep_alive, utf16_len
from adapters.live import ChatThrottle
from adapters.logsafe import redact_in_logs
from adapters.supervise import Supervisor, describe, retry_start
from adapters.telegram_handoff import Batch, UpdateHandOff
from adapters.telegram_inbound import TelegramInbound
from adapters.telegram_polling import SkippingUpdatesRequest, TelegramPolling
from adapters.telegram_send import TelegramSending
from adapters.telegram_settings import TelegramSettings
from adapters.telegram_webhook import TelegramWebhookMode, WebhookServer

__all__ = ["TELEGRAM_LIMIT", "TelegramAdapter", "TelegramSettings"]

log = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096


class TelegramAdapter(TelegramPolling, TelegramWebhookMode, TelegramSending):
    """Telegram via python-telegram-bot; see the module docstring for the modes."""

    name = "telegram"
    limit = TELEGRAM_LIMIT
    length = staticmethod(utf16_len)

    def __init__(self, settings: TelegramSettings) -> None:
        super().__init__()
        self.settings = settings
        redact_in_logs(settings.token, "<telegram-token>")
        self._supervisor: Supervisor | None = None
        self._polling_since = 0.0
        root = (settings.api_base_url or "https://api.telegram.org").rstrip("/")
        self.handoff = UpdateHandOff()
        self._updates_request = SkippingUpdatesRequest(read_timeout=settings.poll_timeout + 10)
        self._updates_request.handoff = self.handoff
        self.app: Application[Any, Any, Any, Any, Any, Any] = (
            Application.builder()
            .token(settings.token)
            .base_url(f"{root}/bot")
            .base_file_url(f"{root}/file/bot")
            .get_updates_request(self._updates_request)
            .build()
        )
        self.app.add_handler(TypeHandler(Update, self._on_update))
        self.app.add_error_handler(self._on_error)
        self.inbound = TelegramInbound(self.app.bot, settings)
        self._running = False
        self._webhook: WebhookServer | None = None
        self._webhook_set = False  # setWebhook succeeded since the server was last (re)bound
        self._webhook_error: str | None = None  # Telegram's last delivery error, as last logged
        self._throttle = ChatThrottle(settings.edit_interval)

    @property
    def bot_username(self) -> str:
        """The bot's @username (known after start)."""
        return self.app.bot.username

    async def start(self, on_message: InboundHandler) -> None:
        """Log in (getMe, retrying an unreachable Telegram with backoff), then poll under supervision or serve
        the webhook; returns once updates are flowing. A rejected token raises ConnectionError at once."""
        self._handler = on_message
        try:
            await retry_start(self.app.initialize, what="telegram: getMe", backoff=self.settings.backoff,
                              fatal=(InvalidToken,))
            rejected = False
        except InvalidToken:
            rejected = True
        if rejected:  # raised outside the handler: PTB's own error quotes the whole token
            raise ConnectionError("telegram rejected the bot token (check telegram.token)")
        await self.app.start()
        updater = self.app.updater
        assert updater is not None  # the builder always makes one
        if self.settings.mode == "webhook":
            await self._start_webhook()
        elif self.settings.poll_on_start:
            await self.start_polling()
        self._running = True
        log.info("telegram: connected as @%s (%s)", self.bot_username, self.settings.mode)

    @property
    def connected(self) -> bool:
        """Logged in and not stopped (a worker waiting for the polling lease counts as connected)."""
        return self._running

    async def wait_failed(self) -> BaseException:
        """The cause, once polling or the webhook cannot be restarted (see `adapters.supervise`)."""
        if self._supervisor is None:
            return await super().wait_failed()
        return await self._supervisor.failed

    async def stop_receiving(self) -> None:
        """Stop fetching updates (Telegram keeps the unfetched ones for the next start) and hand on the
        fetched ones; replies can still be sent."""
        if self._supervisor is not None:
            await self._supervisor.stop()
        await self._stop_polling()
        await self.app.update_queue.join()
        await super().stop_receiving()

    async def stop(self) -> None:
        """Stop receiving, let in-flight handlers send their replies, then shut down."""
        if not self._running:
            return
        self._running = False
        if self._supervisor is not None:
            await self._supervisor.stop()
        await self._stop_polling()
        if self._webhook is not None:
            self._handler = None  # new webhook deliveries get 503: Telegram sends them again, elsewhere
            await self._webhook.aclose()
        await self._drain(self.settings.drain_seconds)
        await self.app.stop()
        await self.app.shutdown()
        await self.inbound.aclose()

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        """sendChatAction "typing" now and every ``typing_interval`` s (Telegram shows it ~5 s)."""
        ref = chat.chat if isinstance(chat, Inbound) else chat
        thread = int(ref.thread_id) if ref.thread_id else None
        return keep_alive(
            lambda: self.app.bot.send_chat_action(int(ref.chat_id), "typing", message_thread_id=thread),
            self.settings.typing_interval,
            "telegram typing",
        )

    # -- inbound ---------------------------------------------------------------------------------
    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram: error while handling an update: %r", context.error)

    async def _on_update(self, update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        # PTB runs these one at a time, in update order: the last update of a batch settles the batch.
        inbound: Inbound | None = None
        try:
            inbound = await self._read_update(update)
        finally:
            batch = self.handoff.read(update.update_id, inbound)
        if batch is not None:
            await self._hand_on(batch)

    async def _hand_on(self, batch: Batch) -> None:
        """Keep the batch's messages in the gateway's inbox, then hand them on; only then may Telegram forget
        them (the next getUpdates confirms them). A batch polling stopped waiting for before it was kept is
        held back: not handed on, never confirmed, sent again by Telegram."""
        messages, keep = batch.inbounds, self.keep
        kept = False
        try:
            kept = not messages or keep is None or await self._keep(keep, messages)
        finally:
            if kept:
                for inbound in messages:
                    self._dispatch(inbound)
                self.handoff.settled(batch)
            else:
                self.handoff.hold_back(batch)

    async def _keep(self, keep: KeepHandler, messages: list[Inbound]) -> bool:
        """``keep`` the messages, retrying with backoff for as long as this worker polls (Telegram holds them
        meanwhile); False when polling stopped first."""
        failures = 0
        while True:
            try:
                await keep(messages)
                return True
            except Exception as exc:
                failures += 1
                if not self._updates_request.polling:
                    log.warning("telegram: %d message(s) not kept in the inbox (%s) and polling stopped; not "
                                "confirmed, Telegram sends them again", len(messages), describe(exc))
                    return False
            await asyncio.sleep(min(2.0, 0.25 * 2 ** (failures - 1)))

    async def _read_update(self, update: Update) -> Inbound | None:
        """The message or edit an update carries, or None (skipped)."""
        message = update.message or update.channel_post
        edited = update.edited_message or update.edited_channel_post
        if message is None and edited is None:
            log.debug("telegram: skipping unsupported update %s", update.update_id)
            return None
        try:
            inbound = await self._to_inbound(message or edited)
        except Exception as exc:
            log.warning("telegram: skipping unreadable update %s (%s)", update.update_id, describe(exc))
            return None
        if inbound is None or message is not None:
            return inbound
        # Each edit comes in an update of its own, whose id a redelivery keeps.
        return dataclasses.replace(inbound, kind="edit", edit_id=str(update.update_id),
                                   received_at=edited.edit_date or inbound.received_at)

    async def _to_inbound(self, message: Message) -> Inbound | None:
        """The message as an Inbound, or None (see `adapters.telegram_inbound`)."""
        return await self.inbound.message(message)
