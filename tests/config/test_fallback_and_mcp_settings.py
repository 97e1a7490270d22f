"""``llm.fallbacks`` and ``tools.mcp_servers``: lists of objects from environment JSON, validation, masking."""

from __future__ import annotations

import json

import pytest

from gateway.config import ConfigError, load_settings, masked_dump

KEY = "sk-fallback-0123456789abcdef"
TOKEN = "ghp_mcpheadertoken0123456789abcdef0123"


def test_lists_of_objects_come_from_json_in_the_environment_and_secrets_stay_masked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONCORD_LLM__MODEL", "main-model")
    monkeypatch.setenv("CONCORD_LLM__FALLBACKS", json.dumps(
        [{"model": "gpt-4o-mini", "base_url": "https://api.openai.com/v1", "api_key": KEY, "context_length": 128000},
         {"model": "gpt-4o-mini", "name": "mini-router", "base_url": "https://openrouter.ai/api/v1"}]))
    monkeypatch.setenv("CONCORD_TOOLS__MCP_SERVERS", json.dumps(
        [{"name": "time", "command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
         {"name": "docs", "url": "https://mcp.example.invalid/mcp", "headers": {"Authorization": f"Bearer {TOKEN}"},
          "allow_platforms": ["discord"], "tools": ["search"]}]))
    settings = load_settings()
    assert [f.label for f in settings.llm.fallbacks] == ["gpt-4o-mini", "mini-router"]
    spec = settings.tools.mcp_servers[1].spec()
    assert spec.headers == {"Authorization": f"Bearer {TOKEN}"} and spec.allow_platforms == {"discord"}
    dumped = json.dumps(masked_dump(settings))
    assert KEY not in dumped and TOKEN not in dumped and TOKEN not in repr(spec)


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("CONCORD_LLM__FALLBACKS", [{"model": "main-model"}], "used twice"),
    ("CONCORD_LLM__FALLBACKS", [{"model": "x", "api_kee": "typo"}], "api_kee: unknown setting"),
    ("CONCORD_TOOLS__MCP_SERVERS", [{"name": "both", "command": "x", "url": "http://127.0.0.1/mcp"}],
     "exactly one of `command`"),
    ("CONCORD_TOOLS__MCP_SERVERS", [{"name": "t", "command": "a"}, {"name": "t", "command": "b"}],
     "names must be unique"),
    ("CONCORD_TOOLS__MCP_SERVERS", [{"name": "bad name", "command": "a"}], "tools.mcp_servers.0.name"),
    ("CONCORD_TOOLS__MCP_SERVERS", [{"name": "c", "command": "a", "allow_chats": ["slack:1"]}],
     "must look like discord:<chat id>"),
])
def test_bad_entries_are_named(monkeypatch: pytest.MonkeyPatch, variable: str, value: object,
                               message: str) -> None:
    monkeypatch.setenv("CONCORD_LLM__MODEL", "main-model")
    monkeypatch.setenv(variable, json.dumps(value))
    with pytest.raises(ConfigError, match=message):
        load_settings()
