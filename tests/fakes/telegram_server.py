"""A fake Telegram Bot API on 127.0.0.1 that the real python-telegram-bot client talks to.

Serves ``/bot<token>/<method>`` (getMe, getUpdates long poll with offset, sendMessage, sendChatAction,
editMessageText, setWebhook, deleteWebhook, getWebhookInfo, getChatMember, getFile) and
``/file/bot<token>/<path>``. The bot's webhook is ``webhook_url`` (set and deleted by the bot, or by the test
as another process would); ``webhook_error`` is what getWebhookInfo reports as its last delivery error.
Tests inject updates with :meth:`FakeTelegram.inject_message` / :meth:`inject_update`, make a method
answer 429 with :meth:`fail_next`, and read what the bot sent from ``sent_messages`` and ``chat_actions``.
Like the real API it refuses empty texts and texts over 4,096 UTF-16 units (for ``parse_mode="HTML"``, of the
text after parsing), and refuses HTML it cannot parse with Telegram's 400 "can't parse entities" (see
:func:`telegram_html_text`); ``fail_next(..., parse_error=True)`` makes it refuse the next formatted text.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.loopback import serve_on_loopback

BOT_ID = 999_000_111
TEXT_LIMIT = 4096


def utf16_units(text: str) -> int:
    """Telegram's length unit (kept here so the fake does not depend on the code under test)."""
    return len(text.encode("utf-16-le")) // 2


@dataclass
class SentMessage:
    """One message the bot sent, as the fake received it."""

    message_id: int
    chat_id: str
    text: str
    message_thread_id: int | None
    reply_to_message_id: int | None
    at: float
    parse_mode: str | None = None
    visible_text: str = ""  # what the user sees: ``text`` itself, or the text of its HTML


@dataclass
class _Failure:
    times: int
    retry_after: int
    parse_error: bool = False


@dataclass
class FakeTelegram:
    """The fake server; ``await start()`` / ``await stop()``, or use the ``fake_telegram`` fixture."""

    token: str = "123456:FAKE-telegram-token"
    bot_username: str = "testbot"
    sent_messages: list[SentMessage] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    chat_actions: list[dict[str, Any]] = field(default_factory=list)
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    chat_admins: set[tuple[int, int]] = field(default_factory=set)
    files: dict[str, bytes] = field(default_factory=dict)
    blocked_chats: set[str] = field(default_factory=set)
    # sendMessage of a text containing one of these never answers (the worker is stuck mid-send; a crash
    # test kills it there) and is not recorded as sent.
    stall_texts: set[str] = field(default_factory=set)
    # False: photos and getFile carry no file_size (Telegram may omit it), so only the bytes tell the size.
    declare_file_sizes: bool = True
    # Messages deleted in the chat: editing them answers 400 "message to edit not found".
    deleted_messages: set[int] = field(default_factory=set)
    webhook_url: str = ""
    webhook_error: str = ""
    port: int = 0

    def __post_init__(self) -> None:
        self._updates: list[dict[str, Any]] = []
        self._next_update_id = 1
        self._next_message_id = 1000
        self._new_update = asyncio.Event()
        self._stopping = asyncio.Event()
        self._polls_flow = asyncio.Event()
        self._polls_flow.set()
        self._failures: dict[str, _Failure] = {}
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Bind a free port on 127.0.0.1 and serve."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        self._runner, self.port = await serve_on_loopback(app)

    async def stop(self) -> None:
        """Stop serving (wakes any pending long poll and stalled send)."""
        self._new_update.set()
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def api_root(self) -> str:
        """What a local Bot API server's address looks like: ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    # -- scripting -------------------------------------------------------------------------------
    @property
    def stall_updates(self) -> bool:
        """True: long polls (getUpdates with a timeout) do not answer (a stalled connection) until set False."""
        return not self._polls_flow.is_set()

    @stall_updates.setter
    def stall_updates(self, stalled: bool) -> None:
        if stalled:
            self._polls_flow.clear()
        else:
            self._polls_flow.set()

    def inject_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (``update_id`` is filled in when missing); returns its update id."""
        update = dict(update)
        update.setdefault("update_id", self._next_update_id)
        self._next_update_id = max(self._next_update_id, int(update["update_id"])) + 1
        self._updates.append(update)
        self._new_update.set()
        return int(update["update_id"])

    def make_message(
        self,
        text: str,
        *,
        chat_id: int = -100123,
        chat_type: str = "supergroup",
        user_id: int = 42,
        user_name: str = "alice",
        thread_id: int | None = None,
        reply_to_bot: bool = False,
        is_bot: bool = False,
        photo_file_id: str | None = None,
    ) -> dict[str, Any]:
        """A Message dict as Telegram sends it, with command and @mention entities filled in."""
        self._next_message_id += 1
        message: dict[str, Any] = {
            "message_id": self._next_message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": chat_type, "title": "Test chat"}
            if chat_type != "private"
            else {"id": chat_id, "type": "private", "first_name": user_name},
            "from": {"id": user_id, "is_bot": is_bot, "first_name": user_name, "username": user_name},
        }
        message["caption" if photo_file_id else "text"] = text
        entities = _entities(text, self.bot_username)
        if entities:
            message["caption_entities" if photo_file_id else "entities"] = entities
        if photo_file_id:
            data = self.files.get(photo_file_id, b"")
            message["photo"] = [
                {"file_id": photo_file_id, "file_unique_id": photo_file_id + "u", "width": 64,
                 "height": 64, **({"file_size": len(data)} if self.declare_file_sizes else {})},
            ]
        if thread_id is not None:
            message["message_thread_id"] = thread_id
            message["is_topic_message"] = True
        if reply_to_bot:
            message["reply_to_message"] = {
                "message_id": 1, "date": int(time.time()), "chat": message["chat"], "text": "earlier answer",
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "Test Bot", "username": self.bot_username},
            }
        return message

    def inject_message(self, text: str, **kwargs: Any) -> dict[str, Any]:
        """Queue a ``message`` update built by :meth:`make_message`; returns the message dict."""
        message = self.make_message(text, **kwargs)
        self.inject_update({"message": message})
        return message

    def inject_edit(self, message: dict[str, Any], text: str) -> dict[str, Any]:
        """Queue an ``edited_message`` update: ``message`` (one :meth:`inject_message` returned) now reading
        ``text``, with ``edit_date`` set and its entities found again, as Telegram sends an edit; returns it."""
        edited = {k: v for k, v in message.items() if k not in ("text", "entities", "caption", "caption_entities")}
        field = "caption" if "photo" in message else "text"
        edited[field] = text
        entities = _entities(text, self.bot_username)
        if entities:
            edited[f"{field}_entities" if field == "caption" else "entities"] = entities
        edited["edit_date"] = int(time.time())
        self.inject_update({"edited_message": edited})
        return edited

    def fail_next(self, method: str, times: int = 1, retry_after: int = 1, parse_error: bool = False) -> None:
        """Make the next ``times`` calls of ``method`` answer 429 Too Many Requests; with ``parse_error``,
        the next ``times`` calls that carry a ``parse_mode`` answer 400 "can't parse entities" instead."""
        self._failures[method] = _Failure(times, retry_after, parse_error)

    async def wait_for_messages(self, count: int, within_s: float = 10.0) -> list[SentMessage]:
        """Wait until the bot has sent at least ``count`` messages."""
        deadline = time.monotonic() + within_s
        while len(self.sent_messages) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bot sent {len(self.sent_messages)} of {count} messages")
            await asyncio.sleep(0.02)
        return list(self.sent_messages)

    # -- HTTP ------------------------------------------------------------------------------------
    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        method = request.match_info["method"]
        self.calls.append(method)
        params = await _params(request)
        failure = self._failures.get(method)
        if failure is not None and failure.times > 0 and failure.parse_error and params.get("parse_mode"):
            failure.times -= 1
            return _error(400, "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0")
        if failure is not None and failure.times > 0 and not failure.parse_error:
            failure.times -= 1
            return web.json_response(
                {"ok": False, "error_code": 429, "description": f"Too Many Requests: retry after {failure.retry_after}",
                 "parameters": {"retry_after": failure.retry_after}}, status=429)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return _error(404, "Not Found")
        return await handler(params)

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return _error(401, "Unauthorized")
        file_id = request.match_info["path"].rsplit("/", 1)[-1]
        if file_id not in self.files:
            return _error(404, "Not Found")
        return web.Response(body=self.files[file_id], content_type="image/jpeg")

    def _bot_user(self) -> dict[str, Any]:
        return {"id": BOT_ID, "is_bot": True, "first_name": "Test Bot", "username": self.bot_username,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    async def _m_getMe(self, params: dict[str, Any]) -> web.Response:
        return _ok(self._bot_user())

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhook_url = ""
        return _ok(True)

    async def _m_setWebhook(self, params: dict[str, Any]) -> web.Response:
        self.webhooks.append(params)
        self.webhook_url = str(params.get("url") or "")
        return _ok(True)

    async def _m_getWebhookInfo(self, params: dict[str, Any]) -> web.Response:
        error = {"last_error_date": int(time.time()), "last_error_message": self.webhook_error} \
            if self.webhook_error else {}
        return _ok({"url": self.webhook_url, "has_custom_certificate": False, "pending_update_count": 0, **error})

    async def _m_getUpdates(self, params: dict[str, Any]) -> web.Response:
        offset = int(params.get("offset") or 0)
        timeout = float(params.get("timeout") or 0)
        if timeout > 0:
            await self._polls_flow.wait()
        # Updates below the offset are confirmed: Telegram forgets them.
        self._updates = [u for u in self._updates if u["update_id"] >= offset]
        if not self._updates and timeout > 0:
            self._new_update.clear()
            try:
                await asyncio.wait_for(self._new_update.wait(), timeout)
            except TimeoutError:
                pass
        return _ok(list(self._updates[:100]))

    async def _m_sendMessage(self, params: dict[str, Any]) -> web.Response:
        text = str(params.get("text", ""))
        if any(marker in text for marker in self.stall_texts):
            await self._stopping.wait()
            return _error(500, "Internal Server Error")
        if str(params.get("chat_id")) in self.blocked_chats:
            return _error(403, "Forbidden: bot was blocked by the user")
        parse_mode = params.get("parse_mode") or None
        visible = text
        if parse_mode == "HTML":
            try:
                visible = telegram_html_text(text)
            except ValueError as exc:
                return _error(400, f"Bad Request: can't parse entities: {exc}")
        elif parse_mode is not None:
            return _error(400, f"Bad Request: unsupported parse_mode {parse_mode!r} in this fake")
        if not visible.strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16_units(visible) > TEXT_LIMIT:
            return _error(400, "Bad Request: message is too long")
        reply = params.get("reply_parameters")
        reply_to = json.loads(reply)["message_id"] if isinstance(reply, str) else params.get("reply_to_message_id")
        thread = params.get("message_thread_id")
        self._next_message_id += 1
        sent = SentMessage(self._next_message_id, str(params["chat_id"]), text,
                           int(thread) if thread else None, int(reply_to) if reply_to else None, time.monotonic(),
                           parse_mode, visible)
        self.sent_messages.append(sent)
        return _ok({"message_id": sent.message_id, "date": int(time.time()), "text": visible,
                    "chat": {"id": int(params["chat_id"]), "type": "supergroup", "title": "Test chat"},
                    "from": self._bot_user()})

    async def _m_editMessageText(self, params: dict[str, Any]) -> web.Response:
        """Edit a message the bot sent (its ``text``/``visible_text`` change; ``edits`` keeps each edit)."""
        self.edits.append({**params, "at": time.monotonic()})
        message_id = int(params.get("message_id", 0))
        sent = next((m for m in self.sent_messages if m.message_id == message_id
                     and m.chat_id == str(params.get("chat_id"))), None)
        if sent is None or message_id in self.deleted_messages:
            return _error(400, "Bad Request: message to edit not found")
        text, parse_mode = str(params.get("text", "")), params.get("parse_mode") or None
        visible = text
        if parse_mode == "HTML":
            try:
                visible = telegram_html_text(text)
            except ValueError as exc:
                return _error(400, f"Bad Request: can't parse entities: {exc}")
        if not visible.strip():
            return _error(400, "Bad Request: message text is empty")
        if utf16_units(visible) > TEXT_LIMIT:
            return _error(400, "Bad Request: MESSAGE_TOO_LONG")
        if text == sent.text and parse_mode == sent.parse_mode:
            return _error(400, "Bad Request: message is not modified: specified new message content and reply "
                               "markup are exactly the same as a current content and reply markup of the message")
        sent.text, sent.parse_mode, sent.visible_text = text, parse_mode, visible
        return _ok({"message_id": message_id, "date": int(time.time()), "edit_date": int(time.time()),
                    "text": visible, "chat": {"id": int(params.get("chat_id", 0)), "type": "supergroup",
                                              "title": "Test chat"}, "from": self._bot_user()})

    async def _m_sendChatAction(self, params: dict[str, Any]) -> web.Response:
        self.chat_actions.append({**params, "at": time.monotonic()})
        return _ok(True)

    async def _m_getChatMember(self, params: dict[str, Any]) -> web.Response:
        key = (int(params["chat_id"]), int(params["user_id"]))
        status = "administrator" if key in self.chat_admins else "member"
        user = {"id": key[1], "is_bot": False, "first_name": "user"}
        member: dict[str, Any] = {"status": status, "user": user}
        if status == "administrator":
            member.update({k: True for k in _ADMIN_RIGHTS})
            member["can_be_edited"] = False
        return _ok(member)

    async def _m_getFile(self, params: dict[str, Any]) -> web.Response:
        file_id = str(params["file_id"])
        if file_id not in self.files:
            return _error(400, "Bad Request: invalid file_id")
        size = {"file_size": len(self.files[file_id])} if self.declare_file_sizes else {}
        return _ok({"file_id": file_id, "file_unique_id": file_id + "u", **size, "file_path": f"photos/{file_id}"})


# Telegram's HTML mode: these tags only (with these attributes), and only these named entities.
_HTML_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "a", "code", "pre", "blockquote",
              "tg-spoiler", "span", "tg-emoji"}
_HTML_ATTRIBUTES = {"a": r'\s+href="[^"]*"', "code": r'\s+class="language-[^"]*"', "span": r'\s+class="tg-spoiler"',
                    "tg-emoji": r'\s+emoji-id="[0-9]+"', "blockquote": r"\s+expandable"}
_HTML_TOKEN = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)([^<>]*)>|&(?:#[0-9]+|#x[0-9A-Fa-f]+|lt|gt|amp|quot);|[<&]")


def telegram_html_text(markup: str) -> str:
    """The text Telegram shows for ``markup`` sent with ``parse_mode="HTML"``; ValueError (worded like
    Telegram's description) for markup it cannot parse: an unknown tag or attribute, an unbalanced tag, a bare
    ``<`` or ``&``, or a named entity other than &lt; &gt; &amp; &quot;."""
    shown: list[str] = []
    stack: list[str] = []
    pos = 0
    for token in _HTML_TOKEN.finditer(markup):
        shown.append(markup[pos : token.start()])
        pos = token.end()
        offset = len(markup[: token.start()].encode())
        closing, name, attributes = token.group(1), (token.group(2) or "").lower(), token.group(3) or ""
        if not name:
            if token.group(0) in "<&":
                raise ValueError(f'Unexpected "{token.group(0)}" at byte offset {offset}')
            shown.append(html.unescape(token.group(0)))
        elif name not in _HTML_TAGS:
            raise ValueError(f'Unsupported start tag "{name}" at byte offset {offset}')
        elif closing:
            if not stack or stack[-1] != name or attributes.strip():
                expected = f"</{stack[-1]}>" if stack else "nothing"
                raise ValueError(f'Unmatched end tag at byte offset {offset}, expected "{expected}", found "</{name}>"')
            stack.pop()
        else:
            if attributes.strip() and not re.fullmatch(_HTML_ATTRIBUTES.get(name, "$^") + r"\s*", attributes):
                raise ValueError(f'Unsupported attribute in tag "{name}" at byte offset {offset}')
            stack.append(name)
    if stack:
        raise ValueError(f"Can't find end tag corresponding to start tag \"{stack[-1]}\"")
    return "".join(shown) + markup[pos:]


_ADMIN_RIGHTS = ("is_anonymous", "can_manage_chat", "can_delete_messages", "can_manage_video_chats",
                 "can_restrict_members", "can_promote_members", "can_change_info", "can_invite_users",
                 "can_post_stories", "can_edit_stories", "can_delete_stories")


def _entities(text: str, bot_username: str) -> list[dict[str, Any]]:
    """bot_command at the start and @mentions, with UTF-16 offsets like Telegram computes them."""
    entities: list[dict[str, Any]] = []
    command_end = 0
    if text.startswith("/"):
        command_end = len(text.split(maxsplit=1)[0])
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_units(text[:command_end])})
    needle = "@" + bot_username
    start = text.find(needle, command_end)
    while start != -1:
        entities.append({"type": "mention", "offset": utf16_units(text[:start]), "length": utf16_units(needle)})
        start = text.find(needle, start + len(needle))
    return entities


async def _params(request: web.Request) -> dict[str, Any]:
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            params.update(await request.json())
        else:
            params.update({k: v for k, v in (await request.post()).items() if isinstance(v, str)})
    return params


def _ok(result: Any) -> web.Response:
    return web.json_response({"ok": True, "result": result})


def _error(code: int, description: str) -> web.Response:
    return web.json_response({"ok": False, "error_code": code, "description": description}, status=code)
