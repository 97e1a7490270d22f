"""A chat's /persona set by an admin through the real PTB client, still in force after the gateway restarts."""

from __future__ import annotations

from tests.platforms.conftest import TELEGRAM_ADMIN, PlatformsFactory, until

GROUP = -100123


async def test_persona_set_on_telegram_survives_a_restart(make_platforms: PlatformsFactory) -> None:
    first = await make_platforms()
    first.telegram.inject_message("/persona@testbot You are Captain Hook.", chat_id=GROUP, user_id=TELEGRAM_ADMIN)
    await until(lambda: len(first.telegram.sent_messages) == 1)
    assert first.telegram.sent_messages[0].text.startswith("Persona set for this chat")
    await first.gateway.aclose()

    second = await make_platforms()
    second.telegram.inject_message("@testbot who are you?", chat_id=GROUP, user_id=7)
    await until(lambda: len(second.telegram.sent_messages) == 2)
    system = second.llm.requests[-1].messages[0]
    assert system["role"] == "system" and str(system["content"]).startswith("You are Captain Hook.")
