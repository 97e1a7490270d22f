"""Discord and Telegram served at once by one gateway: replies, splitting, addressing, sessions, rate limits."""

from __future__ import annotations

import asyncio
from typing import Any

from adapters.discord_adapter import DiscordAdapter
from adapters.telegram_adapter import TelegramAdapter
from tests.adapters.test_split import _content, _fence_lines_balanced
from tests.fakes.discord_server import BOT_ID, CHANNEL_ID, THREAD_ID
from tests.fakes.telegram_server import utf16_units
from tests.platforms.conftest import Platforms

GROUP = -100123
TOPIC = 77


def long_answer() -> str:
    """About 9,000 characters: prose paragraphs, a long code block, a closing line."""
    prose = "\n\n".join(f"Step {i}: the gateway keeps one session per channel and topic. " * 4 for i in range(22))
    code = "\n".join(f"    total += weights[{i}] * values[{i}]  # term {i}" for i in range(100))
    answer = f"{prose}\n\n```python\ndef score(weights, values):\n    total = 0\n{code}\n    return total\n```\nDone."
    assert len(answer) > 9000
    return answer


def test_settings_with_both_tokens_build_both_adapters(platforms: Platforms) -> None:
    assert [type(a) for a in platforms.gateway.adapters] == [DiscordAdapter, TelegramAdapter]


async def test_mentions_on_both_platforms_get_the_long_answer_split_correctly(platforms: Platforms) -> None:
    answer = long_answer()
    platforms.llm.responder = lambda body: answer
    asked_d = await platforms.discord.inject_message(f"<@{BOT_ID}> explain the scoring", user_name="alice")
    asked_t = platforms.telegram.inject_message("@testbot explain the scoring", chat_id=GROUP, user_name="alice")

    d_chunks = await _settled(lambda: platforms.discord.sent_messages, _complete(answer, lambda m: m.content))
    t_chunks = await _settled(lambda: platforms.telegram.sent_messages, _complete(answer, lambda m: m.visible_text))

    assert len(d_chunks) >= 5 and all(len(c.content) <= 2000 for c in d_chunks)
    assert all(_fence_lines_balanced(c.content) for c in d_chunks)
    assert {c.channel_id for c in d_chunks} == {CHANNEL_ID}
    assert [c.reference_id for c in d_chunks] == [int(asked_d["id"])] + [None] * (len(d_chunks) - 1)
    assert any(c.content.startswith("```python\n") for c in d_chunks[1:])

    # Telegram gets HTML (parsed by the fake like Telegram does): each chunk's code block closed in it.
    assert len(t_chunks) >= 3 and all(utf16_units(c.text) <= 4096 and c.parse_mode == "HTML" for c in t_chunks)
    assert all(c.text.count("<pre>") == c.text.count("</pre>") for c in t_chunks)
    assert {c.chat_id for c in t_chunks} == {str(GROUP)}
    assert [c.reply_to_message_id for c in t_chunks] == [asked_t["message_id"]] + [None] * (len(t_chunks) - 1)

    # The model saw each question once, without the bot's own mention.
    asked = [r.messages[-1]["content"] for r in platforms.llm.requests]
    assert sorted(asked) == ["[alice] explain the scoring"] * 2


async def test_unaddressed_group_chatter_is_not_answered_but_kept_as_context(platforms: Platforms) -> None:
    await platforms.discord.inject_message("lunch anyone?", user_id=7, user_name="bob")
    platforms.telegram.inject_message("the build is red again", chat_id=GROUP, user_id=7, user_name="bob")
    await asyncio.sleep(0.6)
    assert platforms.sent_texts() == [] and platforms.llm.requests == []

    platforms.llm.responder = lambda body: "noted"
    await platforms.discord.inject_message(f"<@{BOT_ID}> what did bob ask?", user_name="alice")
    platforms.telegram.inject_message("@testbot what did bob say?", chat_id=GROUP, user_name="alice")
    await platforms.discord.wait_for_messages(1)
    await platforms.telegram.wait_for_messages(1)
    # gateway.group_history=observe (the default): the chatter is stored in its session, just before the question.
    requests = {str(r.messages[-1]["content"]): [str(m["content"]) for m in r.messages[1:]]
                for r in platforms.llm.requests}
    assert requests["[alice] what did bob ask?"] == ["[bob] lunch anyone?", "[alice] what did bob ask?"]
    assert requests["[alice] what did bob say?"] == ["[bob] the build is red again", "[alice] what did bob say?"]


async def test_thread_and_forum_topic_are_sessions_of_their_own(platforms: Platforms) -> None:
    platforms.llm.responder = lambda body: f"seen {len(body['messages'])} messages"
    await platforms.discord.inject_message(f"<@{BOT_ID}> in the channel")
    await platforms.discord.wait_for_messages(1)
    await platforms.discord.inject_message(f"<@{BOT_ID}> in the thread", channel_id=THREAD_ID)
    platforms.telegram.inject_message("@testbot in the group", chat_id=GROUP)
    await platforms.telegram.wait_for_messages(1)
    platforms.telegram.inject_message("@testbot in the topic", chat_id=GROUP, thread_id=TOPIC)
    d_sent = await platforms.discord.wait_for_messages(2)
    t_sent = await platforms.telegram.wait_for_messages(2)

    assert [(m.channel_id, m.content) for m in d_sent] == [
        (CHANNEL_ID, "seen 2 messages"), (THREAD_ID, "seen 2 messages")]
    assert [(m.message_thread_id, m.text) for m in t_sent] == [(None, "seen 2 messages"), (TOPIC, "seen 2 messages")]
    ids = {
        await platforms.session_id("discord", f"group:{CHANNEL_ID}"),
        await platforms.session_id("discord", f"thread:{CHANNEL_ID}:{THREAD_ID}"),
        await platforms.session_id("telegram", f"group:{GROUP}"),
        await platforms.session_id("telegram", f"thread:{GROUP}:{TOPIC}"),
    }
    assert len(ids) == 4
    for session_id in ids:
        stored = await platforms.gateway.rt.store.messages.load_active(session_id)
        assert [m["role"] for m in stored.messages] == ["user", "assistant"]


async def test_status_answers_on_both(platforms: Platforms) -> None:
    await platforms.discord.inject_message("/status", user_id=7)
    platforms.telegram.inject_message("/status@testbot", chat_id=GROUP, user_id=7)
    [d_reply] = await platforms.discord.wait_for_messages(1)
    [t_reply] = await platforms.telegram.wait_for_messages(1)
    for text in (d_reply.content, t_reply.text):
        assert text.startswith("Session ") and "Compressions: 0" in text
        assert "Engine: compressor · Model: fake-model" in text
    assert platforms.llm.requests == []


async def test_rate_limits_on_both_are_waited_out_and_nothing_is_lost(platforms: Platforms) -> None:
    answer = long_answer()
    platforms.llm.responder = lambda body: answer
    platforms.discord.fail_next("messages", times=2, retry_after=0.3)
    platforms.telegram.fail_next("sendMessage", times=1, retry_after=1)
    await platforms.discord.inject_message(f"<@{BOT_ID}> go")
    platforms.telegram.inject_message("@testbot go", chat_id=GROUP)
    d_chunks = await _settled(lambda: platforms.discord.sent_messages, _complete(answer, lambda m: m.content))
    t_chunks = await _settled(lambda: platforms.telegram.sent_messages, _complete(answer, lambda m: m.visible_text))
    assert d_chunks[0].reference_id is not None and t_chunks[0].reply_to_message_id is not None
    assert platforms.telegram.calls.count("sendMessage") == len(t_chunks) + 1
    assert platforms.discord.requests.count(f"POST /api/v10/channels/{CHANNEL_ID}/messages") == len(d_chunks) + 2


def _complete(answer: str, text_of: Any) -> Any:
    def done(items: list[Any]) -> bool:
        return _content("\n".join(text_of(m) for m in items)) == _content(answer)

    return done


async def _settled(read: Any, done: Any, within_s: float = 10.0) -> list[Any]:
    """Wait until ``done(read())``; then confirm nothing more arrives."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not done(read()):
        assert loop.time() < deadline, f"incomplete after {within_s} s: {len(read())} items"
        await asyncio.sleep(0.02)
    count = len(read())
    await asyncio.sleep(0.2)
    assert len(read()) == count
    return list(read())
