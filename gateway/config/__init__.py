"""One typed settings object read from config.yaml, .env and ``CONCORD_<SECTION>__<KEY>`` environment variables.

Precedence (highest first): init kwargs, environment, .env, config.yaml (``CONCORD_CONFIG`` or ./config.yaml),
defaults. Secrets are `SecretStr`: they print as ``**********`` and are never echoed in errors.

The sections live beside this root, one module per concern: `llm` (models, pricing, compression, context,
memory), `messages` (gateway, inbox, delivery, limits), `platforms` (Discord, Telegram), `services` (storage,
Redis, metrics, logging), `mcp` (tools), `fallbacks`; `fields` holds what they share, `errors` how a bad
configuration is told, `masking` how secrets are hidden, `cron` how a cron setting is read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from agent.compression.redact import redact_secrets
from gateway.config.errors import ConfigError, did_you_mean, format_errors
from gateway.config.llm import (
    AuxiliarySettings,
    CompressionSettings,
    ContextSettings,
    LLMSettings,
    MemorySettings,
    PricingSettings,
    PromptCachingSettings,
)
from gateway.config.masking import mask_urls
from gateway.config.mcp import ToolsSettings
from gateway.config.messages import DeliverySettings, GatewaySettings, InboxSettings, LimitsSettings
from gateway.config.platforms import DiscordSettings, TelegramSettings
from gateway.config.services import LoggingSettings, MetricsSettings, RedisSettings, StorageSettings

__all__ = ["ConfigError", "LimitsSettings", "PricingSettings", "Settings", "load_settings", "masked_dump",
           "summary_deadline_seconds", "unknown_env_sections"]


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
        hint = did_you_mean((section,), Settings.model_fields) or f" (sections: {', '.join(Settings.model_fields)})"
        lines.append(f"  {name}: unknown section {section!r}{hint}")
    return lines


def load_settings(**overrides: Any) -> Settings:
    """Read and validate the configuration; raise `ConfigError` with one readable message on any problem."""
    unknown = _unknown_section_lines(unknown_env_sections(os.environ))
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError("\n".join([format_errors(exc, Settings), *unknown])) from None
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
