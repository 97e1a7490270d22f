"""The deterministic static summary used when the summary model fails (R-C8).

Built without an LLM from the middle itself: the user's asks, the tools used with their targets and first
result line, the files touched and the errors seen. It follows the same section names as the LLM template so
the next (LLM) compression can update it like any previous summary. Bounded in size, redacted.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent.compression.describe import call_arguments, call_target
from agent.compression.messages import Message, content_text, tool_calls_of
from agent.compression.redact import redact_secrets
from agent.compression.summary import strip_summary

__all__ = ["build_static_summary"]

_MAX_ACTIONS = 40
_MAX_ASKS = 12
_MAX_ERRORS = 10
_MAX_FILES = 30
_ASK_CHARS = 300
_SNAPSHOT_CHARS = 1_500
_PREVIOUS_CHARS = 4_000
_ERROR_RE = re.compile(r"(?i)(traceback|error|exception|failed|failure|fatal|denied|not found)")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file")


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _results_by_id(messages: Sequence[Message]) -> dict[str, str]:
    return {
        str(m.get("tool_call_id")): content_text(m) for m in messages if m.get("role") == "tool" and m.get("tool_call_id")
    }


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def _actions(messages: Sequence[Message], results: Mapping[str, str]) -> list[str]:
    actions: list[str] = []
    for message in messages:
        for call in tool_calls_of(message):
            name = str((call.get("function") or {}).get("name") or "tool")
            target = call_target(call) or ""
            result = results.get(str(call.get("id")))
            outcome = _clip(_first_line(result), 100) if result else "no result recorded"
            actions.append(f"CALL {name} {target}".rstrip() + f" — {outcome} [tool: {name}]")
    return actions


def _files(messages: Sequence[Message]) -> list[str]:
    files: dict[str, None] = {}
    for message in messages:
        for call in tool_calls_of(message):
            args: Mapping[str, Any] = call_arguments(call)
            for key in _PATH_KEYS:
                value = args.get(key)
                if isinstance(value, str) and value.strip():
                    files[_clip(value, 120)] = None
    return list(files)


def _errors(messages: Sequence[Message]) -> list[str]:
    errors: dict[str, None] = {}
    for message in messages:
        if message.get("role") != "tool":
            continue
        for line in content_text(message).splitlines():
            if _ERROR_RE.search(line):
                errors[_clip(line, 160)] = None
    return list(errors)[-_MAX_ERRORS:]


def _numbered(items: list[str], limit: int, noun: str) -> list[str]:
    if not items:
        return []
    shown = items[-limit:]
    first = len(items) - len(shown) + 1
    lines = [f"({len(items) - len(shown)} earlier {noun} omitted)"] if len(items) > len(shown) else []
    return lines + [f"{first + i}. {item}" for i, item in enumerate(shown)]


def build_static_summary(
    middle: Sequence[Message], *, today: datetime.date, previous_summary: str | None = None
) -> str:
    """A summary body for ``middle`` built without an LLM; deterministic for the same input and date."""
    asks = [t for t in (strip_summary(content_text(m)).strip() for m in middle if m.get("role") == "user") if t]
    actions = _actions(middle, _results_by_id(middle))
    files = _files(middle)
    errors = _errors(middle)
    day = today.isoformat()
    sections: list[tuple[str, list[str]]] = [
        ("Historical Task Snapshot", [_clip(asks[-1], _SNAPSHOT_CHARS)] if asks else []),
        ("Goal", [_clip(asks[0], _ASK_CHARS)] if len(asks) > 1 else []),
        (f"Completed Actions (all done before {day})", _numbered(actions, _MAX_ACTIONS, "actions")),
        ("Blocked", [f"- {e}" for e in errors]),
        ("Historical Pending User Asks", [f"- {_clip(a, _ASK_CHARS)}" for a in asks[-_MAX_ASKS:-1]]),
        ("Relevant Files", [f"- {f}" for f in files[-_MAX_FILES:]]),
        ("Critical Context", [f"Static summary of {len(middle)} messages (no summary model); other details were lost."]),
    ]
    if previous_summary:
        sections.append(("Earlier Summary (carried over)", [_clip_block(previous_summary, _PREVIOUS_CHARS)]))
    # Empty sections are left out: a static summary must stay smaller than the turns it replaces.
    text = "\n\n".join(f"## {title}\n" + "\n".join(lines) for title, lines in sections if lines)
    return redact_secrets(text)


def _clip_block(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
