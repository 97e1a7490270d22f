"""The Discord connection under supervision, through the real discord.py client against the fake Discord:
malformed gateway frames (each skipped on the same connection; a broken compressed stream resumed), unreadable
events, an unreachable Discord at start-up, a connection that cannot recover."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from adapters.discord_adapter import DiscordAdapter, DiscordSettings
from adapters.supervise import Backoff
from tests.fakes.discord_server import DM_CHANNEL_ID, FakeDiscord
from tests.fakes.inbox import Inbox

FAST = Backoff(first=0.05, ceiling=0.2, max_failures=3, healthy_after=60.0)


async def _started(settings: DiscordSettings, inbox: Inbox) -> DiscordAdapter:
    adapter = DiscordAdapter(replace(settings, backoff=FAST))
    await adapter.start(inbox)
    return adapter


BAD_FRAMES = [
    "not json", "[1,2,3]", '"hello"', "{\"op\": 0, \"t\": \"MESSAGE_CREATE\"",  # not a JSON object
    '{"op": 0, "t": "READY", "s": 99, "d": {"user": {}}}',  # a READY discord.py cannot read
    '{"op": 0, "t": ["MESSAGE_CREATE"], "s": 99, "d": {}}',  # an event name that is no name
    '{"op": 10, "d": {}}',  # a HELLO without its interval
]


@pytest.mark.parametrize("frame", BAD_FRAMES)
async def test_an_unreadable_frame_costs_that_frame_not_the_session(
    fake_discord: FakeDiscord, discord_settings: DiscordSettings, caplog: pytest.LogCaptureFixture, frame: str
) -> None:
    """The session goes on on the same connection: no reconnect, no new IDENTIFY (before: both), one line."""
    inbox = Inbox()
    adapter = await _started(discord_settings, inbox)
    try:
        connections = len(fake_discord.connections)
        with caplog.at_level(logging.INFO):
            await fake_discord.send_raw(frame)
            await fake_discord.inject_message("still there?", channel_id=DM_CHANNEL_ID)
            [inbound] = await inbox.wait_for(1)
        assert inbound.text == "still there?" and inbound.chat_type == "dm"
        assert fake_discord.identify_count == 1 and fake_discord.resumes == []
        assert len(fake_discord.connections) == connections and fake_discord.open_connections()
        [skipped] = [r for r in caplog.records if "unreadable gateway frame" in r.getMessage()]
        assert skipped.levelno == logging.WARNING and skipped.exc_info is None and "\n" not in skipped.getMessage()
        assert "connection lost" not in caplog.text
    finally:
        await adapter.stop()


async def test_a_compressed_frame_that_cannot_be_inflated_costs_a_resume_not_an_identify(
    fake_discord: FakeDiscord, discord_settings: DiscordSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """A broken zlib stream spoils every frame after it: the socket is closed and the session RESUMEd, so
    Discord replays what was sent meanwhile to the same session."""
    inbox = Inbox()
    adapter = await _started(discord_settings, inbox)
    try:
        with caplog.at_level(logging.INFO):
            await fake_discord.send_raw(b"this is not zlib\x00\x00\xff\xff")
            for _ in range(200):
                if fake_discord.resumes:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # RESUMED handled
            await fake_discord.inject_message("resumed?", channel_id=DM_CHANNEL_ID)
            [inbound] = await inbox.wait_for(1)
        assert inbound.text == "resumed?"
        assert fake_discord.identify_count == 1 and [r["session_id"] for r in fake_discord.resumes] == [
            "fake-session-1"]
        assert "could not be inflated" in caplog.text and "connection lost" not in caplog.text
    finally:
        await adapter.stop()


async def test_unreadable_events_are_skipped_with_one_line(
    fake_discord: FakeDiscord, discord_settings: DiscordSettings, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    adapter = await _started(discord_settings, inbox)
    try:
        good = fake_discord.make_message("placeholder", channel_id=DM_CHANNEL_ID)
        image = {"id": "9", "filename": "a.png", "size": "12", "url": "http://x/a.png", "proxy_url": "http://x/a.png",
                 "content_type": "image/png"}
        with caplog.at_level(logging.WARNING):
            await fake_discord.dispatch("MESSAGE_CREATE", {**good, "id": "501", "content": None})
            await fake_discord.dispatch("MESSAGE_CREATE", {**good, "id": "502", "content": 12345})
            await fake_discord.dispatch("MESSAGE_CREATE", {**good, "id": "503", "attachments": [image]})
            await fake_discord.dispatch("MESSAGE_CREATE", {**good, "id": "504", "content": "bad \ud800 half"})
            await fake_discord.dispatch("MESSAGE_CREATE", {**good, "id": "505", "content": "nul \x00 here"})
            [surrogate, nul] = await inbox.wait_for(2)
        assert surrogate.text == "bad \ufffd half" and nul.text == "nul \ufffd here"
        skipped = [r for r in caplog.records if "skipping" in r.getMessage()]
        assert len(skipped) == 3 and all(r.exc_info is None for r in skipped)
    finally:
        await adapter.stop()


async def test_an_unreachable_discord_at_start_is_retried_in_one_line_each(
    fake_discord: FakeDiscord, discord_settings: DiscordSettings, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import discord

    monkeypatch.setattr(discord.http.Route, "BASE", "http://127.0.0.1:9/api/v10")  # nothing listens on port 9
    adapter = DiscordAdapter(replace(discord_settings, backoff=FAST))
    with caplog.at_level(logging.WARNING), pytest.raises(ConnectionError, match="failed 3 times"):
        await adapter.start(Inbox())
    retries = [r for r in caplog.records if "discord: login failed" in r.getMessage()]
    assert len(retries) == 2 and all(r.exc_info is None and "\n" not in r.getMessage() for r in retries)
    await adapter.stop()


async def test_a_connection_that_keeps_dying_is_given_up(
    fake_discord: FakeDiscord, discord_settings: DiscordSettings, caplog: pytest.LogCaptureFixture
) -> None:
    """Discord closing with a code discord.py will not reconnect on (4012, invalid API version): rebuilt from
    login, one line each time, until the supervisor gives up."""
    adapter = await _started(discord_settings, Inbox())
    try:
        for _ in range(FAST.max_failures + 1):
            before = fake_discord.identify_count
            await fake_discord.close_connections(4012)
            for _ in range(200):
                if fake_discord.identify_count > before or adapter._supervisor.failed.done():  # type: ignore[union-attr]
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
        cause = await asyncio.wait_for(adapter.wait_failed(), 5)
        assert "connection lost" in str(cause) and "4012" in str(cause)
        assert "giving up" in caplog.text
    finally:
        await adapter.stop()


def test_discord_py_reconnect_tracebacks_become_one_line(discord_settings: DiscordSettings,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    DiscordAdapter(discord_settings)
    library = logging.getLogger("discord.client")
    with caplog.at_level(logging.ERROR, logger="discord.client"):
        try:
            raise OSError("Connection reset by peer")
        except OSError:
            library.exception("Attempting a reconnect in %.2fs", 1.5)
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert record.getMessage() == ("discord: gateway connection dropped (OSError: Connection reset by peer); "
                                   "discord.py reconnects in 1.50s")
    assert record.exc_info is None and "Traceback" not in caplog.text
