"""The Discord adapter driven through the real discord.py client against the fake Discord."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from adapters.base import ChatRef, Inbound, SendError
from adapters.discord_adapter import DiscordAdapter, DiscordSettings
from tests.adapters.test_split import _content, _fence_lines_balanced
from tests.fakes.discord_server import (
    ADMIN_ROLE_ID,
    BOT_ID,
    BOT_ROLE_ID,
    CHANNEL_ID,
    DM_CHANNEL_ID,
    GUILD_ID,
    THREAD_ID,
    FakeDiscord,
)
from tests.fakes.inbox import Inbox

StartFn = Callable[..., Awaitable[DiscordAdapter]]


@pytest.fixture
async def start_discord(discord_settings: DiscordSettings) -> AsyncIterator[StartFn]:
    """Start a DiscordAdapter on the fake with settings overrides; stopped after the test."""
    started: list[DiscordAdapter] = []

    async def start(inbox: Inbox, sleep: Any = asyncio.sleep, **overrides: Any) -> DiscordAdapter:
        adapter = DiscordAdapter(replace(discord_settings, **overrides), sleep=sleep)
        await adapter.start(inbox)
        started.append(adapter)
        return adapter

    yield start
    for adapter in started:
        await adapter.stop()


def _long_answer() -> str:
    prose = "\n\n".join(f"Point {i}: the gateway keeps one session per channel. " * 5 for i in range(24))
    code = "\n".join(f"    total += weights[{i}] * values[{i}]  # term {i}" for i in range(110))
    return f"{prose}\n\n```python\ndef score(weights, values):\n    total = 0\n{code}\n    return total\n```\nDone."


async def test_guild_mention_reply_arrives_as_valid_chunks(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    answer = _long_answer()
    assert len(answer) > 9000
    adapter: DiscordAdapter | None = None

    async def reply(inbound: Inbound) -> None:
        assert adapter is not None
        await adapter.send(inbound, answer)

    inbox = Inbox(reply)
    adapter = await start_discord(inbox)
    assert fake_discord.identify is not None and fake_discord.identify["intents"] & (1 << 15)
    sent = await fake_discord.inject_message(f"<@{BOT_ID}> explain the scoring", user_name="alice")
    [inbound] = await inbox.wait_for(1)
    assert (inbound.platform, inbound.chat_type, inbound.chat_id, inbound.thread_id) == (
        "discord", "group", str(CHANNEL_ID), None)
    assert inbound.mentions_bot and inbound.text == "explain the scoring"
    assert (inbound.user_id, inbound.user_name, inbound.message_id) == ("42", "alice", sent["id"])

    await fake_discord.wait_for_messages(5)
    await asyncio.sleep(0.3)
    chunks = fake_discord.sent_messages
    assert all(len(c.content) <= 2000 and _fence_lines_balanced(c.content) for c in chunks)
    assert chunks[0].reference_id == int(sent["id"])
    assert all(c.reference_id is None for c in chunks[1:])
    assert _content("".join(c.content for c in chunks)) == _content(answer)
    assert any(c.content.startswith("```python\n") for c in chunks[1:])
    for chunk in chunks:
        assert chunk.allowed_mentions is not None
        assert "everyone" not in chunk.allowed_mentions.get("parse", [])
        assert "roles" not in chunk.allowed_mentions.get("parse", [])


async def test_chatter_replies_dms_and_threads(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    adapter: DiscordAdapter | None = None

    async def reply(inbound: Inbound) -> None:
        assert adapter is not None
        if inbound.addressed:
            await adapter.send(inbound, f"ok {inbound.thread_id}")

    inbox = Inbox(reply)
    adapter = await start_discord(inbox)
    await fake_discord.inject_message("lunch anyone?", user_id=7, user_name="bob")
    await fake_discord.inject_message("and the follow-up?", reply_to_bot=True)
    await fake_discord.inject_message("private question", channel_id=DM_CHANNEL_ID)
    await fake_discord.inject_message(f"<@{BOT_ID}> in the thread", channel_id=THREAD_ID)
    chatter, reply_msg, dm, threaded = await inbox.wait_for(4)
    assert not chatter.addressed and chatter.text == "lunch anyone?" and chatter.user_name == "bob"
    assert reply_msg.reply_to_bot and not reply_msg.mentions_bot
    assert (dm.chat_type, dm.chat_id) == ("dm", str(DM_CHANNEL_ID))
    assert (threaded.chat_type, threaded.chat_id, threaded.thread_id) == ("thread", str(CHANNEL_ID), str(THREAD_ID))
    sent = await fake_discord.wait_for_messages(3)
    assert sorted(m.channel_id for m in sent) == sorted([CHANNEL_ID, DM_CHANNEL_ID, THREAD_ID])


async def test_messages_are_kept_in_the_inbox_before_they_are_handed_on_in_order(
        fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    kept: list[str] = []

    async def keep(batch: Sequence[Inbound]) -> None:
        (message,) = batch
        assert message.text not in {m.text for m in inbox.messages}  # not handed on before it is kept
        await asyncio.sleep(0.3 if message.text == "first" else 0.0)  # a slow write must not let "second" pass
        kept.append(message.text)

    adapter = await start_discord(inbox)
    adapter.keep = keep
    await fake_discord.inject_message("first")
    await fake_discord.inject_message("second")
    assert [m.text for m in await inbox.wait_for(2)] == kept == ["first", "second"]


async def test_a_message_kept_nowhere_is_still_handed_on(
        fake_discord: FakeDiscord, start_discord: StartFn, caplog: pytest.LogCaptureFixture) -> None:
    # The gateway's keep falls back to a spool on disk; only when that fails too does a message go on from memory.
    inbox = Inbox()
    tried: list[str] = []

    async def keep(batch: Sequence[Inbound]) -> None:
        tried.append(batch[0].text)
        raise OSError(28, "No space left on device")

    adapter = await start_discord(inbox)
    adapter.keep = keep
    await fake_discord.inject_message("during the outage")
    await fake_discord.inject_message("right after")
    assert [m.text for m in await inbox.wait_for(2)] == ["during the outage", "right after"]
    assert tried == ["during the outage", "right after"]
    assert "kept nowhere (OSError" in caplog.text


async def test_commands_and_admin_roles(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    await start_discord(inbox, admin_role_ids=(), admin_role_names=("admins",))
    await fake_discord.inject_message("/compress focus text", role_ids=(2100,))
    await fake_discord.inject_message(f"<@{BOT_ID}> /status", user_id=43)
    admin, member = await inbox.wait_for(2)
    assert (admin.is_command, admin.command, admin.command_args, admin.is_admin_hint) == (
        True, "compress", "focus text", True)
    assert (member.command, member.is_admin_hint, member.mentions_bot) == ("status", False, True)


async def test_admin_role_by_id(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    await start_discord(inbox)
    await fake_discord.inject_message("/new", role_ids=(2100,))
    await fake_discord.inject_message("/new", role_ids=(GUILD_ID,))
    admin, other = await inbox.wait_for(2)
    assert admin.is_admin_hint and not other.is_admin_hint


async def test_bots_ignored_unless_allowed(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    await start_discord(inbox)
    await fake_discord.inject_message("beep", is_bot=True, user_id=77)
    await fake_discord.inject_message("human")
    await inbox.wait_for(1)
    await asyncio.sleep(0.2)
    assert [m.text for m in inbox.messages] == ["human"]


async def test_bots_allowed_by_setting(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    await start_discord(inbox, allow_bots=True)
    await fake_discord.inject_message("beep", is_bot=True, user_id=77)
    assert [m.text for m in await inbox.wait_for(1)] == ["beep"]


async def test_image_attachment_passed_by_url(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    inbox = Inbox()
    await start_discord(inbox)
    image = {"id": "55", "filename": "chart.png", "size": 1234, "content_type": "image/png",
             "url": "https://cdn.example.invalid/chart.png", "proxy_url": "https://cdn.example.invalid/p.png"}
    await fake_discord.inject_message(f"<@{BOT_ID}> what is this?", attachments=[image])
    [inbound] = await inbox.wait_for(1)
    [attachment] = inbound.attachments
    assert (attachment.kind, attachment.mime, attachment.size, attachment.name, attachment.url) == (
        "image", "image/png", 1234, "chart.png", "https://cdn.example.invalid/chart.png")


async def test_a_mention_of_the_bots_own_role_addresses_it(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    # Discord's autocomplete offers the bot's managed role next to the bot; users pick either.
    inbox = Inbox()
    await start_discord(inbox)
    await fake_discord.inject_message(f"<@&{BOT_ROLE_ID}> what is the status?")
    await fake_discord.inject_message(f"<@&{ADMIN_ROLE_ID}> please look at this")
    ours, admins = await inbox.wait_for(2)
    assert ours.mentions_bot and ours.text == "what is the status?"
    assert not admins.mentions_bot and admins.text == f"<@&{ADMIN_ROLE_ID}> please look at this"


async def test_an_image_too_large_for_models_is_passed_on_as_a_file(fake_discord: FakeDiscord,
                                                                    start_discord: StartFn) -> None:
    # A URL image cannot be re-encoded (R-C11 works on data URLs); sent as an image, one oversized photo would
    # make every later turn of the shared channel fail until an admin runs /new.
    inbox = Inbox()
    await start_discord(inbox, max_image_bytes=1000)
    image = {"id": "56", "filename": "scan.png", "size": 1001, "content_type": "image/png",
             "url": "https://cdn.example.invalid/scan.png", "proxy_url": "https://cdn.example.invalid/s.png"}
    await fake_discord.inject_message(f"<@{BOT_ID}> read this", attachments=[image])
    [inbound] = await inbox.wait_for(1)
    [attachment] = inbound.attachments
    assert (attachment.kind, attachment.name, attachment.size) == ("file", "scan.png", 1001)


async def test_rate_limits_are_waited_out(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    adapter = await start_discord(Inbox())
    fake_discord.fail_next("messages", times=2, retry_after=0.3)
    started = time.monotonic()
    await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "y" * 3000)
    assert time.monotonic() - started >= 0.5
    assert [len(m.content) for m in fake_discord.sent_messages] == [2000, 1000]


async def test_cloudflare_429_and_long_rate_limit_use_our_backoff(
    fake_discord: FakeDiscord, start_discord: StartFn
) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    adapter = await start_discord(Inbox(), sleep=record)
    fake_discord.fail_next("messages", times=1, via=False)
    await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "after a ban-like 429")
    fake_discord.fail_next("messages", times=1, retry_after=45.0)
    await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "after a long rate limit")
    assert waits == [0.5, 45.0]
    assert [m.content for m in fake_discord.sent_messages] == ["after a ban-like 429", "after a long rate limit"]


async def test_rate_limit_over_the_limit_gives_up(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    adapter = await start_discord(Inbox(), max_retry_wait=60.0)
    fake_discord.fail_next("messages", times=1, retry_after=120.0)
    with pytest.raises(SendError, match="wait 120"):
        await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "hello")


async def test_persistent_failures_raise_send_error(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    async def no_wait(seconds: float) -> None:
        return None

    adapter = await start_discord(Inbox(), sleep=no_wait, max_retry_attempts=3)
    fake_discord.fail_next("messages", times=5, via=False)
    with pytest.raises(SendError, match="after 3 attempts"):
        await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "hello")
    fake_discord.fail_next("messages", times=0)
    fake_discord.refuse_channel(5001, 403)
    fake_discord.refuse_channel(5002, 400)
    with pytest.raises(SendError, match="refused the message: 403") as refused:
        await adapter.send(ChatRef("discord", "5001"), "hello")
    with pytest.raises(SendError, match="rejected the message: 400") as rejected:
        await adapter.send(ChatRef("discord", "5002"), "hello")
    assert fake_discord.token not in str(refused.value) + str(rejected.value)


async def test_typing_is_kept_alive(fake_discord: FakeDiscord, start_discord: StartFn) -> None:
    adapter = await start_discord(Inbox())
    async with adapter.typing(ChatRef("discord", str(CHANNEL_ID), str(THREAD_ID))):
        await asyncio.sleep(0.5)
    count = len(fake_discord.typing_calls)
    assert count >= 2 and {channel for channel, _ in fake_discord.typing_calls} == {THREAD_ID}
    await asyncio.sleep(0.4)
    assert len(fake_discord.typing_calls) == count


async def test_malformed_events_are_skipped(
    fake_discord: FakeDiscord, start_discord: StartFn, caplog: pytest.LogCaptureFixture
) -> None:
    inbox = Inbox()
    await start_discord(inbox)
    await fake_discord.dispatch("MESSAGE_CREATE", {"id": "1", "content": "no channel, no author"})
    await fake_discord.dispatch("SOMETHING_NEW", {"x": 1})
    await fake_discord.dispatch("MESSAGE_UPDATE", {"id": "2", "edited_timestamp": "2025-01-01T00:01:00+00:00"})
    await fake_discord.inject_message("z" * 20_000)
    await fake_discord.inject_message("kept")
    [inbound] = await inbox.wait_for(1)
    assert inbound.text == "kept"
    await fake_discord.inject_message("still alive")
    assert [m.text for m in await inbox.wait_for(2)] == ["kept", "still alive"]
    assert "skipping malformed MESSAGE_CREATE" in caplog.text
    assert "skipping malformed MESSAGE_UPDATE" in caplog.text
    assert "skipping message" in caplog.text


async def test_handler_exception_does_not_stop_the_adapter(
    fake_discord: FakeDiscord, start_discord: StartFn
) -> None:
    async def explode(inbound: Inbound) -> None:
        if inbound.text == "boom":
            raise RuntimeError("handler bug")

    inbox = Inbox(explode)
    await start_discord(inbox)
    await fake_discord.inject_message("boom")
    await inbox.wait_for(1)
    await fake_discord.inject_message("after")
    assert [m.text for m in await inbox.wait_for(2)] == ["boom", "after"]


async def test_bad_token_fails_start_without_leaking_it(fake_discord: FakeDiscord,
                                                        discord_settings: DiscordSettings) -> None:
    fake_discord.token = "the-real-token"
    adapter = DiscordAdapter(replace(discord_settings, token="wrong-token"))
    with pytest.raises(ConnectionError) as failure:
        await adapter.start(Inbox())
    assert "wrong-token" not in str(failure.value)
    assert "wrong-token" not in repr(discord_settings)
