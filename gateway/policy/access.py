"""Who may use the bot, and where (access control): a pure decision over one inbound message.

Two gates, checked before anything is queued, locked or stored:

* the **chat gate**: an ignored chat (``gateway.deny_chats``), a Discord guild outside ``discord.allow_guilds``
  or a group outside a non-empty ``gateway.allow_chats`` is ``IGNORE`` — nothing is answered and nothing kept;
* the **user gate**: ``gateway.deny_users``, or a sender outside a non-empty ``gateway.allow_users`` (a Discord
  role in ``discord.allow_role_ids`` also lets one in, in a guild) is ``REFUSE``. In direct messages
  ``gateway.dm_policy`` narrows it: ``allowlist`` wants the sender listed, ``pairing`` also accepts senders an
  admin approved with ``/approve CODE`` and answers an unknown sender ``PAIR`` (they get a one-time code).

Admins (``gateway.admins``, or the adapter's admin hint) and the local console always pass: the operator must
not be able to lock themselves out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from adapters.base import Inbound
from gateway.config import Settings

__all__ = ["AccessPolicy", "Verdict", "user_ref"]

DmPolicy = Literal["open", "allowlist", "pairing"]


class Verdict(StrEnum):
    """What to do with a message."""

    ALLOW = "allow"
    IGNORE = "ignore"  # the chat is not served: no reply, nothing kept
    REFUSE = "refuse"  # the sender may not use the bot: quiet in groups, one short line in a DM
    PAIR = "pair"  # an unknown sender in a DM under dm_policy=pairing: send them a pairing code


def user_ref(inbound: Inbound) -> str:
    """The sender as ``platform:user id`` (the form of ``gateway.admins`` and the access lists)."""
    return f"{inbound.platform}:{inbound.user_id}"


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The configured lists, as sets of ``platform:id`` (guilds and roles: bare Discord ids)."""

    allow_users: frozenset[str] = frozenset()
    deny_users: frozenset[str] = frozenset()
    allow_chats: frozenset[str] = frozenset()
    deny_chats: frozenset[str] = frozenset()
    free_response_chats: frozenset[str] = frozenset()
    allow_guilds: frozenset[str] = frozenset()
    allow_role_ids: frozenset[str] = frozenset()
    dm_policy: DmPolicy = "open"

    @classmethod
    def from_settings(cls, settings: Settings) -> AccessPolicy:
        """The policy ``settings`` describe."""
        gw, dc = settings.gateway, settings.discord
        return cls(
            allow_users=frozenset(gw.allow_users), deny_users=frozenset(gw.deny_users),
            allow_chats=frozenset(gw.allow_chats), deny_chats=frozenset(gw.deny_chats),
            free_response_chats=frozenset(gw.free_response_chats), allow_guilds=frozenset(dc.allow_guilds),
            allow_role_ids=frozenset(dc.allow_role_ids), dm_policy=gw.dm_policy,
        )

    def decide(self, inbound: Inbound, *, admin: bool, approved: bool = False) -> Verdict:
        """The verdict on ``inbound``; ``approved``: the sender was paired by an admin (``/approve``)."""
        if inbound.platform == "console" or admin:
            return Verdict.ALLOW
        if inbound.chat_type != "dm" and not self.chat_served(inbound):
            return Verdict.IGNORE
        user = user_ref(inbound)
        if user in self.deny_users:
            return Verdict.REFUSE
        listed = user in self.allow_users
        if inbound.chat_type == "dm":
            if self.dm_policy == "open":
                return Verdict.ALLOW if listed or not self.allow_users else Verdict.REFUSE
            if listed or (self.dm_policy == "pairing" and approved):
                return Verdict.ALLOW
            return Verdict.PAIR if self.dm_policy == "pairing" else Verdict.REFUSE
        if not self.allow_users and not self.allow_role_ids:
            return Verdict.ALLOW
        has_role = bool(self.allow_role_ids.intersection(inbound.role_ids))
        return Verdict.ALLOW if listed or has_role else Verdict.REFUSE

    def chat_served(self, inbound: Inbound) -> bool:
        """Whether the bot serves the group chat (or thread) ``inbound`` came from."""
        chats = self._chat_refs(inbound)
        if chats & self.deny_chats:
            return False
        if self.allow_guilds and inbound.platform == "discord" and inbound.guild_id not in self.allow_guilds:
            return False
        return not self.allow_chats or bool(chats & self.allow_chats)

    def free_response(self, inbound: Inbound) -> bool:
        """Whether every message in this group chat counts as addressed to the bot."""
        return bool(self._chat_refs(inbound) & self.free_response_chats)

    @staticmethod
    def _chat_refs(inbound: Inbound) -> set[str]:
        # A thread is named by its own id or by its parent channel's (a list may name either).
        refs = {f"{inbound.platform}:{inbound.chat_id}"}
        if inbound.thread_id:
            refs.add(f"{inbound.platform}:{inbound.thread_id}")
        return refs
