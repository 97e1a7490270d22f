"""Model failover and /model through the router: two fake LLM servers on 127.0.0.1, a real SQLite store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.intake.keys import SessionKey
from tests.fakes.llm_server import ErrorReply, FakeLLMServer, Reply
from tests.gateway.conftest import GatewayFactory

MAIN_WINDOW, BACKUP_WINDOW = 200_000, 16_000


@pytest.fixture
async def backup() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        server.default_text = "backup answer"
        yield server


def llm_with_backup(backup: FakeLLMServer, cooldown: float = 1.5) -> dict[str, Any]:
    return {"fallbacks": [{"model": "backup-model", "base_url": backup.openai_base_url,
                           "context_length": BACKUP_WINDOW}],
            "fallback_cooldown_seconds": cooldown}


class Outage:
    """The main server answers 503 while ``down``."""

    def __init__(self, server: FakeLLMServer) -> None:
        self.down = True
        server.responder = self.respond

    def respond(self, body: dict[str, Any]) -> ErrorReply | Reply:
        if self.down:
            return ErrorReply(503, '{"error": {"message": "Service Unavailable", "type": "server_error"}}')
        return Reply("main answer")


def tokens_of(gateway: Any, model: str) -> float:
    value = gateway.rt.metrics.instruments.registry.get_sample_value(
        "concord_llm_tokens_total", {"model": model, "purpose": "agent", "type": "prompt"})
    return value or 0.0


async def test_a_503_main_model_is_answered_by_the_fallback_with_a_notice_then_returns_after_the_cooldown(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, backup: FakeLLMServer) -> None:
    outage = Outage(fake_llm)
    gateway, adapter = await gateway_factory(llm=llm_with_backup(backup))

    await adapter.say("first question")
    first = adapter.texts()[-1]
    assert first.startswith("backup answer")
    assert "Answered by backup-model: fake-model is failing" in first
    main_requests = len(fake_llm.requests)
    assert main_requests == 3, "the main model's own retries ran before failing over"
    live = gateway.sessions.cached(SessionKey("discord", "dm:c1"))
    assert live is not None
    # Budgets follow the model that answers; its usage is accounted under its own name.
    assert live.engine.context_length == BACKUP_WINDOW
    assert tokens_of(gateway, "backup-model") > 0 and tokens_of(gateway, "fake-model") == 0
    # The stored answer is the model's own text: the notice is for the chat, not for the history.
    assert live.messages[-1]["content"] == "backup answer"

    await adapter.say("second question")
    assert adapter.texts()[-1] == "backup answer", "told once per fallback episode"
    assert len(fake_llm.requests) == main_requests, "the failed model is skipped during its cooldown"

    outage.down = False
    await asyncio.sleep(1.6)
    await adapter.say("third question")
    assert adapter.texts()[-1] == "main answer"
    assert live.engine.context_length == MAIN_WINDOW
    assert "second question" in str(fake_llm.last_request.messages), "the main model sees the whole conversation"


async def test_model_command_picks_a_stored_model_for_the_chat_and_failover_says_when_it_is_replaced(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, backup: FakeLLMServer) -> None:
    fake_llm.default_text = "main answer"
    gateway, adapter = await gateway_factory(llm=llm_with_backup(backup, cooldown=60))

    await adapter.say("/model")
    listing = adapter.texts()[-1]
    assert "This chat's model: fake-model (the main model)" in listing
    assert "Models: fake-model (main), backup-model" in listing
    await adapter.say("/model backup-model")
    assert "only admins" in adapter.texts()[-1]
    await adapter.say("/model nonesuch", user_id="boss")
    assert "No model called 'nonesuch'" in adapter.texts()[-1]
    await adapter.say("/model backup-model", user_id="boss")
    assert "now backup-model" in adapter.texts()[-1]

    await adapter.say("hello")
    assert adapter.texts()[-1] == "backup answer"
    await adapter.say("/status")
    assert "Model: backup-model" in adapter.texts()[-1]

    # The choice is stored: a restarted gateway keeps it.
    await gateway.aclose(grace_seconds=5)
    gateway, adapter = await gateway_factory(llm=llm_with_backup(backup, cooldown=60))
    await adapter.say("after restart")
    assert adapter.texts()[-1] == "backup answer"
    live = gateway.sessions.cached(SessionKey("discord", "dm:c1"))
    assert live is not None
    assert live.engine.context_length == BACKUP_WINDOW

    # The chosen model failing is never swapped silently.
    backup.fail("auth")  # a broken setup does not fail over: the chat hears the error
    await adapter.say("broken key")
    assert "refused the credentials" in adapter.texts()[-1]
    backup.fail("server_error", times=3)
    await adapter.say("chosen model down")
    assert adapter.texts()[-1] == "main answer\n\nℹ️ Answered by fake-model: backup-model is failing; it is tried " \
                                  "again after 60 s."

    await adapter.say("/model reset", user_id="boss")
    assert "main model again: fake-model" in adapter.texts()[-1]
    await gateway.aclose(grace_seconds=5)
    gateway, adapter = await gateway_factory(llm=llm_with_backup(backup, cooldown=60))
    await adapter.say("/model")
    assert "This chat's model: fake-model (the main model)" in adapter.texts()[-1]


async def test_a_fallback_answers_within_the_window_its_own_server_reports(
        gateway_factory: GatewayFactory, fake_llm: FakeLLMServer, backup: FakeLLMServer) -> None:
    # The fallback's server says it serves 8,192 tokens (llama.cpp /props) though 16,000 are configured: its
    # window is asked of its own server at start-up, like the main model's, and budgets follow it.
    backup.reports_window = ("llamacpp", 8_192)
    Outage(fake_llm)
    gateway, adapter = await gateway_factory(llm=llm_with_backup(backup))
    backup_route = gateway.rt.provider.routes[1]
    assert backup_route.window is not None and backup_route.window.tokens == 8_192
    assert gateway.rt.provider.main.window is gateway.rt.window  # the main model's is the runtime's

    await adapter.say("first question")
    live = gateway.sessions.cached(SessionKey("discord", "dm:c1"))
    assert live is not None and live.engine.context_length == 8_192
    assert backup.last_request.json["max_tokens"] <= 8_192 // 4
