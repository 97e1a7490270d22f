"""A terminal chat: one DM session with the bot, the same commands as on the platforms.

Used when no platform token is configured. On a terminal it is a line editor (`adapters.console_prompt`):
history, editing, pastes kept as one message, Alt+Enter for a new line, Ctrl-C stopping the answer being
written (messages typed meanwhile are still answered; a half-typed one stays), else clearing a half-typed
line, and at an empty prompt with nothing running, quitting. With piped stdin it reads one message per line,
which is how tests and scripts drive it; those lines are read by a daemon thread, because a blocked
``readline`` must never keep the process alive after shutdown (``asyncio.to_thread`` would: the default
executor is joined at loop close). ``/quit``, Ctrl-D or end of input closes the chat once every message
already read has been answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from adapters.base import Adapter, ChatRef, Inbound, InboundHandler, LiveReply, parse_command

if TYPE_CHECKING:
    from adapters.console_prompt import ConsolePrompt

__all__ = ["ConsoleAdapter", "input_is_empty", "is_terminal"]

log = logging.getLogger(__name__)

_EOF = None
QUIT_WORDS = frozenset({"/quit", "/exit"})
# At end of input every message read is answered, however long the model takes.
_ANSWER_ALL_SECONDS = 86_400.0
# After a quitting Ctrl-C the cancelled answers get this long to store what they did.
_CANCEL_GRACE_SECONDS = 5.0
_BOLD_CYAN, _RESET = "\x1b[1;36m", "\x1b[0m"


class ConsoleAdapter(Adapter):
    """stdin → Inbound (a DM from ``user_name``), replies → stdout.

    ``on_interrupt`` is how Ctrl-C reaches the gateway: called with each message whose answer is still
    being produced, it cancels that turn. Without it the handler tasks themselves are cancelled.
    """

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
        history_path: Path | None = None,
        prompt: ConsolePrompt | None = None,
    ) -> None:
        super().__init__()
        self.user_name = user_name
        self.admin = admin
        self.bot_name = bot_name
        self.on_interrupt: Callable[[Inbound], None] | None = None
        self._in = stdin or sys.stdin
        self._out = stdout
        self._history_path = history_path
        self._prompt = prompt
        self._interactive = prompt is not None or (stdin is None and stdout is None and is_terminal())
        self._colour = False
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._screen = contextlib.ExitStack()
        self._closed = asyncio.Event()
        self._counter = 0
        # Message ids unique across runs and processes: the gateway de-duplicates inbound ids (in Redis when
        # several gateways share one), and every console numbers its lines from 1.
        self._run = secrets.token_hex(4)
        self._lines_read = 0
        self._in_flight: dict[str, Inbound] = {}
        # The line of a streamed answer still being written: shown under the prompt until it is complete.
        self._live_line = ""

    @property
    def chat(self) -> ChatRef:
        """The one conversation this adapter carries."""
        return ChatRef("console", "console")

    @property
    def interactive(self) -> bool:
        """True on a terminal (line editor), False for piped input (one message per line)."""
        return self._interactive

    @property
    def received_input(self) -> bool:
        """Whether any line at all arrived (piped input that is empty from the start means nobody is there)."""
        return self._lines_read > 0

    async def start(self, on_message: InboundHandler) -> None:
        """Start reading input; each message becomes an Inbound for ``on_message``."""
        if self._reader is not None:
            return
        self._handler = on_message
        if self._interactive:
            self._open_terminal()
            self._write(f"Chatting with {self.bot_name}. Enter sends, Alt+Enter adds a line. Ctrl-C stops an "
                        f"answer or clears the line; at an empty prompt it quits, as do Ctrl-D and /quit. /help "
                        f"lists commands.\n")
            self._reader = asyncio.create_task(self._prompt_loop())
        else:
            loop = asyncio.get_running_loop()
            threading.Thread(target=self._read_lines, args=(loop,), name="console-stdin", daemon=True).start()
            self._reader = asyncio.create_task(self._pump_lines())

    async def stop(self) -> None:
        """Stop reading; messages already read are answered first (idempotent)."""
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        await self._drain(grace_s=30.0)
        self._screen.close()
        self._closed.set()

    async def wait_closed(self) -> None:
        """Return once input ended (EOF, /quit, Ctrl-D or a quitting Ctrl-C) and its messages were handled."""
        await self._closed.wait()

    @contextlib.asynccontextmanager
    async def typing(self, chat: ChatRef | Inbound) -> AsyncIterator[None]:
        """Nothing to do: on a terminal the prompt's status line says "thinking" while answers run."""
        yield

    def live_reply(self, target: Inbound) -> LiveReply | None:
        """On a terminal the answer streams in as it arrives; piped output gets whole answers."""
        return _TerminalReply(self) if self._interactive else None

    async def _send_chunk(self, chat: ChatRef, text: str, reply_to: str | None) -> None:
        self._write(f"{self._bot_label()}{text}\n")

    def _bot_label(self) -> str:
        if not self._interactive:
            return ""
        label = f"{self.bot_name}> "
        return f"{_BOLD_CYAN}{label}{_RESET}" if self._colour else label

    # --- terminal ---------------------------------------------------------------------------------------

    def _open_terminal(self) -> None:
        from prompt_toolkit.patch_stdout import patch_stdout

        from adapters.console_prompt import ConsolePrompt, colour_wanted

        self._colour = colour_wanted(sys.stdout)
        if self._prompt is None:
            self._prompt = ConsolePrompt(self.user_name, colour=self._colour, history_path=self._history_path,
                                         status=self._status)
        self._prompt.on_ctrl_c = self._stop_answers
        # Everything printed from now on (replies, log records on stderr) goes above the prompt.
        self._screen.enter_context(patch_stdout(raw=True))

    def _status(self) -> str:
        if self._live_line:
            return f"{self.bot_name}> {self._live_line}"
        return " thinking… (Ctrl-C cancels)" if self._in_flight else ""

    def _show_live_line(self, text: str) -> None:
        self._live_line = text
        self._refresh()

    async def _prompt_loop(self) -> None:
        prompt = self._prompt
        assert prompt is not None
        quitting = False
        while True:
            try:
                text = await prompt.read()
            except KeyboardInterrupt:  # at an empty prompt with nothing running (see `_stop_answers`)
                quitting = True
                break
            except EOFError:
                break
            text = _clean(text)
            if text.lower() in QUIT_WORDS:
                break
            if text:
                self._lines_read += 1
                self._dispatch(self._inbound(text))
        if quitting:
            self._interrupt()
        await self._drain(grace_s=_CANCEL_GRACE_SECONDS if quitting else _ANSWER_ALL_SECONDS)
        self._closed.set()

    def _stop_answers(self) -> bool:
        """Ctrl-C at the prompt: stop the answers being written; False when none is."""
        if not self._in_flight:
            return False
        self._interrupt()
        return True

    def _interrupt(self) -> None:
        running = list(self._in_flight.values())
        if self.on_interrupt is None:
            for task in self._tasks:
                task.cancel()
            return
        for inbound in running:
            self.on_interrupt(inbound)

    async def _run_handler(self, handler: InboundHandler, inbound: Inbound) -> None:
        self._in_flight[inbound.message_id] = inbound
        self._refresh()
        try:
            await super()._run_handler(handler, inbound)
        finally:
            self._in_flight.pop(inbound.message_id, None)
            self._refresh()

    def _refresh(self) -> None:
        if self._prompt is not None:
            self._prompt.refresh()

    # --- piped input ------------------------------------------------------------------------------------

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        """Thread body: forward each stdin line to the loop; None at EOF."""
        try:
            for line in self._in:
                loop.call_soon_threadsafe(self._lines.put_nowait, line.rstrip("\r\n"))
        except (OSError, ValueError) as exc:  # stdin closed under us, or not text
            log.warning("console input failed: %s", exc)
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(self._lines.put_nowait, _EOF)

    async def _pump_lines(self) -> None:
        while True:
            line = await self._lines.get()
            if line is _EOF:
                break
            self._lines_read += 1
            if line.strip().lower() in QUIT_WORDS:
                break
            if line.strip():
                self._dispatch(self._inbound(line.strip()))
        await self._drain(grace_s=_ANSWER_ALL_SECONDS)
        self._closed.set()

    def _inbound(self, text: str) -> Inbound:
        self._counter += 1
        command = parse_command(text.lstrip())
        return Inbound(
            platform="console", chat_id="console", chat_type="dm", thread_id=None, user_id=self.user_name,
            user_name=self.user_name, message_id=f"{self._run}-{self._counter}", text=text, is_command=command is not None,
            command=command[0] if command else None, command_args=command[1] if command else "",
            is_admin_hint=self.admin,
        )

    def _write(self, text: str) -> None:
        # On a terminal sys.stdout is prompt_toolkit's proxy while the prompt is open, so look it up now.
        out = self._out or sys.stdout
        out.write(text)
        out.flush()


class _TerminalReply(LiveReply):
    """A streamed answer on the terminal: finished lines are printed above the prompt as they complete, the line
    still being written shows under it (printing half a line would leave the prompt stuck to its end).

    A text that does not continue what was printed (the next model call after a tool round) starts a new line.
    """

    def __init__(self, console: ConsoleAdapter) -> None:
        self._console = console
        self._text = ""  # the latest text of the current model call
        self._printed = 0  # how much of it is printed: always up to a line break
        self._labelled = False

    def _print(self, chunk: str) -> None:
        if not self._labelled:
            chunk, self._labelled = self._console._bot_label() + chunk, True
        self._console._write(chunk)

    def _advance(self, text: str) -> None:
        if not text.startswith(self._text[: self._printed]):
            self._printed = 0  # a new call's text: its lines print after what is already there
        self._text = text
        end = text.rfind("\n") + 1
        if end > self._printed:
            self._print(text[self._printed:end])
            self._printed = end
        self._console._show_live_line(text[self._printed:])

    async def text(self, text: str) -> None:
        self._advance(text)

    async def status(self, text: str) -> None:
        self._advance(self._text + "\n" if self._text[self._printed:] else self._text)
        self._print(f"({text})\n")
        self._text, self._printed = "", 0

    async def finish(self, text: str) -> None:
        self._advance(text + "\n")
        self._console._show_live_line("")


def _clean(text: str) -> str:
    """A typed or pasted message without surrounding blank lines or trailing spaces; indentation is kept."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def input_is_empty(stream: TextIO | None = None) -> bool:
    """True when the console's input can never hold a message: ``/dev/null`` (what Docker and systemd give a
    service) or an empty regular file. Pipes and terminals are not judged here, since their data may come later."""
    try:
        info = os.fstat((stream or sys.stdin).fileno())
        null = os.stat(os.devnull)
    except (AttributeError, OSError, ValueError):
        return False
    if stat.S_ISCHR(info.st_mode):
        return info.st_rdev == null.st_rdev
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def is_terminal(stdin: TextIO | None = None, stdout: TextIO | None = None) -> bool:
    """Whether both ends are a terminal (then the console is interactive)."""
    for stream in (stdin or sys.stdin, stdout or sys.stdout):
        try:
            if not stream.isatty():
                return False
        except (AttributeError, ValueError):
            return False
    return True
