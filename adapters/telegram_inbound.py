"""Telegram messages as `Inbound` events, for `adapters.telegram_adapter`: who sent it, where, addressed how.

Private chats, groups, supergroups, forum topics (a topic is a thread) and channels. A message from another bot
(unless allowed), an empty one or one over the size limit becomes nothing; one the bot cannot read raises. The
bot's @mentions are cut from the text; a reply to a forum topic's creation message is no reply to the bot. Group
admins are asked of Telegram only with ``check_chat_admins``, for commands, and cached. The largest size of a
photo is downloaded into a data URL (a file URL would carry the bot token), within ``max_attachment_bytes``.
"""

from __future__ import annotations

import base64
import logging
import re
import time
from collections import OrderedDict

import httpx
from telegram import Bot, Message, MessageEntity
from telegram.constants import ChatMemberStatus
from telegram.error import TelegramError

from adapters.base import Attachment, ChatType, Inbound, parse_command, utf16_len
from adapters.telegram_settings import TelegramSettings

__all__ = ["TelegramInbound"]

log = logging.getLogger(__name__)

_ANONYMOUS_ADMIN_BOT_ID = 1087968824  # "GroupAnonymousBot" speaks for anonymous group admins
_ADMIN_STATUSES = {ChatMemberStatus.ADMINISTRATOR, ChatMemberStatus.OWNER}
_CHAT_TYPES: dict[str, ChatType] = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}


class TelegramInbound:
    """Reads the messages one bot receives into `Inbound` events."""

    def __init__(self, bot: Bot, settings: TelegramSettings) -> None:
        self.bot = bot
        self.settings = settings
        self._admin_cache: OrderedDict[tuple[int, int], tuple[float, bool]] = OrderedDict()
        self._downloads: httpx.AsyncClient | None = None

    @property
    def bot_username(self) -> str:
        """The bot's @username (known after getMe)."""
        return self.bot.username

    async def aclose(self) -> None:
        """Close the photo download client, if one was opened."""
        if self._downloads is not None:
            await self._downloads.aclose()

    async def message(self, message: Message) -> Inbound | None:
        """The message as an Inbound, or None when it is none of ours to handle (raises on a malformed one)."""
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
            or (entity.user is not None and entity.user.id == self.bot.id)
        ]
        for value in ours:
            text = text.replace(value, " ", 1)
        return bool(ours), re.sub(r"[ \t]{2,}", " ", text).strip() if ours else text

    def _replies_to_bot(self, message: Message) -> bool:
        replied = message.reply_to_message
        # In forum topics every message "replies" to the topic's creation message; that is not addressing.
        if replied is None or replied.forum_topic_created is not None or replied.from_user is None:
            return False
        return replied.from_user.id == self.bot.id

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
            member = await self.bot.get_chat_member(message.chat.id, user.id)
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
