"""The console adapter on its own: piped lines or a scripted terminal in, Inbound out, replies printed."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput

from adapters.base import Inbound, InboundHandler
from adapters.console import ConsoleAdapter
from adapters.console_prompt import ConsolePrompt, colour_wanted


async def _run(text: str, **kw: object) -> tuple[list[Inbound], str]:
    out = io.StringIO()
    adapter = ConsoleAdapter(stdin=io.StringIO(text), stdout=out, **kw)  # type: ignore[arg-type]
    seen: list[Inbound] = []

    async def handler(inbound: Inbound) -> None:
        seen.append(inbound)
        await asyncio.sleep(0.01)  # answered after a delay: close must still wait for it
        await adapter.send(inbound, f"echo {inbound.text}")

    await adapter.start(handler)
    await asyncio.wait_for(adapter.wait_closed(), 5)
    await adapter.stop()
    return seen, out.getvalue()


async def test_lines_become_dm_inbounds_and_every_one_is_answered_before_close() -> None:
    seen, out = await _run("hello\n\n/compress the db  \nbye\n", user_name="ann", admin=False)
    assert [m.text for m in seen] == ["hello", "/compress the db", "bye"]
    assert all(m.chat_type == "dm" and m.platform == "console" and m.user_id == "ann" for m in seen)
    # Numbered in order, unique to this run (gateways sharing Redis de-duplicate inbound ids).
    run = seen[0].message_id.rsplit("-", 1)[0]
    assert [m.message_id for m in seen] == [f"{run}-1", f"{run}-2", f"{run}-3"]
    assert seen[1].is_command and seen[1].command == "compress" and seen[1].command_args == "the db"
    assert not seen[0].is_command and not seen[0].is_admin_hint
    assert sorted(out.splitlines()) == ["echo /compress the db", "echo bye", "echo hello"]


async def test_quit_stops_reading() -> None:
    seen, out = await _run("one\n/quit\ntwo\n")
    assert [m.text for m in seen] == ["one"]
    assert seen[0].is_admin_hint  # the local operator owns the process
    assert out == "echo one\n"


async def test_no_input_closes_at_once() -> None:
    seen, out = await _run("")
    assert seen == [] and out == ""


# --- the terminal: prompt_toolkit driven through a pipe, as a terminal would type ----------------------------

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
CTRL_C, UP, ALT_ENTER = "\x03", "\x1b[A", "\x1b\r"


class Terminal:
    """A console adapter on a scripted terminal: ``type`` feeds keys, ``out`` collects what was printed."""

    def __init__(self, pipe: PipeInput, history_path: Path | None = None) -> None:
        self.pipe = pipe
        self.out = io.StringIO()
        prompt = ConsolePrompt("you", colour=False, history_path=history_path, pt_input=pipe,
                               pt_output=DummyOutput())
        self.adapter = ConsoleAdapter(prompt=prompt, stdout=self.out)

    async def type(self, keys: str, settle: float = 0.15) -> None:
        self.pipe.send_text(keys)
        await asyncio.sleep(settle)


async def until(condition: Callable[[], object], within: float = 10) -> None:
    """Wait for ``condition`` (the prompt runs on the same loop, at its own pace on a busy machine)."""
    deadline = asyncio.get_running_loop().time() + within
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def terminal(handler_for: Callable[[ConsoleAdapter], InboundHandler],
                   history_path: Path | None = None) -> AsyncIterator[Terminal]:
    with create_pipe_input() as pipe:
        term = Terminal(pipe, history_path)
        await term.adapter.start(handler_for(term.adapter))
        try:
            yield term
        finally:
            await term.adapter.stop()


def echo(seen: list[str]) -> Callable[[ConsoleAdapter], InboundHandler]:
    def make(adapter: ConsoleAdapter) -> InboundHandler:
        async def handler(inbound: Inbound) -> None:
            seen.append(inbound.text)
            await adapter.send(inbound, f"echo {inbound.text}")
        return handler
    return make


async def test_a_bracketed_paste_is_one_message_with_its_indentation() -> None:
    seen: list[str] = []
    async with terminal(echo(seen)) as term:
        await term.type(f"{PASTE_START}def f(x):\n    if x:\n        return 1\n\n    return 2\n{PASTE_END}\r")
        await term.type("/quit\r")
        await asyncio.wait_for(term.adapter.wait_closed(), 5)
    assert seen == ["def f(x):\n    if x:\n        return 1\n\n    return 2"]
    assert "Concord> echo def f(x):\n    if x:" in term.out.getvalue()


async def test_lines_arriving_in_one_read_are_one_message() -> None:
    # A terminal without bracketed paste: the pasted lines and their Enters arrive together.
    seen: list[str] = []
    async with terminal(echo(seen)) as term:
        await term.type("first line\r  indented second\r")
        await term.type("next\r")
        await until(lambda: len(seen) == 2)
    assert seen == ["first line\n  indented second", "next"]


async def test_alt_enter_starts_a_new_line_and_enter_sends() -> None:
    seen: list[str] = []
    async with terminal(echo(seen)) as term:
        for key in ("one", ALT_ENTER, "two", "\r"):
            await term.type(key, settle=0.05)
        await until(lambda: seen)
    assert seen == ["one\ntwo"]


async def test_history_and_line_editing(tmp_path: Path) -> None:
    seen: list[str] = []
    history = tmp_path / "console_history"
    async with terminal(echo(seen), history) as term:
        await term.type("hello world\r")
        await until(lambda: seen)
        await term.type(UP + "\x7f" * 5 + "there\r")  # ↑ recalls it, backspace edits it
        await until(lambda: len(seen) == 2)
    assert seen == ["hello world", "hello there"]
    async with terminal(echo(seen), history) as term:  # the next run remembers
        await term.type(UP + UP + "\r")
        await until(lambda: len(seen) == 3)
    assert seen[-1] == "hello world"


def slow_first(seen: list[str], cancelled: asyncio.Event) -> Callable[[ConsoleAdapter], InboundHandler]:
    """A handler whose first answer would take 60 s (``cancelled`` is set when it is cut off); later ones are
    instant. Every message is recorded in ``seen``."""

    def build(adapter: ConsoleAdapter) -> InboundHandler:
        async def handler(inbound: Inbound) -> None:
            seen.append(inbound.text)
            if len(seen) == 1:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
        return handler

    return build


async def test_ctrl_c_cancels_the_running_answer_at_once_and_a_second_quits() -> None:
    seen: list[str] = []
    cancelled = asyncio.Event()
    async with terminal(slow_first(seen, cancelled)) as term:
        await term.type("a long question\r")
        await until(term.adapter._status)  # "thinking…" under the prompt
        started = asyncio.get_running_loop().time()
        await term.type(CTRL_C, settle=0)
        await asyncio.wait_for(cancelled.wait(), 5)
        assert asyncio.get_running_loop().time() - started < 10  # the answer would take 60 s
        await until(lambda: not term.adapter._status())
        await term.type(CTRL_C)
        await asyncio.wait_for(term.adapter.wait_closed(), 5)
    assert seen == ["a long question"]


async def test_ctrl_c_clears_a_half_typed_line_as_a_shell_does() -> None:
    seen: list[str] = []
    async with terminal(echo(seen)) as term:
        await term.type("half a thou")
        await term.type(CTRL_C)
        assert not term.adapter._closed.is_set()  # still chatting
        await term.type("hello\r")
        await until(lambda: seen == ["hello"])  # the draft is gone, not prepended
        await term.type(CTRL_C)  # an empty prompt: quits
        await asyncio.wait_for(term.adapter.wait_closed(), 5)


async def test_ctrl_c_stops_the_answer_and_keeps_the_line_being_typed() -> None:
    seen: list[str] = []
    cancelled = asyncio.Event()
    async with terminal(slow_first(seen, cancelled)) as term:
        await term.type("a long question\r")
        await until(term.adapter._status)
        await term.type("and then")
        await term.type(CTRL_C)
        await asyncio.wait_for(cancelled.wait(), 5)
        await term.type(" this\r")
        await until(lambda: seen == ["a long question", "and then this"])


async def test_ctrl_c_goes_to_the_gateway_when_it_listens() -> None:
    interrupted: list[str] = []
    release = asyncio.Event()

    def waiting(adapter: ConsoleAdapter) -> InboundHandler:
        adapter.on_interrupt = lambda inbound: (interrupted.append(inbound.text), release.set())

        async def handler(inbound: Inbound) -> None:
            await release.wait()
            await adapter.send(inbound, "interrupted reply")
        return handler

    async with terminal(waiting) as term:
        await term.type("question\r")
        await until(term.adapter._status)
        await term.type(CTRL_C)
        await until(lambda: "interrupted reply" in term.out.getvalue())
        assert interrupted == ["question"]


def test_colour_follows_no_color_and_the_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert colour_wanted(Tty(), {"TERM": "xterm-256color"})
    assert not colour_wanted(Tty(), {"TERM": "xterm-256color", "NO_COLOR": "1"})
    assert not colour_wanted(Tty(), {"TERM": "dumb"})
    assert not colour_wanted(io.StringIO(), {"TERM": "xterm-256color"})
