"""One typed settings object read from config.yaml, .env and ``CONCORD_<SECTION>__<KEY>`` environment variables.

Precedence (highest first): init kwargs, environment, .env, config.yaml (``CONCORD_CONFIG`` or ./config.yaml),
defaults. Secrets are `SecretStr`: they print as ``**********`` and are never echoed in errors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

__all__ = ["ConfigError", "Settings", "load_settings", "mask_url", "masked_dump"]

_Section = ConfigDict(extra="forbid", validate_default=True)


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


CsvList = Annotated[list[str], NoDecode]


class LLMSettings(BaseModel):
    """The main model the agent talks to."""

    model_config = _Section
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = ""
    context_length: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    timeout_seconds: float = Field(default=120.0, gt=0)
    encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base"
    max_iterations: int = Field(default=20, ge=1, le=200)

    @property
    def configured(self) -> bool:
        """Whether enough is set to talk to a model (a model name and somewhere to send it)."""
        return bool(self.model and (self.base_url or self.api_key))


class CompressionSettings(BaseModel):
    """The agent's own compressor (R-T4…R-T6, R-C*)."""

    model_config = _Section
    enabled: bool = True
    threshold: float = Field(default=0.50, gt=0, le=1)
    target_ratio: float = Field(default=0.20, gt=0, lt=1)
    protect_first_n: int = Field(default=3, ge=0)
    protect_last_n: int = Field(default=20, ge=1)
    in_place: bool = True
    abort_on_summary_failure: bool = False
    autoraise: bool = True


class AuxiliaryModel(BaseModel):
    """A side model; every unset field falls back to the main model's."""

    model_config = _Section
    provider: Literal["openai", "anthropic"] | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    context_length: int | None = Field(default=None, gt=0)
    # Overall deadline of one summary request; unset: llm.timeout_seconds. A compaction waits at most twice
    # this for its summary (provider retries and the fallback to the main model included).
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600)


class AuxiliarySettings(BaseModel):
    """Auxiliary models by job."""

    model_config = _Section
    compression: AuxiliaryModel = AuxiliaryModel()


class ContextSettings(BaseModel):
    """Which context engine runs (R-E2)."""

    model_config = _Section
    engine: str = Field(default="compressor", min_length=1)


class PromptCachingSettings(BaseModel):
    """Anthropic-style cache_control markers (R-K1, R-K2)."""

    model_config = _Section
    enabled: bool = True
    cache_ttl: Literal["5m", "1h"] = "5m"


class GatewaySettings(BaseModel):
    """Session handling in front of the agent (R-G2…R-G6)."""

    model_config = _Section
    hygiene_threshold: float = Field(default=0.85, gt=0, le=1)
    hygiene_hard_message_limit: int = Field(default=5000, ge=10)
    idle_expiry_minutes: int | None = Field(default=None, gt=0)
    sweep_cron: str | None = "*/30 * * * *"
    admins: CsvList = []
    session_scope: Literal["shared", "per-user"] = "shared"
    # Per-platform overrides, e.g. {"telegram": "per-user"}; platforms not listed use session_scope.
    session_scope_by_platform: dict[Literal["discord", "telegram", "console"], Literal["shared", "per-user"]] = {}
    group_context_limit: int = Field(default=50, ge=0)
    bot_name: str = "Concord"
    # Longest reply sent to a chat; a longer answer is cut with a note (the whole answer stays stored).
    max_reply_chars: int = Field(default=20_000, ge=500, le=1_000_000)

    _split_admins = field_validator("admins", mode="before")(_split_csv)

    @field_validator("admins")
    @classmethod
    def _admin_format(cls, admins: list[str]) -> list[str]:
        for entry in admins:
            platform, _, user = entry.partition(":")
            if platform not in ("discord", "telegram", "console") or not user:
                raise ValueError(f"admin {entry!r} must look like discord:<user id>, telegram:<user id> or console:<name>")
        return admins

    def scope_for(self, platform: str) -> Literal["shared", "per-user"]:
        """The session scope of group chats on ``platform``."""
        return self.session_scope_by_platform.get(platform, self.session_scope)  # type: ignore[call-overload]

    @field_validator("sweep_cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value in (None, "", "off"):
            return None
        from apscheduler.triggers.cron import CronTrigger

        try:
            CronTrigger.from_crontab(value, timezone="UTC")
        except ValueError as exc:
            raise ValueError(f"not a 5-field crontab expression ({exc})") from None
        return value


class StorageSettings(BaseModel):
    """Where sessions and messages live (R-S1)."""

    model_config = _Section
    data_dir: Path = Path("data")
    database_url: str | None = None

    @field_validator("database_url")
    @classmethod
    def _known_driver(cls, value: str | None) -> str | None:
        if value and not value.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValueError("must start with sqlite+aiosqlite:// or postgresql+asyncpg://")
        return value

    @property
    def url(self) -> str:
        """The effective database URL: the configured one, else a SQLite file in the data dir."""
        return self.database_url or f"sqlite+aiosqlite:///{(self.data_dir / 'concord.db').as_posix()}"


class RedisSettings(BaseModel):
    """Redis for cross-worker locks; unset means in-process locks."""

    model_config = _Section
    url: SecretStr | None = None
    lock_timeout_seconds: float = Field(default=60.0, gt=0)

    @field_validator("url")
    @classmethod
    def _redis_scheme(cls, value: SecretStr | None) -> SecretStr | None:
        if value and not value.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value


class DiscordSettings(BaseModel):
    """The Discord bot (enabled when a token is set)."""

    model_config = _Section
    token: SecretStr | None = None
    allow_bots: bool = False
    admin_role_ids: CsvList = []
    admin_role_names: CsvList = []
    slash_commands: bool = False

    _split = field_validator("admin_role_ids", "admin_role_names", mode="before")(_split_csv)

    @field_validator("admin_role_ids")
    @classmethod
    def _snowflakes(cls, ids: list[str]) -> list[str]:
        for role in ids:
            if not role.isdigit():
                raise ValueError(f"role id {role!r} must be a numeric Discord id (use admin_role_names for names)")
        return ids


class TelegramSettings(BaseModel):
    """The Telegram bot (enabled when a token is set)."""

    model_config = _Section
    token: SecretStr | None = None
    api_base_url: str | None = None
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str | None = None
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, gt=0, lt=65536)
    webhook_secret: SecretStr | None = None
    check_chat_admins: bool = False
    parse_mode: Literal["html", "plain"] = "html"

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramSettings:
        if self.mode == "webhook" and not self.webhook_url:
            raise ValueError("telegram.mode 'webhook' needs telegram.webhook_url")
        return self


class MemorySettings(BaseModel):
    """Built-in file memory (MEMORY.md per bot, USER.md per user)."""

    model_config = _Section
    enabled: bool = True
    directory: Path | None = None


class LoggingSettings(BaseModel):
    """Log output."""

    model_config = _Section
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_logs: bool = False


class Settings(BaseSettings):
    """Every Concord setting. Build it with `load_settings`, which turns validation errors into `ConfigError`."""

    model_config = SettingsConfigDict(
        env_prefix="CONCORD_",
        env_nested_delimiter="__",
        env_file=".env",
        env_file_encoding="utf-8",
        # `KEY=` lines (as in .env.example) mean "not set", not an empty string.
        env_ignore_empty=True,
        extra="forbid",
        validate_default=True,
    )

    llm: LLMSettings = LLMSettings()
    compression: CompressionSettings = CompressionSettings()
    auxiliary: AuxiliarySettings = AuxiliarySettings()
    context: ContextSettings = ContextSettings()
    prompt_caching: PromptCachingSettings = PromptCachingSettings()
    gateway: GatewaySettings = GatewaySettings()
    storage: StorageSettings = StorageSettings()
    redis: RedisSettings = RedisSettings()
    discord: DiscordSettings = DiscordSettings()
    telegram: TelegramSettings = TelegramSettings()
    memory: MemorySettings = MemorySettings()
    logging: LoggingSettings = LoggingSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        yaml_path = _config_path()
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings, dotenv_settings]
        if yaml_path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_path))
        return tuple(sources)


def _config_path() -> Path | None:
    explicit = os.environ.get("CONCORD_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"CONCORD_CONFIG={explicit}: no such file")
        return path
    default = Path("config.yaml")
    return default if default.is_file() else None


class ConfigError(ValueError):
    """The configuration is invalid; the message names every bad key, its value and what is allowed."""


_SECRET_KEYS = ("api_key", "token", "secret", "password", "url")


def _describe_value(loc: tuple[Any, ...], value: Any) -> str:
    key = str(loc[-1]) if loc else ""
    if key in ("base_url", "api_base_url", "webhook_url", "database_url"):
        # Shown to help fix them, but a URL can carry a password (``postgres://user:password@host``).
        return repr(mask_url(value)) if isinstance(value, str) else repr(value)
    if any(word in key for word in _SECRET_KEYS):
        return "'***'"
    if isinstance(value, dict | list):
        return type(value).__name__
    return repr(value)


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        key = ".".join(str(p) for p in loc) or "(root)"
        message = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            lines.append(f"  {key}: unknown setting")
            continue
        lines.append(f"  {key} = {_describe_value(loc, err.get('input'))}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def load_settings(**overrides: Any) -> Settings:
    """Read and validate the configuration; raise `ConfigError` with one readable message on any problem."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from None
    except ConfigError:
        raise
    except (OSError, ValueError, yaml.YAMLError) as exc:  # unreadable / malformed YAML or .env
        raise ConfigError(f"cannot read configuration: {exc}") from None


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data with every secret masked."""
    data = settings.model_dump(mode="json")
    if settings.storage.database_url:
        data["storage"]["database_url"] = mask_url(settings.storage.database_url)
    data["storage"]["effective_database_url"] = mask_url(settings.storage.url)
    if settings.redis.url is not None:
        data["redis"]["url"] = mask_url(settings.redis.url.get_secret_value())
    return data


def mask_url(url: str) -> str:
    """Hide the password part of a URL (user:password@host)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
