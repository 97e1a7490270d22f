"""Telegram's webhook mode: the endpoint, answered only once the update has been handled, and the adapter's
webhook (served, registered with Telegram, watched).

python-telegram-bot's own webhook server answers 200 as soon as an update is queued, so an update whose worker
dies mid-turn is confirmed and gone. Here the response waits for the handler: 200 when the update was handled
(or is not one we handle), 503 when this worker could not take it (shutting down), which makes Telegram — or
the load balancer in front of several workers — deliver it again, to this worker or another. Two deliveries
of one update are made harmless by the gateway's de-duplication, so this gives exactly-once handling.

`TelegramWebhookMode` is the webhook part of `adapters.telegram_adapter.TelegramAdapter` (mixed into it): the
webhook is supervised (:mod:`adapters.supervise`), and a port that cannot be bound, a setWebhook Telegram refuses
or cannot be reached for, a server that stopped serving, and a webhook Telegram no longer has for the bot
(another process called deleteWebhook or set its own) are logged, retried with backoff, and after
``backoff.max_failures`` in a row end the process's wait. Telegram's own report that it cannot deliver to the
webhook (getWebhookInfo's last error) is logged once per new error.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from telegram import Update
from telegram.error import InvalidToken
from telegram.ext import Application

from adapters.base import Adapter, Inbound
from adapters.listen import bind
from adapters.supervise import Supervisor, retry_start
from adapters.telegram_settings import TelegramSettings

__all__ = ["TelegramWebhookMode", "WebhookServer"]

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
# Telegram's own limit for an update is far below this; a bigger body is not an update.
MAX_BODY = 8 * 1024 * 1024

UpdateHandler = Callable[[dict[str, Any]], Awaitable[bool]]


class WebhookServer:
    """``POST /<path>`` on ``listen``:``port``; ``handle(update)`` returns False for "deliver it again"."""

    def __init__(self, *, listen: str, port: int, path: str, secret: str, handle: UpdateHandler) -> None:
        self.listen = listen
        self.port = port
        self.path = "/" + path.strip("/")
        self._secret = secret.encode()
        self._handle = handle
        self._runner: web.AppRunner | None = None

    @property
    def serving(self) -> bool:
        """Whether the port is bound and accepting connections."""
        return self._runner is not None and bool(self._runner.addresses)

    async def start(self) -> None:
        """Bind and serve; OSError (naming the address) when the port cannot be bound. Started again after it
        stopped serving, it binds anew."""
        await self.aclose()
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(self.path, self._post)
        self._runner = await bind(app, self.listen, self.port, "telegram webhook")

    async def aclose(self) -> None:
        """Stop serving; requests in flight finish first (their turns answer). Idempotent."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, self._secret):
            return web.Response(status=403)
        try:
            update = await request.json()
        except ValueError:
            log.warning("telegram webhook: body is not JSON; dropped")
            return web.Response(status=200)  # a retry would be just as unreadable
        if not isinstance(update, dict):
            return web.Response(status=200)
        if await self._handle(update):
            return web.Response(status=200)
        return web.Response(status=503, headers={"Retry-After": "1"})


class TelegramWebhookMode(Adapter):
    """Webhook mode for `TelegramAdapter` (mixed into it), over the adapter's PTB application."""

    settings: TelegramSettings
    app: Application[Any, Any, Any, Any, Any, Any]
    _supervisor: Supervisor | None
    _webhook: WebhookServer | None
    _webhook_set: bool  # setWebhook succeeded since the server was last (re)bound
    _webhook_error: str | None  # Telegram's last delivery error, as last logged
    _read_update: Callable[[Update], Awaitable[Inbound | None]]

    async def _start_webhook(self) -> None:
        """Serve the webhook and register it with Telegram (retried with backoff; ConnectionError when it keeps
        failing), then supervise it."""
        assert self.settings.webhook_url and self.settings.webhook_secret  # checked by TelegramSettings
        self._webhook = WebhookServer(listen=self.settings.webhook_listen, port=self.settings.webhook_port,
                                      path=self.settings.webhook_path, secret=self.settings.webhook_secret,
                                      handle=self._webhook_update)
        try:
            await retry_start(self._serve_webhook, what="telegram: webhook", backoff=self.settings.backoff,
                              fatal=(InvalidToken,))
        except ConnectionError:
            await self._webhook.aclose()
            raise
        self._supervisor = Supervisor("telegram webhook", self.settings.backoff, fatal=(InvalidToken,))
        self._supervisor.watch(self._watch_webhook)

    async def _serve_webhook(self) -> None:
        """Bind the webhook port if it is not serving, then (re)register the webhook with Telegram."""
        webhook = self._webhook
        assert webhook is not None and self.settings.webhook_url
        if not webhook.serving:
            self._webhook_set = False
            await webhook.start()
        if not self._webhook_set:
            await self.app.bot.set_webhook(self.settings.webhook_url, secret_token=self.settings.webhook_secret)
            self._webhook_set = True

    async def _watch_webhook(self) -> None:
        """One supervised run of webhook mode: served and registered, then watched until the server stops
        serving or Telegram no longer has our webhook for the bot (raises then; the next run serves and
        registers it again)."""
        webhook = self._webhook
        assert webhook is not None
        await self._serve_webhook()
        checked = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.watch_interval)
            if not webhook.serving:
                raise ConnectionError("the webhook server stopped serving")
            if time.monotonic() - checked < self.settings.webhook_check_seconds:
                continue
            checked = time.monotonic()
            info = await self.app.bot.get_webhook_info()
            if info.url != self.settings.webhook_url:
                self._webhook_set = False
                raise ConnectionError(f"Telegram no longer has this webhook for the bot (it has "
                                      f"{'another URL' if info.url else 'none'})")
            if info.last_error_message and info.last_error_message != self._webhook_error:
                log.warning("telegram: Telegram reports it cannot deliver to the webhook: %s",
                            info.last_error_message)
            self._webhook_error = info.last_error_message

    async def _webhook_update(self, data: dict[str, Any]) -> bool:
        """Handle one webhook update to the end; False when this worker cannot (Telegram delivers it again)."""
        handler = self._handler
        if handler is None:
            return False
        try:
            update = Update.de_json(data, self.app.bot)
        except Exception as exc:
            log.warning("telegram: skipping malformed update %s (%s)", data.get("update_id"), type(exc).__name__)
            return True
        inbound = await self._read_update(update)
        if inbound is None:
            return True
        try:
            await handler(inbound)
        except Exception as exc:
            log.warning("telegram: update %s not handled here (%s); Telegram will deliver it again",
                        update.update_id, type(exc).__name__)
            return False
        return True
