"""The providers the gateway builds follow `llm.*`, `auxiliary.compression.*` and `prompt_caching.*` (R-K2)."""

from __future__ import annotations

import json

import pytest

from gateway.app.providers import main_provider_for, summary_provider_for
from gateway.config import Settings, load_settings
from tests.fakes.llm_server import FakeLLMServer


def _settings(server: FakeLLMServer, **caching: object) -> Settings:
    return load_settings(llm={"provider": "anthropic", "base_url": server.base_url, "api_key": "sk-ant-test-key-1",
                              "model": "claude-sonnet-4"},
                         prompt_caching=caching or {})


@pytest.mark.parametrize(("ttl", "expected"), [("5m", {"type": "ephemeral"}),
                                               ("1h", {"type": "ephemeral", "ttl": "1h"})])
async def test_cache_markers_use_the_configured_ttl(fake_llm: FakeLLMServer, ttl: str, expected: dict) -> None:
    provider = main_provider_for(_settings(fake_llm, cache_ttl=ttl))
    try:
        await provider.complete([{"role": "user", "content": "hi"}], system="be brief")
    finally:
        await provider.aclose()
    body = fake_llm.requests[-1].json
    markers = [block["cache_control"] for block in body["system"] if "cache_control" in block]
    assert markers and all(m == expected for m in markers)


async def test_caching_can_be_switched_off(fake_llm: FakeLLMServer) -> None:
    provider = main_provider_for(_settings(fake_llm, enabled=False))
    try:
        await provider.complete([{"role": "user", "content": "hi"}], system="be brief")
    finally:
        await provider.aclose()
    assert "cache_control" not in json.dumps(fake_llm.requests[-1].json)


async def test_summary_provider_is_the_main_one_unless_configured_apart(fake_llm: FakeLLMServer) -> None:
    settings = _settings(fake_llm)
    main = main_provider_for(settings)
    try:
        assert summary_provider_for(settings, main) is main
        apart = load_settings(llm=settings.llm.model_dump(), auxiliary={"compression": {"model": "claude-haiku-4"}})
        summary = summary_provider_for(apart, main)
        assert summary is not main and summary.model == "claude-haiku-4"
        await summary.aclose()
    finally:
        await main.aclose()
