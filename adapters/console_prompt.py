"""The console's line editor (prompt_toolkit): editing, history, pastes as one message, colour only when wanted.

Enter sends; Alt+Enter (or Esc then Enter) starts a new line. A paste is one message with its indentation:
bracketed paste arrives as one block, and on terminals without it the lines of a paste arrive in one read,
so an Enter with more keys already waiting behind it is taken as a line break, not as "send". Output printed
while the prompt is shown goes above it (``patch_stdout``), so replies and warnings never land inside what
is being typed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from prompt_toolkit import PromptSession
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.output import ColorDepth, Output

__all__ = ["ConsolePrompt", "colour_wanted"]


def colour_wanted(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Colour only on a terminal, never with ``NO_COLOR`` set (https://no-color.org) or ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _bindings(on_ctrl_c: Callable[[], bool]) -> KeyBindings:
    keys = KeyBindings()

    @keys.add("c-c")
    def _stop_clear_or_quit(event: KeyPressEvent) -> None:
        # As in a shell: Ctrl-C never costs a half-typed message more than the line itself. A running answer is
        # stopped first (the draft stays), then a draft is cleared; only at an empty prompt does it quit.
        if on_ctrl_c():
            return
        if event.current_buffer.text:
            event.current_buffer.reset()
            return
        event.app.exit(exception=KeyboardInterrupt, style="class:aborting")

    @keys.add("enter")
    def _send_or_paste(event: KeyPressEvent) -> None:
        # Keys still queued behind this Enter came in the same read: a paste, whose newlines are text.
        if event.app.key_processor.input_queue:
            event.current_buffer.insert_text("\n")
        else:
            event.current_buffer.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: KeyPressEvent) -> None:
        event.current_buffer.insert_text("\n")

    return keys


class ConsolePrompt:
    """One ``you>`` prompt at a time; `read` returns the message typed or pasted.

    Ctrl-C first calls ``on_ctrl_c`` (set by the console), which returns True when it stopped something (an answer being written:
    the draft stays); otherwise it clears a draft, and at an empty prompt `read` raises ``KeyboardInterrupt``.
    Ctrl-D at an empty prompt raises ``EOFError``. ``status`` is shown under the prompt (e.g. "thinking…");
    call `refresh` after it changes.
    """

    def __init__(
        self,
        user_name: str,
        *,
        colour: bool,
        history_path: Path | None = None,
        status: Callable[[], str] = lambda: "",
        pt_input: Input | None = None,
        pt_output: Output | None = None,
    ) -> None:
        self._label = f"{user_name}> "
        self._colour = colour
        self._status = status
        self.on_ctrl_c: Callable[[], bool] = lambda: False
        history: History = InMemoryHistory()
        if history_path is not None:
            try:
                history_path.parent.mkdir(parents=True, exist_ok=True)
                history_path.touch(exist_ok=True)
                history = FileHistory(str(history_path))
            except OSError:
                pass  # a read-only data dir only costs the history across runs
        self._session: PromptSession[str] = PromptSession(
            history=history, key_bindings=_bindings(lambda: self.on_ctrl_c()), multiline=True, input=pt_input, output=pt_output,
            prompt_continuation=lambda width, line, wrap: "." * (width - 1) + " ",
            bottom_toolbar=self._toolbar, enable_history_search=True,
            color_depth=None if colour else ColorDepth.DEPTH_1_BIT)

    def _toolbar(self) -> FormattedText | None:
        text = self._status()
        return FormattedText([("", text)]) if text else None

    def _message(self) -> FormattedText:
        return FormattedText([("ansigreen bold" if self._colour else "", self._label)])

    async def read(self) -> str:
        """Wait for the next message (editing, history and pastes handled by prompt_toolkit)."""
        return await self._session.prompt_async(self._message())

    def refresh(self) -> None:
        """Redraw the prompt (its status line changed)."""
        app = self._session.app
        if app.is_running:
            app.invalidate()
