"""Pytest fixtures for the fake Discord. Import them into a conftest:
``from tests.fakes.discord_fixture import fake_discord, discord_settings  # noqa: F401``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.discord_adapter import DiscordSettings
from tests.fakes.discord_server import ADMIN_ROLE_ID, FakeDiscord


@pytest.fixture
async def fake_discord(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeDiscord]:
    """A started fake Discord; discord.py's REST base and gateway URL point at it for this test."""
    fake = FakeDiscord()
    await fake.start()
    fake.patch_client_urls(monkeypatch)
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def discord_settings(fake_discord: FakeDiscord) -> DiscordSettings:
    """Adapter settings for the fake: its token, the fake guild's "Admins" role, short test timings."""
    return DiscordSettings(token=fake_discord.token, admin_role_ids=(ADMIN_ROLE_ID,), typing_interval=0.2,
                           ready_timeout=10.0, drain_seconds=5.0)
