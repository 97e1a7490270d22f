"""The settings of what the gateway runs on and reports to: ``storage`` (the database), ``redis`` (locks and
state shared by workers), ``metrics`` (the HTTP port) and ``logging``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, field_validator

from gateway.config.fields import SECTION


class StorageSettings(BaseModel):
    """Where sessions and messages live (R-S1)."""

    model_config = SECTION
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

    model_config = SECTION
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


class MetricsSettings(BaseModel):
    """Prometheus /metrics plus /healthz and /readyz on one HTTP port (off when ``port`` is unset)."""

    model_config = SECTION
    port: int | None = Field(default=None, ge=0, lt=65536)
    listen: str = "127.0.0.1"


class LoggingSettings(BaseModel):
    """Log output (see gateway/ops/logsetup.py)."""

    model_config = SECTION
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    json_logs: bool = False
    # True lets libraries log message payloads and SQL at DEBUG (still redacted); for debugging only.
    log_content: bool = False
