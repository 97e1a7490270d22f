"""`concord config check` and configuration errors mask credentials in every URL setting (issue: secrets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config import ConfigError, load_settings
from gateway.config.masking import mask_url

URL_SETTINGS = {
    "CONCORD_LLM__BASE_URL": ("https://llmuser:LlmPass9x@llm.example.com/v1", "LlmPass9x"),
    "CONCORD_AUXILIARY__COMPRESSION__BASE_URL": ("https://aux:AuxPass7y@aux.example.com/v1", "AuxPass7y"),
    "CONCORD_TELEGRAM__API_BASE_URL": ("http://bot:TgPass5z@127.0.0.1:8081/bot", "TgPass5z"),
    "CONCORD_TELEGRAM__WEBHOOK_URL": ("https://hooks.example.com/tg?token=HookTok3w&x=1", "HookTok3w"),
    "CONCORD_STORAGE__DATABASE_URL": ("postgresql+asyncpg://bot:DbPass1q@db:5432/concord", "DbPass1q"),
    "CONCORD_REDIS__URL": ("redis://:RedisPass2e@cache:6379/0", "RedisPass2e"),
}


@pytest.mark.parametrize(("url", "masked"), [
    ("http://user:pw@h:1/v1", "http://user:***@h:1/v1"),
    ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
    ("https://bot.example.com/hook?token=abc123&x=1", "https://bot.example.com/hook?token=***&x=1"),
    ("https://h/x?api_key=Zk3L9qP2mX7vB4nR&page=2#top", "https://h/x?api_key=***&page=2#top"),
    ("postgresql+asyncpg://postgres@127.0.0.1:5432/test", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"),
    ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
    ("http://127.0.0.1:8081/bot123:abc/getMe", "http://127.0.0.1:8081/bot***/getMe"),
])
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_a_token_as_user_name_is_redacted() -> None:
    assert "ghp_" not in mask_url("https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/org/repo")


def test_config_check_masks_every_url_setting(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key, (url, _) in URL_SETTINGS.items():
        monkeypatch.setenv(key, url)
    monkeypatch.setenv("CONCORD_LLM__MODEL", "m")
    assert main(["config", "check"]) == 0
    out = capsys.readouterr()
    printed = out.out + out.err
    for _, secret in URL_SETTINGS.values():
        assert secret not in printed
    data = json.loads(out.out)
    assert data["llm"]["base_url"] == "https://llmuser:***@llm.example.com/v1"
    assert data["telegram"]["webhook_url"] == "https://hooks.example.com/tg?token=***&x=1"


@pytest.mark.parametrize("key", ["base_url", "api_base_url", "webhook_url", "database_url"])
def test_a_non_string_url_value_is_named_by_type_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     key: str) -> None:
    section = {"base_url": "llm", "api_base_url": "telegram", "webhook_url": "telegram",
               "database_url": "storage"}[key]
    config = tmp_path / "config.yaml"
    config.write_text(f"{section}:\n  {key}:\n    user: admin\n    password: YamlPass8r\n")
    monkeypatch.setenv("CONCORD_CONFIG", str(config))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "YamlPass8r" not in str(info.value) and "<dict>" in str(info.value) and key in str(info.value)


def test_an_invalid_url_is_shown_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_STORAGE__DATABASE_URL", "mysql://root:MyPass4t@db/app")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "MyPass4t" not in str(info.value) and "mysql://root:***@db/app" in str(info.value)


def test_an_unreadable_config_file_error_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("llm:\n  api_key: sk-proj-Zk3L9qP2mX7vB4nRtY8wQ1eA\n  base_url: [unclosed\n")
    monkeypatch.setenv("CONCORD_CONFIG", str(config))
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "sk-proj-Zk3L9qP2" not in str(info.value)
