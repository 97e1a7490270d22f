"""The platform sections of the settings: the ``discord`` and ``telegram`` bots."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import NoDecode

from gateway.config.fields import SECTION, CsvList, split_csv


def _snowflake_list(ids: list[str], what: str) -> list[str]:
    for ident in ids:
        if not ident.isdigit():
            raise ValueError(f"{what} {ident!r} must be a numeric Discord id")
    return ids


class DiscordSettings(BaseModel):
    """The Discord bot (enabled when a token is set)."""

    model_config = SECTION
    token: SecretStr | None = None
    allow_bots: bool = False
    admin_role_ids: CsvList = []
    admin_role_names: CsvList = []
    slash_commands: bool = False
    # Sharding over several workers: the total shard count, and the shards this worker runs (unset: all).
    shard_count: int | None = Field(default=None, ge=1)
    shard_ids: Annotated[list[int], NoDecode] = []
    max_image_bytes: int = Field(default=5_000_000, ge=1024, le=100_000_000)
    drain_seconds: float = Field(default=30.0, ge=0, le=600)
    # Access control: only these guilds (servers) are served, and with allow_role_ids only members holding one
    # of these roles (or listed in gateway.allow_users) may use the bot in a guild. Empty: no restriction.
    allow_guilds: CsvList = []
    allow_role_ids: CsvList = []
    # Answers grow in one edited message (false: one message when the answer is complete).
    streaming: bool = True

    _split = field_validator("admin_role_ids", "admin_role_names", "allow_guilds", "allow_role_ids", "shard_ids",
                             mode="before")(split_csv)

    @model_validator(mode="after")
    def _shards(self) -> DiscordSettings:
        if self.shard_ids and self.shard_count is None:
            raise ValueError("discord.shard_ids needs discord.shard_count")
        bad = [i for i in self.shard_ids if not 0 <= i < (self.shard_count or 0)]
        if bad:
            raise ValueError(f"discord.shard_ids {bad} outside 0..{(self.shard_count or 1) - 1}")
        if len(set(self.shard_ids)) != len(self.shard_ids):
            raise ValueError("discord.shard_ids lists a shard twice")
        return self

    @field_validator("admin_role_ids")
    @classmethod
    def _snowflakes(cls, ids: list[str]) -> list[str]:
        return _snowflake_list(ids, "role id (use admin_role_names for names)")

    @field_validator("allow_guilds", "allow_role_ids")
    @classmethod
    def _allow_snowflakes(cls, ids: list[str], info: ValidationInfo) -> list[str]:
        return _snowflake_list(ids, "guild id" if info.field_name == "allow_guilds" else "role id")


class TelegramSettings(BaseModel):
    """The Telegram bot (enabled when a token is set)."""

    model_config = SECTION
    token: SecretStr | None = None
    api_base_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, gt=0, lt=65536)
    webhook_path: str = Field(default="telegram", pattern=r"^[A-Za-z0-9_\-./]*$")
    webhook_secret: SecretStr | None = None
    check_chat_admins: bool = False
    admin_cache_seconds: float = Field(default=60.0, ge=0, le=86_400)
    drain_seconds: float = Field(default=30.0, ge=0, le=600)
    parse_mode: Literal["html", "plain"] = "html"
    # Polling with Redis: one worker polls, holding a lease this long (renewed); another takes over after it.
    polling_lease_seconds: float = Field(default=15.0, ge=1)
    # Answers grow in one edited message (false: one message when the answer is complete).
    streaming: bool = True

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramSettings:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("telegram.mode 'webhook' needs telegram.webhook_url")
        return self
