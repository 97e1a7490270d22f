"""Settings: sources, precedence, validation messages, secret masking."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from gateway.config import ConfigError, load_settings, masked_dump

SECRET = "sk-live-abcdef1234567890"


def test_defaults() -> None:
    s = load_settings()
    assert s.compression.threshold == 0.50
    assert s.compression.target_ratio == 0.20
    assert (s.compression.protect_first_n, s.compression.protect_last_n) == (3, 20)
    assert s.compression.in_place and s.compression.autoraise and not s.compression.abort_on_summary_failure
    assert s.gateway.hygiene_threshold == 0.85 and s.gateway.hygiene_hard_message_limit == 5000
    assert s.context.engine == "compressor"
    assert s.prompt_caching.cache_ttl == "5m"
    assert s.storage.url.startswith("sqlite+aiosqlite:///") and s.storage.url.endswith("data/concord.db")
    assert s.redis.url is None
    assert not s.llm.configured


def test_yaml_then_env_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "llm:\n  model: from-yaml\n  base_url: http://127.0.0.1:9/v1\ncompression:\n  threshold: 0.6\n"
    )
    monkeypatch.setenv("CONCORD_COMPRESSION__THRESHOLD", "0.7")
    s = load_settings()
    assert s.llm.model == "from-yaml"
    assert s.compression.threshold == 0.7
    assert s.llm.configured


def test_config_path_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.yaml"
    other.write_text("gateway:\n  hygiene_hard_message_limit: 777\n")
    monkeypatch.setenv("CONCORD_CONFIG", str(other))
    assert load_settings().gateway.hygiene_hard_message_limit == 777
    monkeypatch.setenv("CONCORD_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match=r"missing\.yaml"):
        load_settings()


def test_dotenv_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CONCORD_TELEGRAM__TOKEN=123:abc\nCONCORD_REDIS__URL=redis://127.0.0.1:6379/0\n")
    s = load_settings()
    assert s.telegram.token is not None and s.telegram.token.get_secret_value() == "123:abc"
    assert s.redis.url is not None


def test_admins_from_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_GATEWAY__ADMINS", "discord:42, telegram:7")
    assert load_settings().gateway.admins == ["discord:42", "telegram:7"]


@pytest.mark.parametrize(
    ("env", "value", "fragment"),
    [
        ("CONCORD_PROMPT_CACHING__CACHE_TTL", "2h", "prompt_caching.cache_ttl = '2h': Input should be '5m' or '1h'"),
        ("CONCORD_COMPRESSION__THRESHOLD", "1.7", "compression.threshold = '1.7'"),
        ("CONCORD_GATEWAY__ADMINS", "slack:1", "discord:<user id>"),
        ("CONCORD_GATEWAY__SWEEP_CRON", "every day", "crontab"),
        ("CONCORD_STORAGE__DATABASE_URL", "mysql://x", "sqlite+aiosqlite://"),
        ("CONCORD_LLM__PROVIDER", "gemini", "'openai' or 'anthropic'"),
        ("CONCORD_TELEGRAM__MODE", "webhook", "webhook_url"),
    ],
)
def test_invalid_values_name_key_value_and_allowed(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, fragment: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert fragment in str(info.value)


def test_unknown_yaml_key_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("compression:\n  treshold: 0.5\n")
    with pytest.raises(ConfigError, match=r"compression\.treshold: unknown setting"):
        load_settings()


def test_malformed_yaml_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("llm: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot read configuration"):
        load_settings()


def test_secrets_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_LLM__API_KEY", SECRET)
    monkeypatch.setenv("CONCORD_STORAGE__DATABASE_URL", "postgresql+asyncpg://bot:hunter2pass@db:5432/concord")
    monkeypatch.setenv("CONCORD_REDIS__URL", "redis://:redispass99@cache:6379/0")
    s = load_settings()
    dumped = repr(masked_dump(s))
    assert SECRET not in dumped and "hunter2pass" not in dumped and "redispass99" not in dumped
    assert SECRET not in repr(s)
    # An invalid secret value is not echoed either.
    monkeypatch.setenv("CONCORD_REDIS__URL", "http://:redispass99@cache")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "redispass99" not in str(info.value) and "redis.url" in str(info.value)


def test_env_example_loads_as_dotenv_and_documents_every_key(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / ".env.example"
    (tmp_path / ".env").write_text(example.read_text())
    settings = load_settings()
    assert settings.gateway.sweep_cron == "*/30 * * * *"
    documented = {line.split("=", 1)[0] for line in example.read_text().splitlines() if line.startswith("CONCORD_")}
    expected = set()
    for section, model in settings:
        for key, value in model:
            if isinstance(value, BaseModel):
                expected |= {f"CONCORD_{section}__{key}__{sub}".upper() for sub in type(value).model_fields}
            else:
                expected.add(f"CONCORD_{section}__{key}".upper())
    assert expected - documented == set()


def test_session_scope_per_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_GATEWAY__SESSION_SCOPE_BY_PLATFORM", '{"telegram": "per-user"}')
    gateway = load_settings().gateway
    assert gateway.scope_for("telegram") == "per-user"
    assert gateway.scope_for("discord") == "shared"
    monkeypatch.setenv("CONCORD_GATEWAY__SESSION_SCOPE_BY_PLATFORM", '{"irc": "per-user"}')
    with pytest.raises(ConfigError, match="session_scope_by_platform"):
        load_settings()


def test_discord_role_ids_must_be_numeric(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_DISCORD__ADMIN_ROLE_IDS", "1234567890, 42")
    assert load_settings().discord.admin_role_ids == ["1234567890", "42"]
    monkeypatch.setenv("CONCORD_DISCORD__ADMIN_ROLE_IDS", "Moderators")
    with pytest.raises(ConfigError, match="admin_role_names"):
        load_settings()


def test_delivery_windows_must_nest(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().delivery.keep_seconds == 7 * 86400
    monkeypatch.setenv("CONCORD_DELIVERY__KEEP_SECONDS", "600")  # shorter than the 3,600 s freshness
    with pytest.raises(ConfigError, match=r"keep_seconds must be longer than delivery\.freshness_seconds"):
        load_settings()
