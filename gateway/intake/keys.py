"""Session keys (R-G2): which conversation an inbound message belongs to.

One session per DM, per group channel, per thread/topic. In groups the scope is configurable per platform:
``shared`` (everyone in the channel talks to one agent) or ``per-user`` (each speaker gets their own session
in that channel). A DM is per-user by nature, so the scope never changes it.

The key is plain text so it can be a store column, a lock name and a log field at once:
``dm:<chat>``, ``group:<chat>``, ``thread:<chat>:<thread>``, with ``:user:<id>`` appended in per-user scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["Scope", "SessionKey", "session_key"]

Scope = Literal["shared", "per-user"]


class _Addressable(Protocol):
    """The fields of an inbound message a key is made from."""

    platform: str
    chat_id: str
    chat_type: str
    thread_id: str | None
    user_id: str


@dataclass(frozen=True, slots=True)
class SessionKey:
    """A conversation's identity: the platform plus a chat key unique within it."""

    platform: str
    chat_key: str

    def __str__(self) -> str:
        return f"{self.platform}:{self.chat_key}"

    @property
    def is_group(self) -> bool:
        """Whether several people may share this conversation (group, channel or thread)."""
        return not self.chat_key.startswith("dm:")

    @property
    def chat_refs(self) -> frozenset[str]:
        """The chat as access lists name it: ``platform:<chat id>``, and for a thread its own id too."""
        kind, _, rest = self.shared_chat_key.partition(":")
        chat, _, thread = rest.partition(":") if kind == "thread" else (rest, "", "")
        return frozenset(f"{self.platform}:{ident}" for ident in (chat, thread) if ident)

    @property
    def shared_chat_key(self) -> str:
        """The chat (channel, group, thread) without the per-user suffix: what everyone in it shares."""
        return self.chat_key.partition(":user:")[0]

    @property
    def chat_id(self) -> str:
        """The platform's id of the chat (a thread's parent channel, a DM's chat)."""
        return self.chat_key.split(":")[1]


def session_key(message: _Addressable, scope: Scope = "shared") -> SessionKey:
    """The session key of ``message`` under ``scope``.

    A message carrying a thread id belongs to that thread whatever its chat type says, so a forum topic or a
    Discord thread never leaks into its parent channel's session.
    """
    if message.chat_type == "dm":
        return SessionKey(message.platform, f"dm:{message.chat_id}")
    if message.thread_id:
        base = f"thread:{message.chat_id}:{message.thread_id}"
    else:
        base = f"group:{message.chat_id}"
    if scope == "per-user":
        base = f"{base}:user:{message.user_id}"
    return SessionKey(message.platform, base)
