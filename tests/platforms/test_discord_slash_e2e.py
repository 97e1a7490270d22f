"""Discord's native slash commands through the real gateway (``discord.slash_commands: true`` in settings),
with Telegram served alongside: the answers arrive as interaction responses, admin rules still apply."""

from __future__ import annotations

from gateway.conversation.command_rules import COMMANDS
from gateway.conversation.commands import REFUSAL
from tests.fakes.discord_server import CHANNEL_ID
from tests.gateway.conftest import SUMMARY_MARKER, answer_by_kind, chatter
from tests.platforms.conftest import DISCORD_ADMIN, PlatformsFactory, until


async def test_slash_commands_through_the_gateway(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms(discord={"slash_commands": True})
    discord = platforms.discord
    assert discord.synced_commands is not None
    assert sorted(c["name"] for c in discord.synced_commands) == sorted(COMMANDS)
    session = await platforms.bulk_history("discord", f"group:{CHANNEL_ID}", chatter(40, words=60))
    kinds = answer_by_kind(platforms.llm)

    status = await discord.inject_interaction("status", user_id=7)
    await until(lambda: len(discord.interaction_replies) == 1)
    reply = discord.interaction_replies[0]
    assert (reply.kind, reply.token) == ("original", status["token"])
    assert reply.content.startswith(f"Session {session}") and "Messages: 40" in reply.content

    refused = await discord.inject_interaction("compress", {"focus": "billing"}, user_id=7)
    await until(lambda: len(discord.interaction_replies) == 2)
    assert (discord.interaction_replies[1].token, discord.interaction_replies[1].content) == (
        refused["token"], REFUSAL.format(name="compress"))
    assert kinds == []

    done = await discord.inject_interaction("compress", {"focus": "billing"}, user_id=DISCORD_ADMIN)
    await until(lambda: len(discord.interaction_replies) == 3)
    result = discord.interaction_replies[2]
    assert (result.kind, result.token) == ("original", done["token"])
    assert result.content.startswith("Compressed: 40 → ") and kinds == ["summary"]
    rows = await platforms.gateway.rt.store.messages.export(session, include_archived=True)
    assert any(not row.active for row in rows)
    # The compaction notice went to the channel; no reply to a command did.
    assert all(m.reference_id is None for m in discord.sent_messages)
    assert all(SUMMARY_MARKER not in text for text in platforms.sent_texts())

    stats = await discord.inject_interaction("stats", user_id=DISCORD_ADMIN)
    await until(lambda: len(discord.interaction_replies) == 4)
    assert discord.interaction_replies[3].token == stats["token"]
    assert "  manual /compress — 1 (avg " in discord.interaction_replies[3].content

    # Telegram is served by the same gateway meanwhile.
    platforms.telegram.inject_message("/status@testbot", chat_id=-100123)
    [telegram_reply] = await platforms.telegram.wait_for_messages(1)
    assert telegram_reply.text.startswith("Session ")
