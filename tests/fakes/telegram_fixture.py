"""Pytest fixtures for the fake Telegram Bot API. Import them into a conftest:
``from tests.fakes.telegram_fixture import fake_telegram, telegram_settings  # noqa: F401``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.telegram_adapter import TelegramSettings
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
async def fake_telegram() -> AsyncIterator[FakeTelegram]:
    """A started fake Bot API on a free loopback port."""
    fake = FakeTelegram()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
def telegram_settings(fake_telegram: FakeTelegram) -> TelegramSettings:
    """Adapter settings pointing at the fake (as a local Bot API server), with short test timings."""
    return TelegramSettings(
        token=fake_telegram.token,
        api_base_url=fake_telegram.api_root,
        poll_timeout=1,
        typing_interval=0.2,
        drain_seconds=5.0,
    )
