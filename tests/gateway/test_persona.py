"""Persona and model settings: gateway.system_prompt (text or @file, placeholders), /persona per chat (admins,
stored, surviving a restart), llm.temperature on every agent call."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_settings
from gateway.conversation.commands import REFUSAL
from tests.fakes.llm_server import FakeLLMServer
from tests.gateway.conftest import GatewayFactory


def _system(fake_llm: FakeLLMServer) -> str:
    first = fake_llm.requests[-1].messages[0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_configured_persona_with_placeholders_and_temperature(gateway_factory: GatewayFactory,
                                                                    fake_llm: FakeLLMServer) -> None:
    _, adapter = await gateway_factory(
        gateway={"bot_name": "Ziggy", "system_prompt": "You are {bot_name}, a grumpy librarian on {platform}."},
        llm={"temperature": 0.3})
    await adapter.say("hello")
    system = _system(fake_llm)
    assert system.startswith("You are Ziggy, a grumpy librarian on Discord. Markdown is rendered.")
    assert "helpful assistant" not in system
    assert fake_llm.requests[-1].json["temperature"] == 0.3


async def test_persona_from_a_file(gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    persona = tmp_path / "persona.txt"
    persona.write_text("You are {bot_name}, the ops on-call buddy.\nBe terse.\n", encoding="utf-8")
    _, adapter = await gateway_factory(gateway={"system_prompt": f"@{persona}"})
    await adapter.say("hello")
    assert _system(fake_llm).startswith("You are Concord, the ops on-call buddy.\nBe terse.")
    assert "temperature" not in fake_llm.requests[-1].json


@pytest.mark.parametrize(("value", "needle"), [
    ("Hi {user}", "unknown placeholder {user}"),
    ("a { b", "stray brace"),
    ("@/no/such/persona.txt", "cannot read the persona file"),
])
def test_bad_persona_settings_are_one_clear_error(value: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=r"gateway\.system_prompt") as caught:
        load_settings(gateway={"system_prompt": value})
    assert needle in str(caught.value)
    with pytest.raises(ConfigError, match=r"llm\.temperature"):
        load_settings(llm={"temperature": 3})


async def test_persona_override_per_chat_by_admins_survives_a_restart(gateway_factory: GatewayFactory,
                                                                      fake_llm: FakeLLMServer) -> None:
    group = {"chat_type": "group", "chat_id": "g1"}
    gateway, adapter = await gateway_factory()
    await adapter.say("/persona You are a pirate. Arr.", user_id="u1", **group)
    assert adapter.texts() == [REFUSAL.format(name="persona")]
    await adapter.say("/persona You are a pirate. Arr.", user_id="boss", **group)
    assert adapter.texts()[-1] == "Persona set for this chat; it applies from the next answer."
    await adapter.say("ahoy", user_id="u1", mentions_bot=True, **group)
    assert _system(fake_llm).startswith("You are a pirate. Arr. Markdown is rendered.")
    await adapter.say("hello", chat_id="other-dm")  # other chats keep the configured persona
    assert "helpful assistant" in _system(fake_llm)
    await gateway.aclose()

    _, again = await gateway_factory()
    await again.say("still there?", user_id="u1", mentions_bot=True, **group)
    assert _system(fake_llm).startswith("You are a pirate. Arr.")
    await again.say("/persona", user_id="boss", **group)
    assert again.texts()[-1] == "This chat's persona: You are a pirate. Arr."
    await again.say("/persona reset", user_id="boss", **group)
    await again.say("and now?", user_id="u1", mentions_bot=True, **group)
    assert "helpful assistant" in _system(fake_llm)
