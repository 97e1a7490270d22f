"""Telegram adapter on python-telegram-bot: private chats, groups, supergroups, forum topics, channels.

Long polling by default (``async with``-style lifecycle, never ``run_polling``, which would own the event
loop): a fetched batch is kept in the gateway's inbox (``keep``, one write) before the next getUpdates confirms
it (:mod:`adapters.telegram_handoff`), so a worker that dies mid-turn leaves its messages to another worker.
Webhook mode with a secret token by configuration, answered only once an update has been handled
(:mod:`adapters.telegram_webhook`), so any worker behind a load balancer can take any update and one that
dies mid-turn gets it delivered again; ``api_base_url`` points at a local Bot API server.

Both modes are supervised (:mod:`adapters.supervise`): a long poll silent for ``stall_seconds`` is restarted; a
webhook port that cannot be bound, a setWebhook Telegram refuses or cannot be reached for, a webhook server
that stopped serving, and a webhook Telegram no longer has for the bot (another process called deleteWebhook or
set its own) are logged, retried with backoff, and after ``backoff.max_failures`` in a row end the process's
wait (exit 1, so the service manager restarts it). Telegram's own report that it cannot deliver to the webhook
(getWebhookInfo's last error) is logged once per new error.

Edits (``edited_message``, ``edited_channel_post``) become edit `Inbound` events, keyed by their update id.
The Bot API never reports deleted messages: a message deleted in Telegram stays in the bot's history (users
can still erase theirs with ``/forget me``).

Privacy mode: with BotFather's privacy mode on (the default), Telegram delivers only commands, @mentions
and replies to the bot in groups. Turn it off (``/setprivacy``) for unaddressed chatter to reach the
callback as context.

Replies: the model writes Markdown, which Telegram does not render, so by default (``parse_mode="html"``) each
split chunk is converted to Telegram HTML (:mod:`adapters.telegram_format`) and sent with parse mode HTML.
Should Telegram still refuse a chunk's markup ("can't parse entities"), that chunk goes again as plain text,
so a reply is never lost. ``parse_mode="plain"`` sends the Markdown as it is.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import re
import time
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

import httpx
from telegram import Message, MessageEntity, ReplyParameters, Update
from telegram.constants import ChatMemberStatus
from telegram.error import BadRequest, Forbidden, InvalidToken, NetworkError, RetryAfter, TelegramError
from telegram.ext import Application, ContextTypes, TypeHandler
from telegram.request import HTTPXRequest, RequestData

# RequestData's own constructor takes these; PTB does not re-export the class (tests/adapters cover the use).
from telegram.request._requestparameter import RequestParameter

from adapters.base import (
    Adapter,
    Attachment,
    ChatRef,
    ChatType,
    Inbound,
    InboundHandler,
    KeepHandler,
    Outbound,
    SendError,
    keep_alive,
    parse_command,
    split_message,
    storable_text,
    utf16_len,
)
from adapters.live import ChatThrottle, EditedReply, LiveRateLimited
from adapters.logsafe import redact_in_logs
from adapters.supervise import Backoff, Supervisor, describe, retry_start
from adapters.telegram_format import markdown_to_telegram_html
from adapters.telegram_handoff import Batch, UpdateHandOff
from adapters.telegram_webhook import WebhookServer

log = logging.getLogger(__name__)

TELEGRAM_LIMIT = 4096
_ANONYMOUS_ADMIN_BOT_ID = 1087968824  # "GroupAnonymousBot" speaks for anonymous group admins
_ADMIN_STATUSES = {ChatMemberStatus.ADMINISTRATOR, ChatMemberStatus.OWNER}
_CHAT_TYPES: dict[str, ChatType] = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}


@dataclass(frozen=True)
class TelegramSettings:
    """Everything the Telegram adapter needs; the config layer maps its settings onto this."""

    token: str = field(repr=False)
    api_base_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = 8443
    webhook_path: str = "telegram"
    webhook_secret: str | None = field(default=None, repr=False)
    check_chat_admins: bool = False
    admin_cache_seconds: float = 60.0
    allow_bots: bool = False
    poll_timeout: int = 30
    typing_interval: float = 4.0
    max_retry_attempts: int = 5
    max_retry_wait: float = 60.0
    max_inbound_chars: int = 16_000
    max_attachment_bytes: int = 10_000_000
    drain_seconds: float = 30.0
    parse_mode: Literal["html", "plain"] = "html"
    # False: `start` connects without polling; the gateway calls `start_polling` when this worker holds the
    # polling lease (several workers, one poller).
    poll_on_start: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    # Polling that fetched nothing (not even an empty answer) for this long is restarted.
    stall_seconds: float = 150.0
    watch_interval: float = 5.0
    # How often webhook mode asks Telegram whether the bot's webhook is still ours (getWebhookInfo).
    webhook_check_seconds: float = 60.0
    # Show answers as they grow by editing one message, at most once per ``edit_interval`` s per chat.
    streaming: bool = True
    edit_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.mode == "webhook" and not (self.webhook_url and self.webhook_secret):
            raise ValueError("telegram webhook mode needs webhook_url and webhook_secret")


class _UnparsableMarkup(Exception):
    """Telegram could not parse the entities of a formatted message (its 400 "can't parse entities")."""


class _SkippingUpdatesRequest(HTTPXRequest):
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


class TelegramAdapter(Adapter):
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
        self._downloads: httpx.AsyncClient | None = None
        root = (settings.api_base_url or "https://api.telegram.org").rstrip("/")
        self.handoff = UpdateHandOff()
        self._updates_request = _SkippingUpdatesRequest(read_timeout=settings.poll_timeout + 10)
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
        self._admin_cache: OrderedDict[tuple[int, int], tuple[float, bool]] = OrderedDict()
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
        if self._downloads is not None:
            await self._downloads.aclose()

    def typing(self, chat: ChatRef | Inbound) -> contextlib.AbstractAsyncContextManager[None]:
        """sendChatAction "typing" now and every ``typing_interval`` s (Telegram shows it ~5 s)."""
        ref = chat.chat if isinstance(chat, Inbound) else chat
        thread = int(ref.thread_id) if ref.thread_id else None
        return keep_alive(
            lambda: self.app.bot.send_chat_action(int(ref.chat_id), "typing", message_thread_id=thread),
            self.settings.typing_interval,
            "telegram typing",
        )

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

    # -- inbound ---------------------------------------------------------------------------------
    async def _on_error(self, update: object, context: ContextTypes.DEFAULT_TYPE) -> None:
        log.error("telegram: error while handling an update: %r", context.error)

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
        user = message.from_user
        if user is not None and user.is_bot and not self.settings.allow_bots and user.id != _ANONYMOUS_ADMIN_BOT_ID:
            return None
        if message.chat is None or not isinstance(message.chat.id, int):
            raise TypeError("no chat, or a chat id that is not a number")
        text = message.text or message.caption or ""
        if not isinstance(text, str):
            raise TypeError(f"text is {type(text).__name__}, not text")
        if utf16_len(text) > self.settings.max_inbound_chars:
            log.warning("telegram: skipping message %s of %d units", message.message_id, utf16_len(text))
            return None
        attachments = await self._attachments(message)
        if not text.strip() and not attachments:
            return None
        chat_type = _CHAT_TYPES.get(message.chat.type, "group")
        thread_id = str(message.message_thread_id) if message.is_topic_message and message.message_thread_id else None
        if thread_id is not None:
            chat_type = "thread"
        mentions_bot, clean = self._strip_mentions(message, text)
        command = parse_command(clean, self.bot_username)
        sender = message.sender_chat if user is None or user.id == _ANONYMOUS_ADMIN_BOT_ID else None
        user_id = str(sender.id) if sender else str(user.id) if user else ""
        user_name = (sender.title if sender else user.full_name if user else "") or user_id
        return Inbound(
            platform="telegram",
            chat_id=str(message.chat.id),
            chat_type=chat_type,
            thread_id=thread_id,
            user_id=user_id,
            user_name=user_name,
            message_id=str(message.message_id),
            text=clean,
            attachments=attachments,
            mentions_bot=mentions_bot,
            reply_to_bot=self._replies_to_bot(message),
            is_command=command is not None,
            command=command[0] if command else None,
            command_args=command[1] if command else "",
            is_admin_hint=await self._admin_hint(message, command is not None),
            received_at=message.date,
        )

    def _strip_mentions(self, message: Message, text: str) -> tuple[bool, str]:
        """Whether the bot is @mentioned, and the text without those mentions."""
        parse = message.parse_caption_entities if message.caption else message.parse_entities
        entities = parse([MessageEntity.MENTION, MessageEntity.TEXT_MENTION])
        ours = [
            value for entity, value in entities.items()
            if (entity.type == MessageEntity.MENTION and value.lower() == f"@{self.bot_username}".lower())
            or (entity.user is not None and entity.user.id == self.app.bot.id)
        ]
        for value in ours:
            text = text.replace(value, " ", 1)
        return bool(ours), re.sub(r"[ \t]{2,}", " ", text).strip() if ours else text

    def _replies_to_bot(self, message: Message) -> bool:
        replied = message.reply_to_message
        # In forum topics every message "replies" to the topic's creation message; that is not addressing.
        if replied is None or replied.forum_topic_created is not None or replied.from_user is None:
            return False
        return replied.from_user.id == self.app.bot.id

    async def _admin_hint(self, message: Message, is_command: bool) -> bool:
        """Chat admin status (only with ``check_chat_admins``), asked only for commands in groups and cached
        for ``admin_cache_seconds``."""
        if not self.settings.check_chat_admins:
            return False
        if message.sender_chat is not None and message.sender_chat.id == message.chat.id:
            return True  # an anonymous group admin (or the channel itself)
        user = message.from_user
        if not (is_command and user and message.chat.type != "private"):
            return False
        key = (message.chat.id, user.id)
        cached = self._admin_cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            member = await self.app.bot.get_chat_member(message.chat.id, user.id)
        except TelegramError as exc:
            log.warning("telegram: admin check failed (%s)", type(exc).__name__)
            return False
        is_admin = member.status in _ADMIN_STATUSES
        self._admin_cache[key] = (time.monotonic() + self.settings.admin_cache_seconds, is_admin)
        self._admin_cache.move_to_end(key)
        while len(self._admin_cache) > 1024:
            self._admin_cache.popitem(last=False)
        return is_admin

    async def _attachments(self, message: Message) -> tuple[Attachment, ...]:
        """The largest photo size, downloaded into a data URL (file URLs would carry the bot token).

        The cap is enforced on the bytes actually read: a photo may declare no size, or a false one.
        """
        if not message.photo:
            return ()
        photo = message.photo[-1]
        cap = self.settings.max_attachment_bytes
        if photo.file_size and photo.file_size > cap:
            log.info("telegram: photo of %d bytes over the limit, not attached", photo.file_size)
            return ()
        try:
            file = await photo.get_file()
            data = await self._download(str(file.file_path), cap)
        except (TelegramError, httpx.HTTPError) as exc:
            log.warning("telegram: photo download failed (%s), message kept without it", type(exc).__name__)
            return ()
        if data is None:
            log.info("telegram: photo over %d bytes while downloading, not attached", cap)
            return ()
        encoded = base64.b64encode(data).decode()
        return (Attachment(kind="image", mime="image/jpeg", size=len(data), name=f"{photo.file_unique_id}.jpg",
                           data_url=f"data:image/jpeg;base64,{encoded}"),)

    async def _download(self, url: str, cap: int) -> bytes | None:
        """The body at ``url``, or None as soon as more than ``cap`` bytes have arrived."""
        if self._downloads is None:
            self._downloads = httpx.AsyncClient(timeout=30.0)
        received = bytearray()
        async with self._downloads.stream("GET", url) as response:
            response.raise_for_status()
            async for chunk in response.aiter_bytes():
                received += chunk
                if len(received) > cap:
                    return None
        return bytes(received)
