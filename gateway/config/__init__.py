"""One typed settings object read from config.yaml, .env and ``CONCORD_<SECTION>__<KEY>`` environment variables.

Precedence (highest first): init kwargs, environment, .env, config.yaml (``CONCORD_CONFIG`` or ./config.yaml),
defaults. Secrets are `SecretStr`: they print as ``**********`` and are never echoed in errors.
"""

from __future__ import annotations

import difflib
import json
import os
import string
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
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

from agent.compression.redact import redact_secrets
from gateway.config.fallbacks import MAX_FALLBACKS, FallbackModel, check_model_names
from gateway.config.masking import describe_value, mask_url, mask_urls
from gateway.config.mcp import ToolsSettings

__all__ = ["ConfigError", "Settings", "load_settings", "mask_url", "masked_dump", "summary_deadline_seconds",
           "unknown_env_sections"]

_Section = ConfigDict(extra="forbid", validate_default=True)
# The largest windows offered today are 10M tokens; far beyond that a value is a typo, not a model.
MAX_CONTEXT_LENGTH = 100_000_000


def _split_csv(value: Any) -> Any:
    """A list from ``a,b`` or from a JSON list ``["a", "b"]`` (the usual pydantic-settings form)."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except ValueError:
            raise ValueError("looks like a JSON list but is not valid JSON") from None
        if not isinstance(items, list) or not all(isinstance(i, str | int) and not isinstance(i, bool)
                                                  for i in items):
            raise ValueError("a JSON list here must hold only strings or numbers")
        return [str(item).strip() for item in items if str(item).strip()]
    return [item.strip() for item in value.split(",") if item.strip()]


CsvList = Annotated[list[str], NoDecode]
_PLATFORMS = ("discord", "telegram", "console")


def _platform_ids(entries: list[str], what: str, kind: str) -> list[str]:
    """Check the ``platform:id`` form shared by admins and the access lists."""
    for entry in entries:
        platform, _, ident = entry.partition(":")
        if platform not in _PLATFORMS or not ident:
            raise ValueError(f"{what} {entry!r} must look like discord:<{kind} id>, telegram:<{kind} id> "
                             "or console:<name>")
    return entries


def _snowflake_list(ids: list[str], what: str) -> list[str]:
    for ident in ids:
        if not ident.isdigit():
            raise ValueError(f"{what} {ident!r} must be a numeric Discord id")
    return ids


class LLMSettings(BaseModel):
    """The main model the agent talks to."""

    model_config = _Section
    provider: Literal["openai", "anthropic"] = "openai"
    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str = ""
    # The model's window. Unset: what its server reports, else learned from the server, else the model table;
    # set: the smaller of this and the server's report (`agent.llm.window`).
    context_length: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
    max_tokens: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base"
    max_iterations: int = Field(default=20, ge=1, le=200)
    # None: the provider's default. Sent with every agent call (summaries keep their own settings).
    temperature: float | None = Field(default=None, ge=0, le=2)
    # Tried in order when the main model fails over (gateway/config/fallbacks.py); a failed model is skipped
    # for fallback_cooldown_seconds.
    fallbacks: list[FallbackModel] = Field(default=[], max_length=MAX_FALLBACKS)
    fallback_cooldown_seconds: float = Field(default=60.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _fallback_names(self) -> LLMSettings:
        check_model_names(self.model, self.fallbacks)
        return self

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
    protect_first_n: int = Field(default=3, ge=0, le=1000)
    protect_last_n: int = Field(default=20, ge=1, le=10_000)
    in_place: bool = True
    abort_on_summary_failure: bool = False
    autoraise: bool = True
    # Compact in the background, after an answer was sent, once past the soft mark (`agent.compression.pacing`).
    ahead_of_need: bool = True


class AuxiliaryModel(BaseModel):
    """A side model; every unset field falls back to the main model's."""

    model_config = _Section
    provider: Literal["openai", "anthropic"] | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: SecretStr | None = None
    context_length: int | None = Field(default=None, gt=0, le=MAX_CONTEXT_LENGTH)
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


PERSONA_FIELDS = frozenset({"bot_name", "platform"})


def read_persona(value: str) -> str:
    """``value`` itself, or the text of the file ``@path`` names."""
    if not value.startswith("@"):
        return value
    path = Path(value[1:]).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the persona file {path} ({type(exc).__name__})") from None


def check_persona_template(text: str) -> str:
    """Raise ValueError unless ``text`` uses only the {bot_name} / {platform} placeholders."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except ValueError as exc:
        raise ValueError(f"persona text has a stray brace ({exc}); write {{{{ and }}}} for literal braces") from None
    unknown = fields - PERSONA_FIELDS
    if unknown:
        raise ValueError(f"unknown placeholder {{{sorted(unknown)[0]}}}: only {{bot_name}} and {{platform}} are "
                         "filled in (write {{ and }} for literal braces)")
    return text


class GatewaySettings(BaseModel):
    """Session handling in front of the agent (R-G2…R-G6)."""

    model_config = _Section
    hygiene_threshold: float = Field(default=0.85, gt=0, le=1)
    hygiene_hard_message_limit: int = Field(default=5000, ge=10, le=10_000_000)
    # Up to a year: longer is "never", which is the empty value.
    idle_expiry_minutes: int | None = Field(default=None, gt=0, le=525_600)
    sweep_cron: str | None = "*/30 * * * *"
    admins: CsvList = []
    session_scope: Literal["shared", "per-user"] = "shared"
    # Per-platform overrides, e.g. {"telegram": "per-user"}; platforms not listed use session_scope.
    session_scope_by_platform: dict[Literal["discord", "telegram", "console"], Literal["shared", "per-user"]] = {}
    # observe: every visible group line is stored in its session (batched); addressed: unaddressed lines are
    # only kept in memory (group_context_limit of them) and handed to the next question.
    group_history: Literal["addressed", "observe"] = "observe"
    group_context_limit: int = Field(default=50, ge=0, le=10_000)
    # While the database is down, messages of a session wait in memory, in order, up to this many; the next
    # ones are answered "unavailable".
    held_messages_per_session: int = Field(default=500, ge=1, le=100_000)
    bot_name: str = "Concord"
    # Names this worker in the delivery ledger and logs; unset: <hostname>:<pid>.
    worker_id: str | None = Field(default=None, min_length=1, max_length=128)
    # How long a handled inbound id (Telegram update, Discord message) is remembered to drop redeliveries.
    dedupe_ttl_seconds: float = Field(default=172_800.0, gt=0)
    # Longest reply sent to a chat; a longer answer is cut with a note (the whole answer stays stored).
    max_reply_chars: int = Field(default=20_000, ge=500, le=1_000_000)
    # The persona: text, or @path to a file holding it; {bot_name} and {platform} are filled in. Unset: the
    # built-in one. Admins can override it per chat with /persona.
    system_prompt: str | None = None
    # Pinned rules per chat (/pin): at most this many, and this many tokens of them in all.
    pins_max_count: int = Field(default=20, ge=0, le=500)
    pins_max_tokens: int = Field(default=2_000, ge=0, le=100_000)
    # Touched every few seconds while the gateway runs; `concord health` (Docker HEALTHCHECK) reads its age.
    heartbeat_file: Path | None = None

    # Access control (`gateway.policy.access`): ``platform:id`` entries like ``admins``; an empty allow list allows all.
    allow_users: CsvList = []
    deny_users: CsvList = []
    allow_chats: CsvList = []
    # Ignored chats: nothing from them is answered or kept.
    deny_chats: CsvList = []
    # Group chats where every message is addressed to the bot (no mention needed).
    free_response_chats: CsvList = []
    dm_policy: Literal["open", "allowlist", "pairing"] = "open"
    pairing_code_minutes: int = Field(default=60, ge=1, le=7 * 24 * 60)
    # A message arriving while its session's turn runs: queue (answered after), interrupt (the sender's new
    # message cancels their running turn), collect (a sender's messages within the window become one turn).
    busy_mode: Literal["queue", "interrupt", "collect"] = "queue"
    collect_window_seconds: float = Field(default=2.0, gt=0, le=60)

    _split_lists = field_validator("admins", "allow_users", "deny_users", "allow_chats", "deny_chats",
                                   "free_response_chats", mode="before")(_split_csv)

    @field_validator("admins", "allow_users", "deny_users", "allow_chats", "deny_chats", "free_response_chats")
    @classmethod
    def _platform_id_format(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        what = {"admins": "admin", "allow_users": "user", "deny_users": "user"}.get(info.field_name or "", "chat")
        return _platform_ids(entries, what, "chat" if what == "chat" else "user")

    @field_validator("system_prompt")
    @classmethod
    def _persona_template(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        check_persona_template(read_persona(value))
        return value

    def persona_template(self) -> str | None:
        """The configured persona text (read from the file for ``@path``), or None for the built-in one."""
        return read_persona(self.system_prompt) if self.system_prompt else None

    def scope_for(self, platform: str) -> Literal["shared", "per-user"]:
        """The session scope of group chats on ``platform``."""
        return self.session_scope_by_platform.get(platform, self.session_scope)  # type: ignore[call-overload]

    @field_validator("sweep_cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value in (None, "", "off"):
            return None
        from gateway.config.cron import cron_trigger

        try:
            cron_trigger(value)
        except ValueError as exc:
            raise ValueError(f"not a crontab expression of 5 fields, or 6 with seconds first ({exc})") from None
        return value


class DeliverySettings(BaseModel):
    """The delivery ledger: answers are stored before they are sent and sent again, once, after a crash."""

    model_config = _Section
    # An answer still unconfirmed this long after it was stored is presumed lost with its worker: resent once.
    resend_after_seconds: float = Field(default=120.0, gt=0)
    # Unconfirmed answers older than this are not sent any more (marked expired).
    freshness_seconds: float = Field(default=3600.0, gt=0)
    # Answers no longer pending (sent, failed, expired) are deleted from the ledger this long after they were
    # stored; the history keeps every answer.
    keep_seconds: float = Field(default=7 * 86400.0, gt=0)

    @model_validator(mode="after")
    def _window(self) -> DeliverySettings:
        if self.freshness_seconds <= self.resend_after_seconds:
            raise ValueError("delivery.freshness_seconds must be longer than delivery.resend_after_seconds")
        if self.keep_seconds <= self.freshness_seconds:
            raise ValueError("delivery.keep_seconds must be longer than delivery.freshness_seconds")
        return self


class InboxSettings(BaseModel):
    """The inbox: messages a platform cannot deliver again (Discord, polled Telegram) kept until handled."""

    model_config = _Section
    # A kept message its worker stopped vouching for this long ago is presumed lost with that worker: another
    # worker handles it (its worker renews the claim every third of this while it lives).
    stale_after_seconds: float = Field(default=30.0, ge=1)


class MetricsSettings(BaseModel):
    """Prometheus /metrics plus /healthz and /readyz on one HTTP port (off when ``port`` is unset)."""

    model_config = _Section
    port: int | None = Field(default=None, ge=0, lt=65536)
    listen: str = "127.0.0.1"


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
    lock_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Every key Concord writes starts with this: two deployments on one Redis database need different ones.
    key_prefix: str = Field(default="concord:", min_length=1, max_length=64, pattern=r"^[^\s]+$")

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
                             mode="before")(_split_csv)

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

    model_config = _Section
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


class MemorySettings(BaseModel):
    """Built-in file memory (MEMORY.md per bot, USER.md per user)."""

    model_config = _Section
    enabled: bool = True
    directory: Path | None = None


class LimitsSettings(BaseModel):
    """How fast one user or chat may spend the model (`gateway.policy.limits`); unset or 0 means no limit.

    Kept in Redis when ``redis.url`` is set (shared by every worker), in-process otherwise. Admins are exempt.
    """

    model_config = _Section
    user_messages_per_minute: int | None = Field(default=None, ge=0, le=100_000)
    chat_messages_per_minute: int | None = Field(default=None, ge=0, le=100_000)
    # Prompt + completion tokens as the provider reports them, per UTC day.
    user_tokens_per_day: int | None = Field(default=None, ge=0, le=10**12)
    chat_tokens_per_day: int | None = Field(default=None, ge=0, le=10**12)
    # Messages of one session waiting behind the running one (admins and the console exempt); more get a notice.
    session_queue_depth: int = Field(default=20, ge=1, le=1000)


class PricingSettings(BaseModel):
    """What the model's tokens cost, in US dollars per million; with ``input`` and ``output`` set, /usage and
    /stats show costs (summary calls priced like the agent's). Cache reads and writes cost ``input`` unless set."""

    model_config = _Section
    input: float | None = Field(default=None, ge=0, le=100_000)
    output: float | None = Field(default=None, ge=0, le=100_000)
    cache_read: float | None = Field(default=None, ge=0, le=100_000)
    cache_write: float | None = Field(default=None, ge=0, le=100_000)

    @property
    def configured(self) -> bool:
        """Whether costs can be told (``input`` and ``output`` are set)."""
        return self.input is not None and self.output is not None


class LoggingSettings(BaseModel):
    """Log output (see gateway/ops/logsetup.py)."""

    model_config = _Section
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_logs: bool = False
    # True lets libraries log message payloads and SQL at DEBUG (still redacted); for debugging only.
    log_content: bool = False


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
    delivery: DeliverySettings = DeliverySettings()
    inbox: InboxSettings = InboxSettings()
    metrics: MetricsSettings = MetricsSettings()
    discord: DiscordSettings = DiscordSettings()
    telegram: TelegramSettings = TelegramSettings()
    memory: MemorySettings = MemorySettings()
    limits: LimitsSettings = LimitsSettings()
    pricing: PricingSettings = PricingSettings()
    logging: LoggingSettings = LoggingSettings()
    tools: ToolsSettings = ToolsSettings()

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
    return describe_value(key, value, secret=any(word in key for word in _SECRET_KEYS))


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        key = ".".join(str(p) for p in loc) or "(root)"
        message = err.get("msg", "invalid")
        if err.get("type") == "extra_forbidden":
            lines.append(f"  {key}: unknown setting{_did_you_mean(loc, _sibling_settings(loc))}")
            continue
        lines.append(f"  {key} = {_describe_value(loc, err.get('input'))}: {message}")
    return "invalid configuration:\n" + "\n".join(lines)


def _did_you_mean(loc: tuple[Any, ...], known: Iterable[str]) -> str:
    """" (did you mean llm.temperature?)" when a known name is close to the last part of ``loc``."""
    close = difflib.get_close_matches(str(loc[-1]).lower(), list(known), n=1, cutoff=0.7)
    return f" (did you mean {'.'.join([*map(str, loc[:-1]), close[0]])}?)" if close else ""


def _sibling_settings(loc: tuple[Any, ...]) -> list[str]:
    """The settings of the section that holds ``loc`` (empty when the path leads nowhere)."""
    model: Any = Settings
    for part in loc[:-1]:
        field = getattr(model, "model_fields", {}).get(str(part))
        if field is None:
            return []
        # A section typed `Model | None` is still that model.
        model = next((t for t in (field.annotation, *get_args(field.annotation)) if hasattr(t, "model_fields")), None)
    return list(getattr(model, "model_fields", {}))


def unknown_env_sections(environ: Mapping[str, str]) -> list[str]:
    """``CONCORD_<SECTION>__…`` variables whose section does not exist (a typo pydantic would silently skip)."""
    sections = set(Settings.model_fields)
    unknown = []
    for name in environ:
        upper = name.upper()
        if upper.startswith("CONCORD_") and "__" in upper:
            section = upper.removeprefix("CONCORD_").split("__", 1)[0].lower()
            if section not in sections:
                unknown.append(name)
    return sorted(unknown)


def _unknown_section_lines(names: list[str]) -> list[str]:
    lines = []
    for name in names:
        section = name.upper().removeprefix("CONCORD_").split("__", 1)[0].lower()
        hint = _did_you_mean((section,), Settings.model_fields) or f" (sections: {', '.join(Settings.model_fields)})"
        lines.append(f"  {name}: unknown section {section!r}{hint}")
    return lines


def load_settings(**overrides: Any) -> Settings:
    """Read and validate the configuration; raise `ConfigError` with one readable message on any problem."""
    unknown = _unknown_section_lines(unknown_env_sections(os.environ))
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError("\n".join([_format_errors(exc), *unknown])) from None
    except ConfigError:
        raise
    except (OSError, ValueError, yaml.YAMLError) as exc:  # unreadable / malformed YAML or .env
        raise ConfigError(f"cannot read configuration: {redact_secrets(str(exc))}") from None
    if unknown:
        raise ConfigError("\n".join(["invalid configuration:", *unknown]))
    return settings


def summary_deadline_seconds(settings: Settings) -> float:
    """How long one compaction may wait for its summary: twice the summary request's deadline."""
    return 2 * (settings.auxiliary.compression.timeout_seconds or settings.llm.timeout_seconds)


def masked_dump(settings: Settings) -> dict[str, Any]:
    """The effective configuration as plain data with every secret masked (URL credentials included)."""
    data = settings.model_dump(mode="json")
    data["storage"]["effective_database_url"] = settings.storage.url
    if settings.redis.url is not None:
        data["redis"]["url"] = settings.redis.url.get_secret_value()
    return mask_urls(data)
