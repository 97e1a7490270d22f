"""The console on a terminal streams an answer as it arrives, through the Adapter protocol's live reply:
finished lines are printed above the prompt, the line still being written shows under it."""

from __future__ import annotations

import io

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from adapters.console import ConsoleAdapter
from adapters.console_prompt import ConsolePrompt


async def test_terminal_prints_lines_as_they_complete_and_shows_the_line_being_written() -> None:
    out = io.StringIO()
    with create_pipe_input() as pipe:
        console = ConsoleAdapter(prompt=ConsolePrompt("me", colour=False, pt_input=pipe, pt_output=DummyOutput()),
                                 stdout=out, bot_name="Bot", user_name="me")
        live = console.live_reply(console._inbound("hi"))
        assert live is not None
        await live.text("Hel")
        assert out.getvalue() == "" and console._status() == "Bot> Hel"
        await live.text("Hello, world.\nSecond li")
        assert out.getvalue() == "Bot> Hello, world.\n" and console._status() == "Bot> Second li"
        await live.status("🔎 searching history…")
        assert out.getvalue() == "Bot> Hello, world.\nSecond li\n(🔎 searching history…)\n"
        await live.text("Found it")
        await live.finish("Found it.")
        assert out.getvalue() == "Bot> Hello, world.\nSecond li\n(🔎 searching history…)\nFound it.\n"
        assert console._status() == ""


async def test_a_final_text_that_does_not_continue_the_stream_is_printed_whole() -> None:
    out = io.StringIO()
    with create_pipe_input() as pipe:
        console = ConsoleAdapter(prompt=ConsolePrompt("me", colour=False, pt_input=pipe, pt_output=DummyOutput()),
                                 stdout=out, bot_name="Bot")
        live = console.live_reply(console._inbound("hi"))
        assert live is not None
        await live.text("draft line\nmore")
        await live.finish("Final answer")
        assert out.getvalue() == "Bot> draft line\nFinal answer\n"


async def test_piped_output_gets_whole_answers() -> None:
    console = ConsoleAdapter(stdin=io.StringIO(""), stdout=io.StringIO())
    assert console.live_reply(console._inbound("hi")) is None
