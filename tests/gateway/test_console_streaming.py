"""The console on a terminal prints a streamed answer as it arrives, through the Adapter protocol's live reply."""

from __future__ import annotations

import io

from adapters.console import ConsoleAdapter


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_terminal_prints_tokens_as_they_arrive() -> None:
    out = _Terminal()
    console = ConsoleAdapter(stdin=_Terminal(""), stdout=out, bot_name="Bot", user_name="me")
    inbound = console._inbound("hi")
    live = console.live_reply(inbound)
    assert live is not None
    await live.text("Hel")
    await live.text("Hello, wor")
    assert out.getvalue() == "Bot> Hello, wor"
    await live.status("🔎 searching history…")
    await live.text("Found it")
    await live.finish("Found it.")
    assert out.getvalue() == "Bot> Hello, wor\n(🔎 searching history…)\nFound it.\nme> "


async def test_piped_output_gets_whole_answers() -> None:
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=io.StringIO())
    assert console.live_reply(console._inbound("hi")) is None
