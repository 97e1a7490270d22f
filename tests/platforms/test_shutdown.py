"""Graceful shutdown with real platform clients: nothing that arrives while in-flight turns finish is lost."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.fakes.llm_server import Reply
from tests.platforms.conftest import Platforms, until

DM = 4242


async def test_telegram_updates_arriving_during_shutdown_stay_with_telegram(platforms: Platforms) -> None:
    asked = asyncio.Event()

    def respond(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply("first answer", delay=1.0)

    platforms.llm.responder = respond
    platforms.telegram.inject_message("first", chat_id=DM, chat_type="private", user_id=DM)
    await asyncio.wait_for(asked.wait(), 10)
    closing = asyncio.create_task(platforms.gateway.aclose(grace_seconds=10))
    await asyncio.sleep(0.3)  # the in-flight turn is still running
    late = platforms.telegram.inject_message("second", chat_id=DM, chat_type="private", user_id=DM)
    await asyncio.wait_for(closing, 20)
    await until(lambda: [m.text for m in platforms.telegram.sent_messages] == ["first answer"])
    # Not answered by this process, so Telegram must still hold it for the next one (not confirmed, not dropped).
    pending = [u["message"]["message_id"] for u in platforms.telegram._updates if "message" in u]
    assert late["message_id"] in pending
