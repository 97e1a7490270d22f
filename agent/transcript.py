"""Reading OpenAI-format JSONL transcripts (one chat message per line), with errors that name the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

__all__ = ["PROGRESS_MIN_BYTES", "MalformedTranscript", "read_transcript", "read_transcript_file"]

PROGRESS_MIN_BYTES = 1_000_000
_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})


class MalformedTranscript(ValueError):
    """A JSONL line is not an OpenAI chat message; ``line`` is 1-based."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line


def _check_message(line: int, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedTranscript(line, "expected a JSON object (one chat message)")
    role = value.get("role")
    if role not in _ROLES:
        raise MalformedTranscript(line, f"role must be one of {', '.join(sorted(_ROLES))}, got {role!r}")
    content = value.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise MalformedTranscript(line, "content must be a string, a list of parts, or null")
    calls = value.get("tool_calls")
    if calls is not None and (not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls)):
        raise MalformedTranscript(line, "tool_calls must be a list of objects")
    return value


def read_transcript(stream: IO[str], size_hint: int = 0, progress: IO[str] | None = None) -> list[dict[str, Any]]:
    """Parse a JSONL transcript; blank lines are skipped. Raises `MalformedTranscript` naming the line.

    A progress bar is drawn on ``progress`` when ``size_hint`` says the input is long.
    """
    messages: list[dict[str, Any]] = []
    show = progress is not None and size_hint >= PROGRESS_MIN_BYTES
    bar = Progress(TextColumn("reading transcript"), BarColumn(), TextColumn("{task.completed:,} bytes"),
                   console=Console(file=progress), transient=True, disable=not show)
    with bar:
        task = bar.add_task("read", total=size_hint or None)
        for number, raw in enumerate(stream, start=1):
            bar.advance(task, len(raw.encode()))
            if not raw.strip():
                continue
            try:
                value = json.loads(raw)
            except json.JSONDecodeError as error:
                raise MalformedTranscript(number, f"invalid JSON ({error.msg})") from None
            messages.append(_check_message(number, value))
    return messages


def read_transcript_file(path: Path, progress: IO[str] | None = None) -> list[dict[str, Any]]:
    """`read_transcript` over a file; ``OSError`` when it cannot be opened."""
    with path.open(encoding="utf-8") as stream:
        return read_transcript(stream, path.stat().st_size, progress)
