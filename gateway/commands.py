"""Chat commands (R-G5): parsing, permissions and the texts users see.

``/compress [focus]`` (admin), ``/new``, ``/status``, ``/help``. Commands work the same on every platform;
adapters recognise them (``adapters.base.parse_command``, which drops ``/cmd@otherbot``). Texts here are short on purpose: chat is not a log, and a summary never appears in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from adapters.base import Inbound
from agent.compression.engine import CompressionResult

__all__ = [
    "ADMIN_COMMANDS",
    "COMMANDS",
    "Command",
    "StatusFigures",
    "format_compress_result",
    "format_help",
    "format_status",
    "is_admin",
]

COMMANDS: dict[str, str] = {
    "compress": "/compress [focus] — compress this conversation now (optionally keeping a topic in detail)",
    "new": "/new — start a fresh session (the old one stays searchable)",
    "status": "/status — context usage, thresholds and compression history",
    "help": "/help — this list",
}
ADMIN_COMMANDS = frozenset({"compress"})
# /new resets a conversation everyone in a group shares, so there it is an admin command too.
GROUP_ADMIN_COMMANDS = frozenset({"compress", "new"})

NOTHING_TO_COMPRESS = "Nothing to compress: everything is already in the protected head and tail."
REFUSAL = "Sorry, /{name} is for admins only."


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed command: its lower-case name and the rest of the line."""

    name: str
    args: str = ""

    @property
    def known(self) -> bool:
        """Whether Concord implements this command."""
        return self.name in COMMANDS

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


@dataclass(frozen=True, slots=True)
class StatusFigures:
    """Everything /status shows for one session."""

    session_id: str
    tokens: int
    token_source: str
    context_length: int
    threshold_tokens: int
    hygiene_tokens: int
    hygiene_message_limit: int
    messages: int
    compression_count: int
    engine: str
    model: str
    last_compaction_at: datetime | None = None
    last_compaction_reason: str = ""
    last_compaction_savings: float | None = None


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole > 0 else "n/a"


def format_status(s: StatusFigures) -> str:
    """The /status reply: one figure per line."""
    source = "last real prompt" if s.token_source == "usage" else "counted"
    lines = [
        f"Session {s.session_id}",
        f"Context: {s.tokens:,} / {s.context_length:,} tokens ({_pct(s.tokens, s.context_length)}, {source})",
        f"Messages: {s.messages:,}",
        f"Compression threshold: {s.threshold_tokens:,} tokens ({_pct(s.threshold_tokens, s.context_length)})",
        f"Hygiene threshold: {s.hygiene_tokens:,} tokens ({_pct(s.hygiene_tokens, s.context_length)}) "
        f"or > {s.hygiene_message_limit:,} messages",
        f"Compressions: {s.compression_count}",
    ]
    if s.last_compaction_at is not None:
        when = s.last_compaction_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
        savings = f", saved {s.last_compaction_savings:.0%}" if s.last_compaction_savings is not None else ""
        lines.append(f"Last compaction: {when} ({s.last_compaction_reason or 'unknown'}{savings})")
    else:
        lines.append("Last compaction: never")
    lines.append(f"Engine: {s.engine} · Model: {s.model or 'unset'}")
    return "\n".join(lines)


def format_compress_result(result: CompressionResult) -> str:
    """The one-line answer to /compress; never includes summary text."""
    if result.aborted:
        return f"⚠️ Compression aborted ({result.reason or 'unknown reason'}). Try /compress again or /new."
    if not result.compressed:
        return f"Nothing was compressed ({result.reason})." if result.reason else NOTHING_TO_COMPRESS
    return (
        f"Compressed: {result.messages_before:,} → {result.messages_after:,} messages, "
        f"{result.tokens_before:,} → {result.tokens_after:,} tokens ({result.savings_pct:.0%} saved)."
    )


def format_help(admin: bool) -> str:
    """The /help reply; admin-only commands are marked for non-admins."""
    lines = ["Commands:"]
    for name, text in COMMANDS.items():
        suffix = " (admins only)" if name in ADMIN_COMMANDS and not admin else ""
        lines.append(f"  {text}{suffix}")
    return "\n".join(lines)
