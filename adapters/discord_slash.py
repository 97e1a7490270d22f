"""Native Discord slash commands (opt-in with ``discord.slash_commands``): every command the gateway knows,
with its one text option where it takes one (/compress [focus], /pin text, /unpin number, /approve code, …).

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

__all__ = ["SLASH_COMMANDS", "TOKEN_LIFETIME_S", "PendingInteraction", "PendingInteractions", "SlashCommand",
           "build_tree"]

@dataclass(frozen=True)
class SlashCommand:
    """A slash command: what the menu says, and its one text option (None: it takes none)."""

    description: str
    option: str | None = None
    option_description: str = ""
    required: bool = False


SLASH_COMMANDS: dict[str, SlashCommand] = {
    "compress": SlashCommand("Compress this conversation now (admins only)", "focus",
                             "A topic to keep in detail in the summary"),
    # /new --unpin stays a typed command: a text option for a flag would read oddly in the menu.
    "new": SlashCommand("Start a fresh session; the old one stays searchable (pins stay)"),
    "status": SlashCommand("Context usage, thresholds and compression history"),
    "stop": SlashCommand("Stop the answer being written (yours; admins can stop any)"),
    "usage": SlashCommand("Your token use today and the limits that apply to you"),
    "pin": SlashCommand("Keep a rule word for word in every request of this chat", "text", "The rule",
                        required=True),
    "pins": SlashCommand("The pinned rules"),
    "unpin": SlashCommand("Remove a pinned rule", "number", "Its number in /pins", required=True),
    "persona": SlashCommand("Show or set who the bot is in this chat (admins only)", "text",
                            "Who the bot is here, or reset"),
    "model": SlashCommand("The configured models; admins pick this chat's model", "name",
                          "A configured model's name, or reset"),
    "approve": SlashCommand("Let the sender of a DM pairing code use the bot (admins only)", "code",
                            "The pairing code", required=True),
    "remember": SlashCommand("Save a fact to the bot-wide memory (operators only)", "fact", "The fact",
                             required=True),
    "forget": SlashCommand("Erase everything you wrote in this chat (admins: someone else's)", "who",
                           "me, or platform:user-id (admins)", required=True),
    "stats": SlashCommand("Gateway-wide counters since start (admins only)"),
    "whoami": SlashCommand("Your id, as the bot's admin and access lists name you"),
    "help": SlashCommand("List the commands"),
}
# Discord's interaction tokens are valid for 15 minutes; stop using one a little before that.
TOKEN_LIFETIME_S = 15 * 60 - 30

# (interaction, command name, arguments as typed text) -> None
SlashHandler = Callable[[discord.Interaction, str, str], Awaitable[None]]


def build_tree(client: discord.Client, on_command: SlashHandler) -> app_commands.CommandTree:
    """A command tree on ``client`` whose commands all hand their invocation to ``on_command``."""
    tree = app_commands.CommandTree(client)
    for name, command in SLASH_COMMANDS.items():
        tree.add_command(app_commands.Command(name=name, description=command.description,
                                              callback=_callback(name, command, on_command)))
    return tree


def _callback(name: str, command: SlashCommand,
              on_command: SlashHandler) -> Callable[..., Awaitable[None]]:
    """The invocation handler; discord.py reads the option from its signature, so the three shapes differ."""
    if command.option is None:
        async def plain(interaction: discord.Interaction) -> None:
            await on_command(interaction, name, "")

        return plain
    if command.required:
        async def required(interaction: discord.Interaction, value: str) -> None:
            await on_command(interaction, name, value.strip())

        handler: Callable[..., Awaitable[None]] = required
    else:
        async def optional(interaction: discord.Interaction, value: str | None = None) -> None:
            await on_command(interaction, name, (value or "").strip())

        handler = optional
    described = app_commands.describe(value=command.option_description)(handler)
    return app_commands.rename(value=command.option)(described)


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
