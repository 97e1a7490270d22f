"""One-line descriptions of old tool results, built from the call that produced them (R-C1 b).

A pruned result must still tell the model what happened — ``[terminal] ran `npm test` -> exit 0, 47 lines
output`` — so it does not re-run the tool to find out. An empty placeholder would invite exactly that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.compression.messages import parse_arguments
from agent.compression.redact import redact_secrets

__all__ = ["call_arguments", "call_target", "describe_tool_result", "search_exit"]

_COMMAND_KEYS = ("command", "cmd", "script", "code", "input")
_PATH_KEYS = ("path", "file_path", "filepath", "filename", "file", "target_file", "uri", "url")
_START_KEYS = ("offset", "start_line", "line", "start", "from_line", "line_start")
_PATTERN_KEYS = ("pattern", "query", "regex", "search", "q")
_EXIT_RE = re.compile(
    r"(?i)\b(?:exit(?:ed)?(?:\s+with)?(?:\s+code|\s+status)?|return\s*code|returncode|exit_code|status\s+code)"
    r"[\s:=\"']{0,4}(-?\d{1,3})\b"
)
# Every match of an exit-status pattern (this one, the evidence extractor's) starts with one of these words, in
# any case. CPython's engine tries such a pattern at every word of a long output; finding the words is far faster.
_EXIT_WORDS = ("exit", "return", "status")
# The letters outside ASCII that (?i) takes for one of those words' letters (the tests enumerate them): a text
# holding one is scanned by the pattern itself. ("İ" is also the one letter that lowers to two characters.)
_FOLDING_INTO_EXIT_WORDS = ("İ", "ı", "ſ")
_CLIP = 120


def _clip(text: str, limit: int = _CLIP) -> str:
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    # Redacted before it is cut: half a secret no longer has the shape that gives it away.
    flat = redact_secrets(flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _first(args: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, (str, int, float)) and str(value).strip():
            return str(value)
    return None


def _kind(name: str) -> str:
    lowered = name.lower()
    if any(w in lowered for w in ("terminal", "bash", "shell", "exec", "command", "run_")):
        return "run"
    if any(w in lowered for w in ("read", "view", "cat", "open_file", "get_file")):
        return "read"
    if any(w in lowered for w in ("write", "edit", "create_file", "patch", "replace", "str_replace")):
        return "write"
    if any(w in lowered for w in ("grep", "search", "find", "glob")):
        return "search"
    return "other"


def _line_count(text: str) -> int:
    return text.count("\n") + 1 if text else 0


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line
    return ""


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line
    return ""


def call_arguments(call: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """A call's parsed arguments as a mapping ({} when absent, unparsable or not an object)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    try:
        parsed = parse_arguments((fn or {}).get("arguments", "{}"))
    except ValueError:
        return {}
    return parsed if isinstance(parsed, Mapping) else {}


def call_target(call: Mapping[str, Any] | None) -> str | None:
    """What a call acted on — its command, path or search pattern — clipped for display."""
    args = call_arguments(call)
    value = _first(args, _COMMAND_KEYS) or _first(args, _PATH_KEYS) or _first(args, _PATTERN_KEYS)
    return _clip(value, 100) if value else None


def search_exit(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """``pattern.search(text)`` for an exit-status pattern (every match starts with "exit", "return" or
    "status", in any case), tried only where one of those words starts."""
    if not text.isascii() and any(letter in text for letter in _FOLDING_INTO_EXIT_WORDS):
        return pattern.search(text)
    lowered = text.lower()  # as long as the text, character for character
    best: re.Match[str] | None = None
    for word in _EXIT_WORDS:  # each word's first place where the pattern matches; the leftmost of them wins
        at = lowered.find(word)
        while at >= 0 and (best is None or at < best.start()):
            match = pattern.match(text, at)
            if match is not None:
                best = match
                break
            at = lowered.find(word, at + 1)
    return best


def describe_tool_result(call: Mapping[str, Any] | None, fallback_name: Any, text: str) -> str:
    """A short, informative stand-in for a long tool result ``text`` produced by ``call`` (may be unknown)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    name = str((fn or {}).get("name") or fallback_name or "tool")
    args = call_arguments(call)
    lines = _line_count(text)
    kind = _kind(name)
    command = _first(args, _COMMAND_KEYS)
    path = _first(args, _PATH_KEYS)
    if kind == "run" and command:
        match = search_exit(_EXIT_RE, text)
        if match:
            tail = f"exit {match.group(1)}, {lines:,} lines output"
            if match.group(1) != "0":
                tail += f"; last: {_clip(_last_line(text), 80)}"
        else:
            tail = f"{lines:,} lines output"
        return f"[{name}] ran `{_clip(command, 100)}` -> {tail}"
    if kind == "read" and path:
        start = _first(args, _START_KEYS) or "1"
        return f"[{name}] read {_clip(path, 100)} from line {_clip(start, 12)} ({len(text):,} chars)"
    if kind == "write" and path:
        return f"[{name}] wrote {_clip(path, 100)} -> {_clip(_first_line(text), 80)}"
    if kind == "search":
        pattern = _first(args, _PATTERN_KEYS)
        target = f"`{_clip(pattern, 60)}`" if pattern else "files"
        return f"[{name}] searched {target} -> {lines:,} lines output: {_clip(_first_line(text), 60)}"
    shown = ", ".join(f"{k}={_clip(str(v), 40)}" for k, v in list(args.items())[:3])
    call_part = f"({shown})" if shown else ""
    return f"[{name}]{call_part} -> {len(text):,} chars, {lines:,} lines: {_clip(_first_line(text), 80)}"
