"""The real gateway with the real discord.py and PTB clients on the fakes: a malformed Discord frame costs only
itself (a DM after it is answered on the same session), and a 1 MB answer is a few Telegram messages, not 250."""

from __future__ import annotations

import asyncio

from tests.fakes.discord_server import DM_CHANNEL_ID
from tests.fakes.telegram_server import utf16_units
from tests.platforms.conftest import Platforms, until

DM = 4242


async def test_after_a_malformed_gateway_frame_a_dm_is_answered(platforms: Platforms) -> None:
    platforms.llm.responder = lambda body: "still here"
    identifies = platforms.discord.identify_count
    await platforms.discord.send_raw("[1,2,3]")
    await platforms.discord.inject_message("are you there?", channel_id=DM_CHANNEL_ID)
    [reply] = await platforms.discord.wait_for_messages(1, within_s=10)
    assert reply.content == "still here" and reply.channel_id == DM_CHANNEL_ID
    assert platforms.discord.identify_count == identifies  # the same session went on


async def test_a_1_mb_answer_is_cut_to_a_few_telegram_messages(platforms: Platforms) -> None:
    platforms.llm.responder = lambda body: "Here it is.\n\n" + ("lorem ipsum dolor sit amet " * 40 + "\n") * 1_000
    platforms.telegram.inject_message("write me a book", chat_id=DM, chat_type="private", user_id=DM)
    await until(lambda: any("reply cut here" in m.visible_text for m in platforms.telegram.sent_messages))
    await asyncio.sleep(0.3)
    sent = platforms.telegram.sent_messages
    assert 1 < len(sent) <= 6 and all(utf16_units(m.text) <= 4096 for m in sent)
    assert "The whole answer is stored" in sent[-1].visible_text
