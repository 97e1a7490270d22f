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
# Calls scanned for file paths, newest first: bounds the cost on huge middles without paths.
_FILE_SCAN_CALLS = 500
_ASK_CHARS = 300
_SNAPSHOT_CHARS = 1_500
_PREVIOUS_CHARS = 4_000
_ERROR_RE = re.compile(r"(?i)(traceback|error|exception|failed|failure|fatal|denied|not found)")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file")


def _clip(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    # Redacted before it is cut: half a secret no longer has the shape that gives it away.
    flat = redact_secrets(flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _results_by_id(messages: Sequence[Message], wanted: set[str]) -> dict[str, str]:
    return {
        str(m.get("tool_call_id")): content_text(m)
        for m in messages
        if m.get("role") == "tool" and str(m.get("tool_call_id")) in wanted
    }


def _first_line(text: str) -> str:
    return next((line for line in text.splitlines() if line.strip()), "")


def _actions(messages: Sequence[Message]) -> tuple[int, list[str]]:
    """(number of calls, the newest ``_MAX_ACTIONS`` formatted); only the shown ones are formatted."""
    calls = [call for message in messages for call in tool_calls_of(message)]
    recent = calls[-_MAX_ACTIONS:]
    results = _results_by_id(messages, {str(c.get("id")) for c in recent})
    shown: list[str] = []
    for call in recent:
        name = str((call.get("function") or {}).get("name") or "tool")
        target = call_target(call) or ""
        result = results.get(str(call.get("id")))
        outcome = _clip(_first_line(result), 100) if result else "no result recorded"
        shown.append(f"CALL {name} {target}".rstrip() + f" — {outcome} [tool: {name}]")
    return len(calls), shown


def _files(messages: Sequence[Message]) -> list[str]:
    """The newest ``_MAX_FILES`` distinct paths the calls touched, oldest first."""
    files: dict[str, None] = {}
    scanned = 0
    for message in reversed(messages):
        calls = tool_calls_of(message)
        scanned += len(calls)
        for call in reversed(calls):
            args: Mapping[str, Any] = call_arguments(call)
            for key in _PATH_KEYS:
                value = args.get(key)
                if isinstance(value, str) and value.strip():
                    files.setdefault(_clip(value, 120), None)
        if len(files) >= _MAX_FILES or scanned >= _FILE_SCAN_CALLS:
            break
    return list(files)[:_MAX_FILES][::-1]


def _errors(messages: Sequence[Message]) -> list[str]:
    """The newest ``_MAX_ERRORS`` distinct error lines of tool results, oldest first."""
    errors: dict[str, None] = {}
    for message in reversed(messages):
        if message.get("role") != "tool":
            continue
        for line in reversed(content_text(message).splitlines()):
            if _ERROR_RE.search(line):
                errors.setdefault(_clip(line, 160), None)
                if len(errors) >= _MAX_ERRORS:
                    return list(errors)[::-1]
    return list(errors)[::-1]


def _numbered(total: int, shown: list[str], noun: str) -> list[str]:
    first = total - len(shown) + 1
    lines = [f"({total - len(shown)} earlier {noun} omitted)"] if total > len(shown) else []
    return lines + [f"{first + i}. {item}" for i, item in enumerate(shown)]


def build_static_summary(
    middle: Sequence[Message], *, today: datetime.date, previous_summary: str | None = None
) -> str:
    """A summary body for ``middle`` built without an LLM; deterministic for the same input and date."""
    asks = [t for t in (strip_summary(content_text(m)).strip() for m in middle if m.get("role") == "user") if t]
    total, actions = _actions(middle)
    files = _files(middle)
    errors = _errors(middle)
    day = today.isoformat()
    sections: list[tuple[str, list[str]]] = [
        ("Historical Task Snapshot", [_clip(asks[-1], _SNAPSHOT_CHARS)] if asks else []),
        ("Goal", [_clip(asks[0], _ASK_CHARS)] if len(asks) > 1 else []),
        (f"Completed Actions (all done before {day})", _numbered(total, actions, "actions")),
        ("Blocked", [f"- {e}" for e in errors]),
        ("Historical Pending User Asks", [f"- {_clip(a, _ASK_CHARS)}" for a in asks[-_MAX_ASKS:-1]]),
        ("Relevant Files", [f"- {f}" for f in files]),
        ("Critical Context", [f"Static summary of {len(middle)} messages (no summary model); other details were lost."]),
    ]
    if previous_summary:
        sections.append(("Earlier Summary (carried over)", [_clip_block(previous_summary, _PREVIOUS_CHARS)]))
    # Empty sections are left out: a static summary must stay smaller than the turns it replaces.
    text = "\n\n".join(f"## {title}\n" + "\n".join(lines) for title, lines in sections if lines)
    return redact_secrets(text)


def _clip_block(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
