"""Discord events as `Inbound` events, for `adapters.discord_adapter`: messages, their edits and deletions, and
slash commands.

A message from the bot itself, a system message, another bot's (unless allowed), an empty one or one over the
size limit becomes nothing. An edit is an update carrying an edit time whose text or attachments changed (an
embed filled in, a pin, the bot's own live reply growing are not). A deletion carries the message's id and where
it was; its sender only when discord.py still had the message cached.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol

import discord

from adapters.base import Attachment, ChatType, Inbound, parse_command

__all__ = ["DiscordInbound", "InboundRules"]

log = logging.getLogger(__name__)

_USER_MESSAGE_TYPES = {discord.MessageType.default, discord.MessageType.reply}


class InboundRules(Protocol):
    """The settings that decide what becomes an Inbound (`DiscordSettings` has them)."""

    allow_bots: bool
    admin_role_ids: tuple[int, ...]
    admin_role_names: tuple[str, ...]
    max_inbound_chars: int
    max_image_bytes: int


class DiscordInbound:
    """Reads discord.py's events for one client into `Inbound` events."""

    def __init__(self, client: discord.Client, rules: InboundRules) -> None:
        self.client = client
        self.rules = rules

    def message(self, message: discord.Message) -> Inbound | None:
        """A new message, or None when it is none of ours to handle (raises on a malformed one)."""
        me = self.client.user
        rules = self.rules
        if me is None or message.author.id == me.id or message.type not in _USER_MESSAGE_TYPES:
            return None
        if message.author.bot and not rules.allow_bots:
            return None
        if not isinstance(message.content, str):
            raise TypeError(f"content is {type(message.content).__name__}, not text")
        if len(message.content) > rules.max_inbound_chars:
            log.warning("discord: skipping message %s of %d characters", message.id, len(message.content))
            return None
        attachments = tuple(_attachment(a, rules.max_image_bytes) for a in message.attachments)
        if not message.content.strip() and not attachments:
            return None
        # Discord's autocomplete offers the bot's managed role beside the bot itself; either addresses it.
        own_roles = [role.id for role in message.role_mentions if role.tags and role.tags.bot_id == me.id]
        mentions_bot = bool(own_roles) or any(user.id == me.id for user in message.mentions)
        ours = "|".join([rf"<@!?{me.id}>", *(rf"<@&{role_id}>" for role_id in own_roles)])
        text = re.sub(ours, " ", message.content) if mentions_bot else message.content
        text = re.sub(r"[ \t]{2,}", " ", text).strip() if mentions_bot else text
        command = parse_command(text)
        chat_type, chat_id, thread_id = _where(message.channel)
        return Inbound(
            platform="discord",
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            user_id=str(message.author.id),
            user_name=message.author.display_name,
            message_id=str(message.id),
            text=text,
            attachments=attachments,
            mentions_bot=mentions_bot,
            reply_to_bot=_replies_to(message, me.id),
            is_command=command is not None,
            command=command[0] if command else None,
            command_args=command[1] if command else "",
            is_admin_hint=self.admin_role(message.author),
            received_at=message.created_at,
            guild_id=str(message.guild.id) if message.guild is not None else None,
            role_ids=_role_ids(message.author),
        )

    def edit(self, payload: discord.RawMessageUpdateEvent) -> Inbound | None:
        """An edited message as an edit event (its new text), or None for an update that is no edit of ours."""
        message = payload.message
        edited_at = message.edited_at
        before = payload.cached_message
        if edited_at is None or (before is not None and before.content == message.content
                                 and before.attachments == message.attachments):
            return None
        inbound = self.message(message)
        if inbound is None:
            return None
        return dataclasses.replace(inbound, kind="edit", edit_id=edited_at.isoformat(), received_at=edited_at)

    def deletions(self, channel_id: int, guild_id: int | None,
                  messages: Sequence[tuple[int, discord.Message | None]]) -> list[Inbound]:
        """A delete event for each of ``messages`` (id, and the message if discord.py had it cached) deleted in
        ``channel_id``; the bot's own answers are left out (nothing of them is kept as anyone's message)."""
        me = self.client.user
        chat_type, chat_id, thread_id = self._where_deleted(channel_id, guild_id)
        events = []
        for message_id, cached in messages:
            author = cached.author if cached is not None else None
            if author is not None and me is not None and author.id == me.id:
                continue
            events.append(Inbound(
                platform="discord", chat_id=chat_id, chat_type=chat_type, thread_id=thread_id,
                user_id=str(author.id) if author else "", user_name=author.display_name if author else "",
                message_id=str(message_id), text="", kind="delete",
                guild_id=str(guild_id) if guild_id is not None else None))
        return events

    def interaction(self, interaction: discord.Interaction, name: str, args: str) -> Inbound:
        """A slash command as a command message."""
        chat_type: ChatType
        if interaction.guild_id is None:
            chat_type, chat_id, thread_id = "dm", str(interaction.channel_id), None
        elif interaction.channel is not None:
            chat_type, chat_id, thread_id = _where(interaction.channel)
        else:
            chat_type, chat_id, thread_id = "group", str(interaction.channel_id), None
        user = interaction.user
        return Inbound(
            platform="discord",
            chat_id=chat_id,
            chat_type=chat_type,
            thread_id=thread_id,
            user_id=str(user.id),
            user_name=user.display_name,
            message_id=str(interaction.id),
            text=f"/{name} {args}".strip(),
            is_command=True,
            command=name,
            command_args=args,
            is_admin_hint=self.admin_role(user),
            received_at=interaction.created_at,
            guild_id=str(interaction.guild_id) if interaction.guild_id is not None else None,
            role_ids=_role_ids(user),
        )

    def admin_role(self, author: discord.User | discord.Member) -> bool:
        """Whether the sender holds one of the configured admin roles."""
        roles = getattr(author, "roles", None) or []
        names = {name.lower() for name in self.rules.admin_role_names}
        return any(role.id in self.rules.admin_role_ids or role.name.lower() in names for role in roles)

    def _where_deleted(self, channel_id: int, guild_id: int | None) -> tuple[ChatType, str, str | None]:
        """(chat type, chat id, thread id) of a channel known only by its id: a DM has no guild, a thread is
        found in discord.py's cache of the guild's channels."""
        if guild_id is None:
            return "dm", str(channel_id), None
        channel = self.client.get_channel(channel_id)
        return _where(channel) if channel is not None else ("group", str(channel_id), None)

def _role_ids(author: discord.User | discord.Member) -> tuple[str, ...]:
    """The sender's guild roles (none in a DM), without the @everyone role every member has."""
    return tuple(str(role.id) for role in getattr(author, "roles", None) or () if not role.is_default())


def _where(channel: Any) -> tuple[ChatType, str, str | None]:
    """(chat type, chat id, thread id): a thread lives under its parent channel."""
    if isinstance(channel, discord.Thread):
        return "thread", str(channel.parent_id), str(channel.id)
    if isinstance(channel, discord.DMChannel):
        return "dm", str(channel.id), None
    return "group", str(channel.id), None


def _replies_to(message: discord.Message, user_id: int) -> bool:
    reference = message.reference
    resolved = reference.resolved if reference else None
    return isinstance(resolved, discord.Message) and resolved.author.id == user_id


def _attachment(item: discord.Attachment, max_image_bytes: int) -> Attachment:
    if not isinstance(item.size, int) or not isinstance(item.url, str):
        raise TypeError(f"attachment {item.id} has a malformed size or url")
    mime = item.content_type if isinstance(item.content_type, str) else "application/octet-stream"
    kind = "image" if mime.startswith("image/") and item.size <= max_image_bytes else "file"
    return Attachment(kind=kind, mime=mime, size=item.size, name=str(item.filename), url=item.url)
