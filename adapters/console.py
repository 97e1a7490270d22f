"""A terminal chat: one DM session with the bot, the same commands as on the platforms.

Used when no platform token is configured. Works interactively and with piped stdin (one message per
line), which is how tests drive it through a subprocess. Lines are read by a daemon thread: a blocked
``readline`` must never keep the process alive after shutdown, which ``asyncio.to_thread`` would (the
default executor is joined at loop close). ``/quit`` or end of input closes the chat once every message
already read has been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import AsyncIterator
from typing import TextIO

from adapters.base import Adapter, ChatRef, Inbound, InboundHandler, LiveReply, parse_command

__all__ = ["ConsoleAdapter"]

log = logging.getLogger(__name__)

_EOF = None
QUIT_WORDS = frozenset({"/quit", "/exit"})
# At end of input every message read is answered, however long the model takes.
_ANSWER_ALL_SECONDS = 86_400.0


class ConsoleAdapter(Adapter):
    """stdin → Inbound (a DM from ``user_name``), replies → stdout."""

    name = "console"
    limit = 1_000_000  # a terminal has no message limit; one reply is one chunk

    def __init__(
        self,
        *,
        user_name: str = "you",
        admin: bool = True,
        bot_name: str = "Concord",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
    ) -> None:
        super().__init__()
        self.user_name = user_name
        self.admin = admin
        self.bot_name = bot_name
        self._in = stdin or sys.stdin
        self._out = stdout or sys.stdout
        self._interactive = _isatty(self._in) and _isatty(self._out)
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._pump: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._counter = 0
        # A streamed answer is being printed on the current line (the thinking marker must not erase it).
        self._line_open = False

    @property
    def chat(self) -> ChatRef:
        """The one conversation this adapter carries."""
        return ChatRef("console", "console")

    async def start(self, on_message: InboundHandler) -> None:
        """Start reading stdin; each line becomes an Inbound for ``on_message``."""
        if self._pump is not None:
            return
        self._handler = on_message
        loop = asyncio.get_running_loop()
        threading.Thread(target=self._read_lines, args=(loop,), name="console-stdin", daemon=True).start()
        self._pump = asyncio.create_task(self._pump_lines())
        if self._interactive:
            self._write(f"Chatting with {self.bot_name}. /help lists commands, /quit leaves.\n")
            self._prompt()

    async def stop(self) -> None:
        """Stop reading; messages already read are answered first (idempotent)."""
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        await self._drain(grace_s=30.0)
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return once input ended (EOF or /quit) and every message read so far was handled."""
        await self._closed.wait()

    @contextlib.asynccontextmanager
    async def typing(self, chat: ChatRef | Inbound) -> AsyncIterator[None]:
        """Show a 'thinking' marker on an interactive terminal while the agent works."""
        if not self._interactive:
            yield
            return
        self._write("… thinking\r")
        try:
            yield
        finally:
            if not self._line_open:
                self._write(" " * 12 + "\r")

    def live_reply(self, target: Inbound) -> LiveReply | None:
        """On an interactive terminal the answer is printed as it arrives; piped output gets whole answers."""
        return _TerminalReply(self) if self._interactive else None

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        prefix = f"{self.bot_name}> " if self._interactive else ""
        self._write(f"{prefix}{text}\n")
        if self._interactive:
            self._prompt()

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        """Thread body: forward each stdin line to the loop; None at EOF."""
        try:
            for line in self._in:
                loop.call_soon_threadsafe(self._lines.put_nowait, line.rstrip("\r\n"))
        except (OSError, ValueError) as exc:  # stdin closed under us
            log.warning("console input failed: %s", exc)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self._lines.put_nowait, _EOF)

    async def _pump_lines(self) -> None:
        while True:
            line = await self._lines.get()
            if line is _EOF or line.strip().lower() in QUIT_WORDS:
                break
            if line.strip():
                self._dispatch(self._inbound(line.strip()))
            elif self._interactive:
                self._prompt()
        await self._drain(grace_s=_ANSWER_ALL_SECONDS)
        self._closed.set()

    def _inbound(self, text: str) -> Inbound:
        self._counter += 1
        command = parse_command(text)
        return Inbound(
            platform="console", chat_id="console", chat_type="dm", thread_id=None, user_id=self.user_name,
            user_name=self.user_name, message_id=str(self._counter), text=text, is_command=command is not None,
            command=command[0] if command else None, command_args=command[1] if command else "",
            is_admin_hint=self.admin,
        )

    def _prompt(self) -> None:
        self._write(f"{self.user_name}> ")

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _TerminalReply(LiveReply):
    """Prints what arrives after what was printed already; a text that does not continue it starts a new line."""

    def __init__(self, console: ConsoleAdapter) -> None:
        self._console = console
        self._printed: str | None = None

    def _show(self, text: str) -> None:
        write = self._console._write
        if self._printed is None:
            self._console._line_open = True
            write(f"{self._console.bot_name}> {text}")
        elif text.startswith(self._printed):
            write(text[len(self._printed):])
        else:
            write(f"\n{text}")
        self._printed = text

    async def text(self, text: str) -> None:
        self._show(text)

    async def status(self, text: str) -> None:
        self._show(f"({text})")
        self._console._write("\n")
        self._printed = ""  # the next text starts on the line of its own just begun

    async def finish(self, text: str) -> None:
        self._show(text)
        self._console._line_open = False
        self._console._write("\n")
        self._console._prompt()
