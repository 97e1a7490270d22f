"""Telegram long polling: the getUpdates transport, and the adapter's polling (started, stopped, watched).

PTB polls with an ``async with``-style lifecycle here, never ``run_polling``, which would own the event loop. Its
getUpdates calls go through `SkippingUpdatesRequest`, which holds back the call that would confirm a fetched
batch until the batch is settled (:mod:`adapters.telegram_handoff`), so a worker that dies mid-turn leaves its
messages to another worker. `TelegramPolling` is the polling part of `adapters.telegram_adapter.TelegramAdapter`
(mixed into it): polling runs under supervision (:mod:`adapters.supervise`), and a long poll silent for
``stall_seconds`` is restarted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from telegram import Update
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application
from telegram.request import HTTPXRequest, RequestData

# RequestData's own constructor takes these; PTB does not re-export the class (tests/adapters cover the use).
from telegram.request._requestparameter import RequestParameter

from adapters.base import Adapter, storable_text
from adapters.supervise import Supervisor, describe
from adapters.telegram_handoff import UpdateHandOff
from adapters.telegram_settings import TelegramSettings

__all__ = ["SkippingUpdatesRequest", "TelegramPolling"]

log = logging.getLogger(__name__)


class SkippingUpdatesRequest(HTTPXRequest):
    """getUpdates transport that replaces updates PTB cannot parse by empty ones.

    PTB parses a whole getUpdates batch at once; one malformed update makes it drop the batch without
    advancing the offset, so the same batch would be fetched forever. Emptying the bad update lets the
    offset move on and every other update through.

    It also holds back the next getUpdates (which confirms the last batch) until ``handoff`` says the batch
    is settled: kept in the gateway's inbox and handed on; and it never asks past an update the hand-off held
    back (not kept anywhere), so Telegram sends that one again.
    """

    handoff: UpdateHandOff | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_answer = float("-inf")  # when a long poll last answered 200 (the polling watch reads it)
        self.polling = False  # off while PTB stops polling: its closing getUpdates call is no sign of health
        self.held = False

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        lowered = False
        if self.handoff is not None:
            self.held = True  # waiting on our own gateway is no stall of Telegram's
            try:
                await self.handoff.wait(stopping=not self.polling)
            finally:
                self.held = False
            kwargs["request_data"], lowered = _confined(kwargs.get("request_data"), self.handoff)
        code, payload = await super().do_request(*args, **kwargs)
        if code != 200:
            return code, payload
        # Not polling: PTB's closing call (or a poll answered as it stops), whose updates PTB drops unhandled.
        handed = self.handoff if self.polling else None
        if handed is not None:
            self.last_answer = time.monotonic()
            if lowered:
                handed.resent()
        try:
            body = json.loads(payload)
        except ValueError:
            return code, payload
        if isinstance(body, dict) and isinstance(body.get("result"), list):
            body["result"] = [_parseable(_storable(item)) for item in body["result"] if isinstance(item, dict)]
            payload = json.dumps(body).encode()
            if handed is not None:
                handed.fetched(u["update_id"] for u in body["result"] if isinstance(u.get("update_id"), int))
        return code, payload


def _confined(request: RequestData | None, handoff: UpdateHandOff) -> tuple[RequestData | None, bool]:
    """``request`` asking from the first update ``handoff`` held back, if its offset would confirm that update;
    and whether it was lowered."""
    parameters = request.parameters if request is not None else {}
    offset = parameters.get("offset")
    if not isinstance(offset, int) or (confined := handoff.confine(offset)) == offset:
        return request, False
    log.info("telegram: asking for updates from %d again (held back, kept nowhere yet)", confined)
    return RequestData([RequestParameter.from_input(name, confined if name == "offset" else value)
                        for name, value in parameters.items()]), True


def _storable(value: Any) -> Any:
    """Every string inside an update made storable (NUL, lone surrogates), before PTB parses entities."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {key: _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def _parseable(update: dict[str, Any]) -> dict[str, Any]:
    try:
        Update.de_json(update, None)
    except Exception as exc:
        log.warning("telegram: skipping malformed update %s (%s)", update.get("update_id"), type(exc).__name__)
        return {"update_id": update.get("update_id")}
    return update


class TelegramPolling(Adapter):
    """Long polling for `TelegramAdapter` (mixed into it), over the adapter's PTB application and transport."""

    settings: TelegramSettings
    app: Application[Any, Any, Any, Any, Any, Any]
    _updates_request: SkippingUpdatesRequest
    _supervisor: Supervisor | None
    _polling_since: float
    _running: bool

    @property
    def polling(self) -> bool:
        """Whether this adapter is fetching updates by long polling right now."""
        updater = self.app.updater
        return self.settings.mode == "polling" and updater is not None and updater.running

    async def start_polling(self) -> None:
        """Begin long polling under supervision (idempotent); what Telegram holds for the bot arrives from its
        offset on."""
        updater = self.app.updater
        assert updater is not None  # the builder always makes one
        if updater.running or self._handler is None:
            return
        await self._start_polling()
        self._supervisor = Supervisor("telegram", self.settings.backoff, fatal=(InvalidToken,),
                                      progressed=lambda started: self._updates_request.last_answer > started)
        self._supervisor.watch(self._watch_polling)
        log.info("telegram: polling started")

    async def stop_polling(self) -> None:
        """Stop fetching updates (idempotent); the unconfirmed ones stay with Telegram for the next poller."""
        updater = self.app.updater
        was_polling = updater is not None and updater.running
        if self._supervisor is not None:
            await self._supervisor.stop()
            self._supervisor = None
        await self._stop_polling()
        if was_polling:
            log.info("telegram: polling stopped")

    async def _start_polling(self) -> None:
        updater = self.app.updater
        assert updater is not None
        self._polling_since = time.monotonic()
        self._updates_request.polling = True
        await updater.start_polling(poll_interval=0.0, timeout=self.settings.poll_timeout,
                                    error_callback=self._polling_error)

    async def _stop_polling(self) -> None:
        updater = self.app.updater
        self._updates_request.polling = False
        if updater is not None and updater.running:
            await updater.stop()  # confirms exactly what was fetched

    def _polling_error(self, error: TelegramError) -> None:
        # PTB retries getUpdates itself; one line per failure instead of its traceback.
        log.warning("telegram: getUpdates failed (%s); PTB retries", describe(error))

    async def _watch_polling(self) -> None:
        """One supervised run of long polling: returns when PTB's polling has stopped, raises when getUpdates
        has not answered for ``stall_seconds``; the polling is (re)started here after a loss."""
        updater = self.app.updater
        assert updater is not None
        if not updater.running:
            await self._start_polling()
        while updater.running:
            await asyncio.sleep(self.settings.watch_interval)
            silent = time.monotonic() - max(self._updates_request.last_answer, self._polling_since)
            if silent > self.settings.stall_seconds and not self._updates_request.held:
                await self._stop_polling()
                raise ConnectionError(f"getUpdates has not answered for {silent:.1f} s")
        if self._running:
            raise ConnectionError("polling stopped")
