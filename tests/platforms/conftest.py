"""Both real platform clients at once: the real gateway, built from one Settings object with a Discord and a
Telegram token, connected to the fake Discord and the fake Telegram Bot API, answering through the fake LLM.

This is what ``concord run`` does with both tokens set (`build_runtime` + `build_adapters` + `Gateway`); only
the platform addresses differ: discord.py's process-wide REST/gateway URLs are patched by the ``fake_discord``
fixture, and ``telegram.api_base_url`` points at the fake as it would at a local Bot API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.app import Gateway
from gateway.app.platforms import build_adapters
from gateway.app.runtime_parts import build_runtime
from tests.fakes.discord_fixture import fake_discord  # noqa: F401
from tests.fakes.discord_server import ADMIN_ROLE_ID, FakeDiscord
from tests.fakes.llm_fixture import fake_llm  # noqa: F401
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.telegram_fixture import fake_telegram  # noqa: F401
from tests.fakes.telegram_server import FakeTelegram
from tests.gateway.conftest import backend_storage, make_settings  # noqa: F401 (a fixture)

DISCORD_ADMIN = 77
TELEGRAM_ADMIN = 88


@dataclass
class Platforms:
    """A running gateway serving both fakes."""

    gateway: Gateway
    discord: FakeDiscord
    telegram: FakeTelegram
    llm: FakeLLMServer

    def sent_texts(self) -> list[str]:
        """Everything either platform recorded as sent by the bot: messages, interaction responses, edits."""
        return ([m.content for m in self.discord.sent_messages] + [r.content for r in self.discord.interaction_replies]
                + [m.text for m in self.telegram.sent_messages] + [str(e.get("text")) for e in self.telegram.edits])

    async def bulk_history(self, platform: str, chat_key: str, messages: list[dict[str, Any]]) -> str:
        """Store ``messages`` as the open session of ``platform``/``chat_key`` before the gateway loads it."""
        store, counter = self.gateway.rt.store, self.gateway.rt.counter
        record = await store.sessions.get_or_create_active(platform, chat_key)
        await store.messages.append(record.id, messages, [counter.count_message(m) for m in messages])
        return record.id

    async def session_id(self, platform: str, chat_key: str) -> str:
        """The id of the open session of ``platform``/``chat_key`` (which must exist)."""
        record = await self.gateway.rt.store.sessions.get_active(platform, chat_key)
        assert record is not None, f"no open session {platform}/{chat_key}"
        return record.id


async def until(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    """Wait until ``condition()`` holds (fails the test after ``within_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not condition():
        assert loop.time() < deadline, f"condition not met within {within_s} s"
        await asyncio.sleep(0.02)


PlatformsFactory = Callable[..., Awaitable[Platforms]]


@pytest.fixture
async def make_platforms(fake_discord: FakeDiscord, fake_telegram: FakeTelegram,  # noqa: F811
                         fake_llm: FakeLLMServer, tmp_path: Path) -> AsyncIterator[PlatformsFactory]:  # noqa: F811
    """Start the real gateway with the real DiscordAdapter and TelegramAdapter, built from settings
    (``discord={...}`` etc. add to the defaults); closed after the test."""
    started: list[Gateway] = []

    async def make(**sections: dict[str, Any]) -> Platforms:
        base: dict[str, dict[str, Any]] = {
            # A small window, so a few dozen stored messages are enough history for /compress to act on.
            "llm": {"context_length": 8_000},
            "gateway": {"admins": [f"discord:{DISCORD_ADMIN}", f"telegram:{TELEGRAM_ADMIN}"]},
            # Streaming off unless a test turns it on: a reply is then one message with its final text.
            "discord": {"token": fake_discord.token, "admin_role_ids": [str(ADMIN_ROLE_ID)], "streaming": False},
            "telegram": {"token": fake_telegram.token, "api_base_url": fake_telegram.api_root, "streaming": False},
        }
        for name, values in sections.items():
            base[name] = {**base.get(name, {}), **values}
        settings = make_settings(fake_llm, tmp_path, **base)
        gateway = Gateway(await build_runtime(settings), build_adapters(settings))
        started.append(gateway)
        await gateway.start()
        return Platforms(gateway, fake_discord, fake_telegram, fake_llm)

    yield make
    for gateway in started:
        await gateway.aclose(grace_seconds=5)


@pytest.fixture
async def platforms(make_platforms: PlatformsFactory) -> Platforms:
    """Both platforms served by one gateway with the default test settings."""
    return await make_platforms()
