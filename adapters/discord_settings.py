"""What the Discord adapter is configured with: `DiscordSettings`, one frozen record the config layer maps
Concord's ``discord.*`` settings onto (the adapter is described in `adapters.discord_adapter`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from adapters.supervise import Backoff

__all__ = ["DiscordSettings"]


@dataclass(frozen=True)
class DiscordSettings:
    """Everything the Discord adapter needs; the config layer maps its settings onto this."""

    token: str = field(repr=False)
    allow_bots: bool = False
    admin_role_ids: tuple[int, ...] = ()
    admin_role_names: tuple[str, ...] = ()
    typing_interval: float = 8.0
    max_retry_attempts: int = 5
    max_retry_wait: float = 120.0
    max_inbound_chars: int = 16_000
    # Larger images are passed on as files: the strictest vision API (Anthropic) refuses images over 5 MB.
    max_image_bytes: int = 5_000_000
    ready_timeout: float = 60.0
    drain_seconds: float = 30.0
    slash_commands: bool = False
    # Sharding: the bot's total shard count and the shards this process runs (empty: all of them). Discord
    # routes each guild to shard (guild_id >> 22) % shard_count and DMs to shard 0.
    shard_count: int | None = None
    shard_ids: tuple[int, ...] = ()
    backoff: Backoff = field(default_factory=Backoff)
    # Show answers as they grow by editing one message, at most once per ``edit_interval`` s per channel.
    streaming: bool = True
    edit_interval: float = 1.0
