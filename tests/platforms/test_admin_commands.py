"""/compress on both platforms through the real clients: admins (by configured id, by Discord role) compress and
the store shows the archived rows; others are refused and nothing changes; the summary never reaches a chat."""

from __future__ import annotations

from gateway.conversation.commands import REFUSAL
from tests.fakes.discord_server import ADMIN_ROLE_ID, CHANNEL_ID, THREAD_ID
from tests.gateway.conftest import SUMMARY_MARKER, answer_by_kind, chatter
from tests.platforms.conftest import DISCORD_ADMIN, TELEGRAM_ADMIN, Platforms, until

GROUP = -100123
HISTORY = 40


def _results(platforms: Platforms) -> list[tuple[int, str]]:
    """(channel or chat id, text) of every /compress result line either platform received."""
    sent = [(m.channel_id, m.content) for m in platforms.discord.sent_messages]
    sent += [(int(m.chat_id), m.text) for m in platforms.telegram.sent_messages]
    return [(where, text) for where, text in sent if text.startswith(("Compressed", "Nothing"))]


async def _archived(platforms: Platforms, session_id: str) -> int:
    rows = await platforms.gateway.rt.store.messages.export(session_id, include_archived=True)
    return sum(1 for row in rows if not row.active)


async def test_compress_by_admins_archives_and_by_others_is_refused(platforms: Platforms) -> None:
    channel = await platforms.bulk_history("discord", f"group:{CHANNEL_ID}", chatter(HISTORY, words=60))
    thread = await platforms.bulk_history("discord", f"thread:{CHANNEL_ID}:{THREAD_ID}", chatter(HISTORY, words=60))
    group = await platforms.bulk_history("telegram", f"group:{GROUP}", chatter(HISTORY, words=60))
    kinds = answer_by_kind(platforms.llm)

    await platforms.discord.inject_message("/compress", user_id=7, user_name="bob")
    platforms.telegram.inject_message("/compress@testbot", chat_id=GROUP, user_id=7, user_name="bob")
    [d_refusal] = await platforms.discord.wait_for_messages(1)
    [t_refusal] = await platforms.telegram.wait_for_messages(1)
    assert d_refusal.content == t_refusal.text == REFUSAL.format(name="compress")
    assert kinds == []
    for session_id in (channel, thread, group):
        assert await _archived(platforms, session_id) == 0

    await platforms.discord.inject_message("/compress billing-migration", user_id=DISCORD_ADMIN)
    await until(lambda: len(_results(platforms)) == 1)
    await platforms.discord.inject_message("/compress", channel_id=THREAD_ID, user_id=9, role_ids=(ADMIN_ROLE_ID,))
    platforms.telegram.inject_message("/compress@testbot", chat_id=GROUP, user_id=TELEGRAM_ADMIN)
    await until(lambda: len(_results(platforms)) == 3)

    # The stored history, as /status and `concord sessions show` count it (not the system prompt).
    assert all(text.startswith(f"Compressed: {HISTORY} → ") for _, text in _results(platforms))
    assert sorted(where for where, _ in _results(platforms)) == sorted([CHANNEL_ID, THREAD_ID, GROUP])
    assert kinds == ["summary"] * 3
    assert sum("billing-migration" in str(r.json) for r in platforms.llm.requests) == 1  # the focus reached it
    for session_id in (channel, thread, group):
        record = await platforms.gateway.rt.store.sessions.require(session_id)
        assert record.compactions == 1
        assert await _archived(platforms, session_id) > 0
    assert all(SUMMARY_MARKER not in text for text in platforms.sent_texts())


async def test_compressed_session_keeps_answering_without_leaking_the_summary(platforms: Platforms) -> None:
    session = await platforms.bulk_history("telegram", f"group:{GROUP}", chatter(HISTORY, words=60))
    answer_by_kind(platforms.llm, answer="carrying on")
    platforms.telegram.inject_message("/compress@testbot", chat_id=GROUP, user_id=TELEGRAM_ADMIN)
    await until(lambda: len(_results(platforms)) == 1)
    platforms.telegram.inject_message("@testbot and now?", chat_id=GROUP, user_id=7)
    await until(lambda: platforms.telegram.sent_messages[-1].text == "carrying on")
    # The model sees the summary (it is the compressed history); the chat never does.
    assert SUMMARY_MARKER in str(platforms.llm.requests[-1].messages)
    assert all(SUMMARY_MARKER not in text for text in platforms.sent_texts())
    assert await _archived(platforms, session) > 0
