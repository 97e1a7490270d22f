"""Edits and deletions on the fake Discord, shaped as Discord's gateway sends them.

MESSAGE_UPDATE carries the whole message as it reads after the edit, with ``edited_timestamp`` set (an update
without it — an embed filled in — is no edit); MESSAGE_DELETE names one message by ``id``, MESSAGE_DELETE_BULK
several by ``ids``, each with ``channel_id`` and, in a guild, ``guild_id``. Each goes where Discord sends it
(`FakeDiscord.dispatch`: the guild's shard, DMs on shard 0).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.fakes.discord_server import FakeDiscord

__all__ = ["delete_message", "delete_messages", "edit_message"]


async def edit_message(fake: FakeDiscord, message: dict[str, Any], content: str, *,
                       edited_at: datetime | None = None) -> dict[str, Any]:
    """Dispatch MESSAGE_UPDATE for ``message`` (a MESSAGE_CREATE payload the fake sent) now reading ``content``;
    returns the updated payload."""
    fresh = fake.make_message(content, channel_id=int(message["channel_id"]), user_id=int(message["author"]["id"]),
                              user_name=message["author"]["username"])
    updated = {**message, "content": content, "mentions": fresh["mentions"], "mention_roles": fresh["mention_roles"],
               "edited_timestamp": (edited_at or datetime.now(UTC)).isoformat()}
    await fake.dispatch("MESSAGE_UPDATE", updated)
    return updated


def _where(message: dict[str, Any]) -> dict[str, Any]:
    where = {"channel_id": message["channel_id"]}
    if "guild_id" in message:
        where["guild_id"] = message["guild_id"]
    return where


async def delete_message(fake: FakeDiscord, message: dict[str, Any]) -> None:
    """Dispatch MESSAGE_DELETE for ``message``."""
    await fake.dispatch("MESSAGE_DELETE", {"id": message["id"], **_where(message)})


async def delete_messages(fake: FakeDiscord, messages: list[dict[str, Any]]) -> None:
    """Dispatch MESSAGE_DELETE_BULK for ``messages`` (all of one channel), as a moderator's purge does."""
    await fake.dispatch("MESSAGE_DELETE_BULK", {"ids": [m["id"] for m in messages], **_where(messages[0])})
