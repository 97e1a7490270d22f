"""Telegram's webhook endpoint, answered only once the update has been handled.

python-telegram-bot's own webhook server answers 200 as soon as an update is queued, so an update whose worker
dies mid-turn is confirmed and gone. Here the response waits for the handler: 200 when the update was handled
(or is not one we handle), 503 when this worker could not take it (shutting down), which makes Telegram — or
the load balancer in front of several workers — deliver it again, to this worker or another. Two deliveries
of one update are made harmless by the gateway's de-duplication, so this gives exactly-once handling.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adapters.listen import bind

__all__ = ["WebhookServer"]

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
