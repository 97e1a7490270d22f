"""Fake platform fixtures for the adapter tests."""

from tests.fakes.telegram_fixture import fake_telegram, telegram_settings  # noqa: F401
