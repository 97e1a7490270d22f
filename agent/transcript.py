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


def _check_parts(line: int, parts: list[Any]) -> None:
    for index, part in enumerate(parts):
        where = f"content[{index}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise MalformedTranscript(line, f"{where} must be an object with a string 'type'")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise MalformedTranscript(line, f"{where} is a text part whose 'text' is not a string")


def _check_calls(line: int, calls: Any) -> None:
    if not isinstance(calls, list):
        raise MalformedTranscript(line, "tool_calls must be a list of objects")
    for index, call in enumerate(calls):
        where = f"tool_calls[{index}]"
        if not isinstance(call, dict):
            raise MalformedTranscript(line, f"{where} must be an object")
        function = call.get("function")
        if not isinstance(function, dict):
            raise MalformedTranscript(line, f"{where}.function must be an object with 'name' and 'arguments'")
        if not isinstance(function.get("name"), str):
            raise MalformedTranscript(line, f"{where}.function.name must be a string")
        if not isinstance(function.get("arguments", ""), str | dict):
            raise MalformedTranscript(line, f"{where}.function.arguments must be a JSON string")
        if "id" in call and not isinstance(call["id"], str):
            raise MalformedTranscript(line, f"{where}.id must be a string")


def _lone_surrogate(value: Any) -> bool:
    """True when a string anywhere in ``value`` holds half a UTF-16 pair (JSON allows ``"\\ud800"``)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


def _check_message(line: int, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedTranscript(line, "expected a JSON object (one chat message)")
    role = value.get("role")
    if role not in _ROLES:
        raise MalformedTranscript(line, f"role must be one of {', '.join(sorted(_ROLES))}, got {role!r}")
    content = value.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise MalformedTranscript(line, "content must be a string, a list of parts, or null")
    if isinstance(content, list):
        _check_parts(line, content)
    if value.get("tool_calls") is not None:
        _check_calls(line, value["tool_calls"])
    for key in ("name", "tool_call_id"):
        if value.get(key) is not None and not isinstance(value[key], str):
            raise MalformedTranscript(line, f"{key} must be a string")
    return value


def _decode(line: int, raw: bytes | str) -> str:
    if isinstance(raw, str):
        return raw
    if line == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise MalformedTranscript(line, "the file is UTF-16; save it as UTF-8")
    try:
        return raw.decode("utf-8-sig" if line == 1 else "utf-8")
    except UnicodeDecodeError as error:
        raise MalformedTranscript(line, f"not UTF-8 text (byte 0x{raw[error.start]:02x} at column "
                                        f"{error.start + 1})") from None


def _parse(line: int, text: str) -> Any:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise MalformedTranscript(line, f"invalid JSON ({error.msg})") from None
    except RecursionError:
        raise MalformedTranscript(line, "JSON nested too deeply") from None
    except ValueError as error:  # e.g. an integer beyond Python's digit limit
        raise MalformedTranscript(line, f"invalid JSON ({error})") from None
    try:
        broken = "\\u" in text and _lone_surrogate(value)
    except RecursionError:
        raise MalformedTranscript(line, "JSON nested too deeply") from None
    if broken:
        raise MalformedTranscript(line, "a string holds an unpaired UTF-16 surrogate (e.g. \\ud800)")
    return value


def read_transcript(stream: IO[str] | IO[bytes], size_hint: int = 0,
                    progress: IO[str] | None = None) -> list[dict[str, Any]]:
    """Parse a JSONL transcript (text, or bytes that must be UTF-8); blank lines are skipped. Raises
    `MalformedTranscript` naming the line, for bad encodings and oversized numbers or nesting too.

    A progress bar is drawn on ``progress`` when ``size_hint`` says the input is long.
    """
    messages: list[dict[str, Any]] = []
    show = progress is not None and size_hint >= PROGRESS_MIN_BYTES
    bar = Progress(TextColumn("reading transcript"), BarColumn(), TextColumn("{task.completed:,} bytes"),
                   console=Console(file=progress), transient=True, disable=not show)
    with bar:
        task = bar.add_task("read", total=size_hint or None)
        for number, raw in enumerate(stream, start=1):
            bar.advance(task, len(raw))
            text = _decode(number, raw)
            if not text.strip():
                continue
            messages.append(_check_message(number, _parse(number, text)))
    return messages


def read_transcript_file(path: Path, progress: IO[str] | None = None) -> list[dict[str, Any]]:
    """`read_transcript` over a file; ``OSError`` when it cannot be opened."""
    with path.open("rb") as stream:
        return read_transcript(stream, path.stat().st_size, progress)
