"""Streamed answers through the real discord.py and PTB clients: one message edited while the answer grows
(at most about once a second), the exact final text at the end (Telegram HTML, split past the limit), a
deleted live message or 429s on edits, and /stop mid-stream."""

from __future__ import annotations

import asyncio
import itertools

from adapters.split import split_message
from agent.turn import INTERRUPTED_MARK
from gateway.conversation.answers import STOPPED_TEXT
from tests.fakes.discord_server import BOT_ID, CHANNEL_ID
from tests.platforms.conftest import Platforms, PlatformsFactory, until

GROUP = -100123
STORY = " ".join(f"word{i}" for i in range(120))


async def _streaming(make_platforms: PlatformsFactory) -> Platforms:
    return await make_platforms(discord={"streaming": True}, telegram={"streaming": True})


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def test_discord_edits_one_message_throttled_and_ends_with_the_exact_text(
        make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    platforms.llm.reply(STORY, chunk_delay=0.025, text_pieces=120)  # about 3 s of streaming
    await platforms.discord.inject_message(f"<@{BOT_ID}> tell me a story", user_id=5)
    await until(lambda: bool(platforms.discord.sent_messages) and platforms.discord.sent_messages[0].content == STORY)
    [message] = platforms.discord.sent_messages
    assert message.channel_id == CHANNEL_ID and message.reference_id is not None
    edits = [e for e in platforms.discord.edits if e.message_id == message.message_id]
    assert 2 <= len(edits) <= 6  # grew visibly, but not once per token
    # Every live edit waited its turn, about a second (the final one goes out as soon as the answer is complete;
    # the margin is network jitter on a loaded machine, far from the 25 ms a per-token edit would show).
    assert all(gap >= 0.7 for gap in _gaps([message.at] + [e.at for e in edits[:-1]]))
    assert all(STORY.startswith(e.content) for e in edits)
    assert edits[-1].content == STORY


async def test_telegram_final_text_is_rendered_html_after_plain_live_edits(make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    answer = "Here is **the plan**:\n\n```python\nprint('hi')\n```\n" + " ".join(["and more"] * 40)
    platforms.llm.reply(answer, chunk_delay=0.03, text_pieces=60)
    platforms.telegram.inject_message("@testbot plan?", chat_id=GROUP, user_id=7)
    await until(lambda: bool(platforms.telegram.sent_messages)
                and platforms.telegram.sent_messages[0].parse_mode == "HTML", within_s=15)
    [message] = platforms.telegram.sent_messages
    assert "<b>the plan</b>" in message.text and "<pre>" in message.text
    assert message.visible_text.startswith("Here is the plan:")
    live = [e for e in platforms.telegram.edits if not e.get("parse_mode")]
    assert live and all(answer.startswith(str(e["text"])) for e in live)  # plain text while growing
    assert all(gap >= 0.7 for gap in _gaps([e["at"] for e in live]))


async def test_a_long_answer_ends_split_with_nothing_sent_twice(make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    long_answer = "\n\n".join(f"Paragraph {i}: " + "lorem ipsum " * 30 for i in range(12))  # ~4,500 chars
    platforms.llm.reply(long_answer, chunk_delay=0.02, text_pieces=60)
    await platforms.discord.inject_message(f"<@{BOT_ID}> essay please", user_id=5)
    await until(lambda: len(platforms.discord.sent_messages) >= 3
                and "".join(m.content for m in platforms.discord.sent_messages).count("Paragraph 11") == 1,
                within_s=15)
    await asyncio.sleep(0.5)
    contents = [m.content for m in platforms.discord.sent_messages]
    assert contents == split_message(long_answer, 2000, len)  # exactly as a reply sent whole would be split
    assert all(e.content.endswith(" …") or e.content in contents for e in platforms.discord.edits)


async def test_a_deleted_live_message_gets_the_final_text_as_a_new_message(make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    platforms.llm.reply(STORY, chunk_delay=0.02, text_pieces=120)
    await platforms.discord.inject_message(f"<@{BOT_ID}> story", user_id=5)
    await until(lambda: bool(platforms.discord.sent_messages))
    platforms.discord.deleted_messages.add(platforms.discord.sent_messages[0].message_id)  # a moderator deletes it
    await until(lambda: len(platforms.discord.sent_messages) == 2)
    await asyncio.sleep(0.3)
    assert len(platforms.discord.sent_messages) == 2
    assert platforms.discord.sent_messages[1].content == STORY


async def test_telegram_429_on_edits_is_waited_out(make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    platforms.llm.reply(STORY, chunk_delay=0.02, text_pieces=120)
    platforms.telegram.fail_next("editMessageText", times=2, retry_after=1)
    platforms.telegram.inject_message("@testbot story", chat_id=GROUP, user_id=7)
    await until(lambda: bool(platforms.telegram.sent_messages)
                and platforms.telegram.sent_messages[0].visible_text == STORY, within_s=15)
    assert len(platforms.telegram.sent_messages) == 1


async def test_stop_mid_stream_on_telegram(make_platforms: PlatformsFactory) -> None:
    platforms = await _streaming(make_platforms)
    platforms.llm.reply(STORY, chunk_delay=0.1, text_pieces=120)  # would take 12 s
    platforms.telegram.inject_message("@testbot a long story", chat_id=GROUP, user_id=7)
    await until(lambda: bool(platforms.telegram.sent_messages))
    platforms.telegram.inject_message("/stop@testbot", chat_id=GROUP, user_id=7)
    await until(lambda: platforms.telegram.sent_messages[0].visible_text.endswith(STOPPED_TEXT), within_s=5)
    [message] = platforms.telegram.sent_messages
    partial = message.visible_text.removesuffix(f"\n\n{STOPPED_TEXT}")
    assert 0 < len(partial) < len(STORY) and STORY.startswith(partial)
    session = await platforms.session_id("telegram", f"group:{GROUP}")
    rows = await platforms.gateway.rt.store.messages.export(session)
    assert rows[-1].message["content"] == f"{partial}\n\n{INTERRUPTED_MARK}"


async def test_streaming_off_sends_one_finished_message(make_platforms: PlatformsFactory) -> None:
    platforms = await make_platforms()  # the fixture's default: streaming false
    platforms.llm.reply(STORY, chunk_delay=0.01, text_pieces=10)
    await platforms.discord.inject_message(f"<@{BOT_ID}> story", user_id=5)
    await until(lambda: bool(platforms.discord.sent_messages))
    await asyncio.sleep(0.3)
    assert [m.content for m in platforms.discord.sent_messages] == [STORY]
    assert platforms.discord.edits == [] and not platforms.llm.requests[-1].json.get("stream")
