"""Native slash commands through the real discord.py client against the fake Discord: sync at login,
INTERACTION_CREATE → deferred response + command Inbound, the reply as the interaction's response."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from adapters.base import ChatRef, Inbound
from adapters.discord_adapter import DiscordAdapter, DiscordSettings
from adapters.discord_slash import PendingInteractions
from gateway.conversation.command_rules import COMMANDS
from tests.adapters.test_split import _fence_lines_balanced
from tests.fakes.discord_server import ADMIN_ROLE_ID, CHANNEL_ID, DM_CHANNEL_ID, THREAD_ID, FakeDiscord
from tests.fakes.inbox import Inbox

StartFn = Callable[..., Awaitable[DiscordAdapter]]
DEFERRED_CHANNEL_MESSAGE = 5


@pytest.fixture
async def start_slash(discord_settings: DiscordSettings) -> AsyncIterator[StartFn]:
    """Start a DiscordAdapter with slash commands on (unless overridden); stopped after the test."""
    started: list[DiscordAdapter] = []

    async def start(inbox: Inbox, **overrides: Any) -> DiscordAdapter:
        adapter = DiscordAdapter(replace(discord_settings, **{"slash_commands": True, **overrides}))
        await adapter.start(inbox)
        started.append(adapter)
        return adapter

    yield start
    for adapter in started:
        await adapter.stop()


async def test_commands_are_synced_at_login(fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    await start_slash(Inbox())
    assert fake_discord.synced_commands is not None
    by_name = {c["name"]: c for c in fake_discord.synced_commands}
    # Every command the gateway knows is in the menu.
    assert sorted(by_name) == sorted(COMMANDS)
    [focus] = by_name["compress"]["options"]
    assert (focus["name"], focus["type"], focus.get("required", False)) == ("focus", 3, False)
    assert all(by_name[name]["options"] == [] for name in ("new", "status", "stats", "help", "stop", "usage", "pins"))
    options = {name: [(o["name"], o.get("required", False)) for o in by_name[name]["options"]]
               for name in ("pin", "unpin", "approve", "persona", "remember", "model")}
    assert options == {"pin": [("text", True)], "unpin": [("number", True)], "approve": [("code", True)],
                       "persona": [("text", False)], "remember": [("fact", True)], "model": [("name", False)]}
    assert "PUT /api/v10/applications/1000/commands" in fake_discord.requests


async def test_slash_command_becomes_a_command_inbound_answered_through_the_interaction(
        fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    answer = "\n\n".join(f"Line {i}: " + "figures " * 30 for i in range(20)) + "\n\n```\ncode\n```"
    assert len(answer) > 4000
    adapter: DiscordAdapter | None = None

    async def reply(inbound: Inbound) -> None:
        assert adapter is not None
        await adapter.send(inbound.chat, "🗜️ a notice goes to the channel")
        await adapter.send(inbound, answer)

    inbox = Inbox(reply)
    adapter = await start_slash(inbox)
    sent = await fake_discord.inject_interaction("compress", {"focus": " db migration "}, user_id=9,
                                                 user_name="carol", role_ids=(ADMIN_ROLE_ID,))
    [inbound] = await inbox.wait_for(1)
    assert (inbound.platform, inbound.chat_type, inbound.chat_id, inbound.thread_id) == (
        "discord", "group", str(CHANNEL_ID), None)
    assert (inbound.is_command, inbound.command, inbound.command_args, inbound.text) == (
        True, "compress", "db migration", "/compress db migration")
    assert (inbound.user_id, inbound.user_name, inbound.message_id, inbound.is_admin_hint) == (
        "9", "carol", sent["id"], True)
    assert not inbound.mentions_bot and inbound.addressed

    [callback] = fake_discord.interaction_callbacks
    assert (callback["id"], callback["token"], callback["type"]) == (sent["id"], sent["token"],
                                                                      DEFERRED_CHANNEL_MESSAGE)
    replies = await fake_discord.wait_for_interaction_replies(3)
    await asyncio.sleep(0.2)
    replies = fake_discord.interaction_replies
    assert [r.kind for r in replies] == ["original"] + ["followup"] * (len(replies) - 1)
    assert {r.token for r in replies} == {sent["token"]}
    assert all(len(r.content) <= 2000 and _fence_lines_balanced(r.content) for r in replies)
    assert "\n".join(r.content for r in replies).split() == answer.split()
    for r in replies:
        assert r.allowed_mentions is not None and not {"everyone", "roles"} & set(r.allowed_mentions.get("parse", []))
    # Only the notice, which is no reply to the command, went to the channel.
    assert [(m.channel_id, m.reference_id) for m in fake_discord.sent_messages] == [(CHANNEL_ID, None)]


async def test_a_slash_command_with_a_required_option_reaches_the_gateway_as_typed(
        fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    await start_slash(inbox)
    await fake_discord.inject_interaction("pin", {"text": "  always answer in UTC "}, user_id=9, user_name="carol")
    await fake_discord.inject_interaction("unpin", {"number": "2"}, user_id=9, user_name="carol")
    pin, unpin = await inbox.wait_for(2)
    assert (pin.command, pin.command_args, pin.text) == ("pin", "always answer in UTC", "/pin always answer in UTC")
    assert (unpin.command, unpin.command_args, unpin.text) == ("unpin", "2", "/unpin 2")


async def test_thread_and_dm_slash_commands(fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    await start_slash(inbox)
    await fake_discord.inject_interaction("status", channel_id=THREAD_ID)
    await fake_discord.inject_interaction("new", channel_id=DM_CHANNEL_ID, user_id=43)
    threaded, dm = await inbox.wait_for(2)
    assert (threaded.chat_type, threaded.chat_id, threaded.thread_id, threaded.command, threaded.command_args) == (
        "thread", str(CHANNEL_ID), str(THREAD_ID), "status", "")
    assert (dm.chat_type, dm.chat_id, dm.thread_id, dm.command, dm.user_id) == (
        "dm", str(DM_CHANNEL_ID), None, "new", "43")
    assert not threaded.is_admin_hint and not dm.is_admin_hint


async def test_later_replies_to_the_same_interaction_are_followups(
        fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    adapter = await start_slash(inbox)
    await fake_discord.inject_interaction("help")
    [inbound] = await inbox.wait_for(1)
    await adapter.send(inbound, "first")
    await adapter.send(inbound, "second")
    assert [(r.kind, r.content) for r in fake_discord.interaction_replies] == [
        ("original", "first"), ("followup", "second")]


async def test_followup_rate_limit_is_waited_out(fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    adapter = await start_slash(inbox)
    await fake_discord.inject_interaction("status")
    [inbound] = await inbox.wait_for(1)
    fake_discord.fail_next("followup", times=1, retry_after=0.2)
    await adapter.send(inbound, "a" * 2000 + "\n\n" + "b" * 500)
    assert [(r.kind, len(r.content)) for r in fake_discord.interaction_replies] == [
        ("original", 2000), ("followup", 500)]


async def test_disabled_by_default(fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    await start_slash(inbox, slash_commands=False)
    await fake_discord.inject_interaction("status")
    await fake_discord.inject_message("still here")
    [inbound] = await inbox.wait_for(1)
    await asyncio.sleep(0.2)
    assert inbound.text == "still here" and len(inbox.messages) == 1
    assert fake_discord.synced_commands is None and fake_discord.interaction_callbacks == []


async def test_sync_failure_keeps_the_bot_running(fake_discord: FakeDiscord, start_slash: StartFn,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    fake_discord.command_sync_status = 403
    inbox = Inbox()
    await start_slash(inbox)
    assert "slash command sync failed (Forbidden 403)" in caplog.text
    await fake_discord.inject_message("/status")
    [inbound] = await inbox.wait_for(1)
    assert inbound.command == "status"


async def test_unacknowledgeable_interaction_is_skipped(fake_discord: FakeDiscord, start_slash: StartFn,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    inbox = Inbox()
    await start_slash(inbox)
    fake_discord.interaction_callback_status = 404
    await fake_discord.inject_interaction("status")
    await fake_discord.inject_message("after")
    [inbound] = await inbox.wait_for(1)
    await asyncio.sleep(0.2)
    assert inbound.text == "after" and len(inbox.messages) == 1
    assert "could not acknowledge /status (NotFound 404)" in caplog.text
    assert "itoken" not in caplog.text


async def test_reply_after_the_token_expired_goes_to_the_channel(
        fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    inbox = Inbox()
    adapter = await start_slash(inbox)
    now = [0.0]
    adapter._interactions = PendingInteractions(clock=lambda: now[0])
    await fake_discord.inject_interaction("status")
    [inbound] = await inbox.wait_for(1)
    now[0] += 15 * 60
    await adapter.send(inbound, "late answer")
    assert fake_discord.interaction_replies == []
    assert [(m.channel_id, m.content) for m in fake_discord.sent_messages] == [(CHANNEL_ID, "late answer")]


def test_pending_interactions_expire_and_stay_bounded() -> None:
    class Stub:
        def __init__(self, ident: int) -> None:
            self.id = ident

    now = [0.0]
    pending = PendingInteractions(limit=2, lifetime=10.0, clock=lambda: now[0])
    for ident in (1, 2, 3):
        pending.add(Stub(ident))  # type: ignore[arg-type]
    assert len(pending) == 2 and pending.get("1") is None and pending.get(None) is None
    assert pending.get("3") is not None
    now[0] = 10.0
    assert pending.get("3") is None and len(pending) == 1


async def test_plain_channel_sends_are_unaffected(fake_discord: FakeDiscord, start_slash: StartFn) -> None:
    adapter = await start_slash(Inbox())
    await adapter.send(ChatRef("discord", str(CHANNEL_ID)), "hello")
    assert [m.content for m in fake_discord.sent_messages] == ["hello"]
