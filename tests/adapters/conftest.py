"""Fake platform fixtures for the adapter tests."""

from tests.fakes.discord_fixture import discord_settings, fake_discord  # noqa: F401
from tests.fakes.telegram_fixture import fake_telegram, telegram_settings  # noqa: F401
