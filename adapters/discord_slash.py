"""Native Discord slash commands (opt-in with ``discord.slash_commands``): /compress [focus], /new, /status, /stats, /help.

The commands live on a discord.py ``CommandTree`` and are synced globally at login (``PUT
/applications/{id}/commands``; Discord may take a while to show new global commands). An invocation is
acknowledged at once with a deferred "thinking" response (``POST /interactions/{id}/{token}/callback``),
because Discord voids an interaction that is not answered within 3 seconds and a /compress can take longer.
It then reaches the gateway as an ordinary command message. The gateway's reply replaces the "thinking"
message (``PATCH /webhooks/{app}/{token}/messages/@original``); further chunks go out as followups
(``POST /webhooks/{app}/{token}``). Interaction tokens last 15 minutes, so a reply after that goes to the
channel as a plain message instead.

Typed text commands (``/compress`` as a message) keep working either way.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import discord
from discord import app_commands

__all__ = ["SLASH_COMMANDS", "TOKEN_LIFETIME_S", "PendingInteraction", "PendingInteractions", "build_tree"]

SLASH_COMMANDS: dict[str, str] = {
    "compress": "Compress this conversation now (admins only)",
    "new": "Start a fresh session; the old one stays searchable",
    "status": "Context usage, thresholds and compression history",
    "stats": "Gateway-wide counters since start (admins only)",
    "help": "List the commands",
}
# Discord's interaction tokens are valid for 15 minutes; stop using one a little before that.
TOKEN_LIFETIME_S = 15 * 60 - 30

# (interaction, command name, arguments as typed text) -> None
SlashHandler = Callable[[discord.Interaction, str, str], Awaitable[None]]


def build_tree(client: discord.Client, on_command: SlashHandler) -> app_commands.CommandTree:
    """A command tree on ``client`` whose commands all hand their invocation to ``on_command``."""
    tree = app_commands.CommandTree(client)

    @tree.command(name="compress", description=SLASH_COMMANDS["compress"])
    @app_commands.describe(focus="A topic to keep in detail in the summary")
    async def compress(interaction: discord.Interaction, focus: str | None = None) -> None:
        await on_command(interaction, "compress", (focus or "").strip())

    for name in ("new", "status", "stats", "help"):
        tree.add_command(app_commands.Command(name=name, description=SLASH_COMMANDS[name],
                                              callback=_without_options(name, on_command)))
    return tree


def _without_options(name: str, on_command: SlashHandler) -> Callable[[discord.Interaction], Awaitable[None]]:
    async def invoke(interaction: discord.Interaction) -> None:
        await on_command(interaction, name, "")

    return invoke


@dataclass
class PendingInteraction:
    """A deferred interaction awaiting its reply; ``answered`` once the "thinking" message was replaced."""

    interaction: discord.Interaction
    expires_at: float
    answered: bool = False


class PendingInteractions:
    """Deferred interactions by interaction id: the newest ``limit``, each usable for ``lifetime`` seconds."""

    def __init__(self, limit: int = 1024, lifetime: float = TOKEN_LIFETIME_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.lifetime = lifetime
        self._clock = clock
        self._items: OrderedDict[str, PendingInteraction] = OrderedDict()

    def add(self, interaction: discord.Interaction) -> None:
        """Remember ``interaction`` (deferred just now); the oldest falls out past the limit."""
        self._items[str(interaction.id)] = PendingInteraction(interaction, self._clock() + self.lifetime)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)

    def get(self, interaction_id: str | None) -> PendingInteraction | None:
        """The interaction a reply answers, or None when unknown or its token has expired (then forgotten)."""
        if interaction_id is None:
            return None
        pending = self._items.get(interaction_id)
        if pending is not None and pending.expires_at <= self._clock():
            del self._items[interaction_id]
            return None
        return pending

    def __len__(self) -> int:
        return len(self._items)
