"""Which chat commands exist, how a message becomes one, who may run which, and what one runs against.

Adapters recognise commands (``adapters.base.parse_command``, which drops ``/cmd@otherbot``); `Command.of`
takes the adapter's finding. Admin commands are for ``gateway.admins`` and the admins an adapter vouches for;
operator-only ones (gateway-wide figures, the bot-wide memory) for ``gateway.admins`` and the local console.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from adapters.base import Inbound
from agent.events import EventSink, NoticeSink
from gateway.conversation.erasure import ErasureReport
from gateway.conversation.session import LiveSession, SessionManager
from gateway.policy.limits import RateLimiter
from gateway.policy.pairing import Pairing

__all__ = [
    "ADMIN_COMMANDS",
    "CHANGING_COMMANDS",
    "COMMANDS",
    "CONSOLE_COMMANDS",
    "GROUP_ADMIN_COMMANDS",
    "Command",
    "CommandContext",
    "is_admin",
    "is_operator",
]

COMMANDS: dict[str, str] = {
    "compress": "/compress [focus] — compress this conversation now (optionally keeping a topic in detail)",
    "new": "/new — start a fresh session (the old one stays searchable; pins stay, /new --unpin drops them)",
    "status": "/status — context usage, thresholds and compression history",
    "stats": "/stats — gateway-wide counters since start: turns, latency, tokens, compressions",
    "stop": "/stop — stop the answer being written (yours; admins can stop any)",
    "usage": "/usage — your token use today and the limits that apply to you",
    "approve": "/approve CODE — let the sender of a DM pairing code use the bot",
    "persona": "/persona [TEXT | reset] — show or set who the bot is in this chat",
    "model": "/model [NAME | reset] — the configured models and this chat's; admins pick this chat's model",
    "pin": "/pin TEXT — keep a rule word for word in every request of this chat",
    "pins": "/pins — the pinned rules",
    "unpin": "/unpin N — remove pin N",
    "remember": "/remember <fact> — save a fact to the bot-wide memory, which every chat sees (operators only)",
    "whoami": "/whoami — your id, as gateway.admins and the access lists name you",
    "forget": "/forget me — erase everything you wrote in this chat (admins: /forget platform:user-id)",
    "help": "/help — this list",
}
# Only the console has these (it handles them itself): never registered on a platform.
CONSOLE_COMMANDS: dict[str, str] = {
    "quit": "/quit — leave the console (so do Ctrl-D, and Ctrl-C at an empty prompt)",
}
ADMIN_COMMANDS = frozenset({"compress", "stats", "approve", "persona", "remember"})
# /new resets a conversation everyone in a group shares, so there it is an admin command too.
GROUP_ADMIN_COMMANDS = frozenset({"compress", "new", "stats", "approve", "persona", "remember", "pin", "unpin"})
# Commands that change something stored (or a memory file): each runs at most once per message, so a retry
# after a crash in the middle of one says so instead of running it again.
CHANGING_COMMANDS = frozenset({"compress", "new", "pin", "unpin", "approve", "remember", "forget"})


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: its lower-case name and the rest of the line."""

    name: str
    args: str = ""

    @property
    def known(self) -> bool:
        """Whether Concord implements this command."""
        return self.name in COMMANDS

    @property
    def changes_state(self) -> bool:
        """Whether running it changes something stored (``/persona`` with text sets or drops the persona)."""
        return self.name in CHANGING_COMMANDS or (self.name == "persona" and bool(self.args))

    def needs_admin(self, in_group: bool) -> bool:
        """Whether only admins may run it in this kind of chat."""
        return self.name in (GROUP_ADMIN_COMMANDS if in_group else ADMIN_COMMANDS)

    @classmethod
    def of(cls, inbound: Inbound) -> Command | None:
        """The command an adapter recognised in ``inbound`` (adapters strip ``@botname`` suffixes)."""
        if not inbound.is_command or not inbound.command:
            return None
        return cls(inbound.command.lower(), inbound.command_args.strip())


def is_admin(platform: str, user_id: str, admins: list[str], hint: bool = False) -> bool:
    """Whether ``platform:user_id`` is configured as an admin, or the adapter vouches for them.

    The hint is the adapter's own finding (a Discord admin role, a Telegram chat administrator where the
    operator enabled those checks); the configured list is always honoured on its own.
    """
    return hint or f"{platform}:{user_id}" in admins


def is_operator(inbound: Inbound, admins: list[str]) -> bool:
    """Whether the sender runs this bot: configured in ``gateway.admins``, or at the local console.

    Stricter than `is_admin`: a Discord admin role or Telegram chat administrator runs one community, and
    gateway-wide figures describe every community the bot serves.
    """
    return inbound.platform == "console" or is_admin(inbound.platform, inbound.user_id, admins)


@dataclass(frozen=True, slots=True)
class CommandContext:
    """What a command runs against: the session (already locked), who asked, and where notices go."""

    sessions: SessionManager
    live: LiveSession
    inbound: Inbound
    admin: bool
    notices: NoticeSink | None = None
    events: EventSink | None = None
    limiter: RateLimiter | None = None
    pairing: Pairing | None = None
    # Told what an erasure (/forget) removed, so text the router holds in memory goes too.
    erased: Callable[[ErasureReport], None] | None = None
