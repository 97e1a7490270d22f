"""An outside fact extractor for `bench.reachability`, written apart from the evidence ledger's.

The ledger finds its facts with `agent.compression.fact_patterns` (regular expressions over whole texts,
gated by a byte scan). A benchmark that counted only those facts would measure the ledger against its own
reading. This module reads the same messages another way — line by line and token by token, with string
methods and small word tables, no regular expression and nothing imported from ``agent.compression`` — and
decides by structure what a reader would call a fact:

- **path**: a token that is a file-system path (``/etc/fstab``, ``./a/b``, ``src/app.py``, ``STATUS.md``),
  with a ``:12:5`` line suffix or a ``::test`` id cut off; never a URL, an e-mail or an ``and/or``;
- **command**: the first line of every shell command a tool call ran, and a line a chat user types after
  ``sudo`` or a ``$`` prompt;
- **number**: a quantity — a number with a unit (``15 minutes``, ``3.2GB``, ``45%``) or a currency (``$1,200``);
- **error**: the last line of a Python traceback, an exception line (``ValueError: …``), a failing test's id
  (``FAILED a.py::test_x`` gives ``a.py::test_x``; ``FAIL: test_x (mod.Case)``), a tool's own error line
  (``error: …``, ``Error fetching …: …``, ``fatal: …``, ``E: …``, ``gcc``'s ``a.c:3:1: error: …``), the first
  line of a tool result marked ``[error]``, a line holding a system message (``command not found``, ``No
  such file or directory``), a message quoted after the word "error", and a command that exited non-zero,
  with its exit code (``OutsideFact.code``);
- **rule**: a clause in which a user states how things must or must not be done, or a preference, anywhere
  in a message (`bench._outside_rules`).

Each fact's text is verbatim from its message, whitespace collapsed; an exit code belongs to the message that
made the call (the command is there). Errors are read in tool results and users' messages, rules in users'
messages, the rest everywhere (a call's arguments too). Precision / recall on a hand-labelled sample of the
corpus (263 messages; ``tests/bench/test_independent_facts.py``): paths 1.00 / 0.97, commands 1.00 / 0.86,
numbers 1.00 / 0.97, errors 0.96 / 0.87, rules 0.76 / 0.95 — what it misses most is a command or an error a
chat user writes into a sentence.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench._outside_rules import stated_rules

__all__ = ["OUTSIDE_KINDS", "OutsideFact", "message_text", "outside_facts"]

OUTSIDE_KINDS = ("path", "command", "number", "error", "rule")

_MAX_CHARS = 240
_COMMAND_CHARS = 160
_SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "exec", "run_command", "execute_command"})
_EDGE = "\"'`()[]{}<>,;|*!?"
_PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.+@~/")
_FILE_EXTENSIONS = frozenset("""
py pyc pyi pyx ipynb c h cc cpp cxx hpp hh cu cuh m mm rs go java kt scala swift rb php pl pm lua r jl
js mjs cjs jsx ts tsx vue svelte css scss sass less html htm xml xsl svg json jsonl yaml yml toml ini cfg
conf config properties env lock md rst txt tex bib csv tsv log out err sh bash zsh fish ps1 bat cmd mk
cmake sql db sqlite proto graphql patch diff so a o dll exe dylib jar war deb rpm apk iso img tar gz tgz
bz2 xz zip 7z rar whl egg service timer socket desktop rules list sources pem crt key pub png jpg jpeg
gif bmp pdf doc docx ppt pptx xls xlsx odt mp3 mp4 avi mkv wav flac ogg ttf otf woff dat bin pickle pkl
""".split())
_UNITS = frozenset("""
ms µs ns s sec secs second seconds min mins minute minutes h hr hrs hour hours day days week weeks
month months year years kb mb gb tb pb kib mib gib tib bytes byte bit bits kbps mbps gbps kb/s mb/s
hz khz mhz ghz fps rps qps rpm % °c °f km cm mm miles ft kg mg lbs kw mah dpi px
usd eur gbp dollars dollar euros euro cents tokens lines files rows records requests cores threads
""".split())
_CURRENCY = "$€£¥"
_ERROR_ENDINGS = ("Error", "Exception", "Failure", "Fault", "Exit", "Interrupt", "NotReady", "Refused")
_TOOL_ERROR_STARTS = ("error:", "error[", "Error:", "ERROR:", "fatal:", "FATAL:", "E: ", "panic:", "npm ERR!")
# The C library's and the shell's messages, wherever they sit in a line (a user pastes them into a sentence).
_SYSTEM_ERRORS = (": command not found", "No such file or directory", "No such device", ": Permission denied",
                  "Segmentation fault", "was not found on this server")
_QUOTES = {'"': '"', "“": "”", "'": "'"}
# "sudo or gksudo if …", "sudo is …": talk about sudo, not a command.
_PROSE_WORDS = frozenset("or and is it the a to for if not will can should works only again access rights".split())
_EXIT_WORDS = ("returncode", "return code", "exit code", "exit status", "exit_code", "exited with")

@dataclass(frozen=True, slots=True)
class OutsideFact:
    """One fact: its kind (`OUTSIDE_KINDS`), its verbatim text, the position of its message, and for a
    command that exited non-zero the exit ``code`` (then ``text`` is the command and ``status`` the result's
    line that states the code)."""

    kind: str
    text: str
    index: int
    code: str = ""
    status: str = ""


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _flat(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int = _MAX_CHARS) -> str:
    flat = _flat(text)
    if len(flat) <= limit:
        return flat
    cut = flat.rfind(" ", 0, limit)
    return flat[: cut if cut > limit // 2 else limit]


# --- paths -------------------------------------------------------------------------------------------------


def _path_of(token: str, chat: bool) -> str | None:
    """The path ``token`` holds; in ``chat`` (a user's line) "/join" is an IRC command, not a path."""
    word = token.lstrip(_EDGE).rstrip(_EDGE + ".:")
    if "://" in word or word.startswith("www.") or not word:
        return None
    word = word.split("::", 1)[0]
    head, colon, rest = word.partition(":")
    if colon and (not rest or rest.split(":")[0].isdigit()):
        word = head  # "src/app.py:42:7" names the file
    if not word or any(c not in _PATH_CHARS for c in word) or ("@" in word and "/" not in word):
        return None
    segments = [s for s in word.split("/") if s]
    if not segments or not any(c.isalpha() for c in segments[-1]):
        return None
    stem, dot, extension = segments[-1].rpartition(".")
    has_extension = bool(dot and stem.strip(".") and extension in _FILE_EXTENSIONS)
    if "/" not in word:
        return word if has_extension and any(c.isalpha() for c in stem) else None
    if word.startswith(("/", "~/", "./", "../")):
        if len(segments) >= 2 or has_extension:
            return word
        # "/testbed" alone: a path where no IRC command ("/join") is typed, and not a tag's end ("</output>").
        return word if not chat and token.startswith("/") and "<" not in token and ">" not in token else None
    if len(segments) == 1 and word.endswith("/"):  # "build/"; in chat "now/" is a typo more often than a folder
        return word if not chat and len(segments[0]) >= 2 and segments[0].replace("_", "").replace("-", "").isalnum() \
            else None
    # In chat a slash often separates alternatives ("sata/scsi/etc"): there a relative path needs an extension.
    if has_extension or (not chat and (len(segments) >= 3 or (len(segments) == 2 and word.endswith("/")))):
        return word if all(any(c.isalnum() for c in s) for s in segments) else None
    return None


def _paths(text: str, chat: bool = False) -> Iterator[str]:
    for token in text.split():
        if "/" in token or "." in token:
            path = _path_of(token, chat)
            if path:
                yield path


# --- numbers -----------------------------------------------------------------------------------------------


def _is_number(word: str) -> bool:
    digits = word.lstrip("+-")
    if not digits or not digits[0].isdigit() or digits.count(".") > 1:
        return False
    whole, _, fraction = digits.partition(".")
    groups = whole.split(",")
    if len(groups) > 1 and (not groups[0] or any(len(g) != 3 for g in groups[1:])):
        return False
    return all(g.isdigit() for g in groups) and (not fraction or fraction.isdigit())


def _split_unit(word: str) -> tuple[str, str]:
    """("3.2", "GB") of "3.2GB": the longest leading number and what follows."""
    end = 0
    while end < len(word) and (word[end].isdigit() or word[end] in ".,+-"):
        end += 1
    while end and not word[end - 1].isdigit():
        end -= 1
    return word[:end], word[end:]


def _numbers(text: str) -> Iterator[str]:
    tokens = text.split()
    for i, token in enumerate(tokens):
        if token.startswith("[") and token.endswith("%]"):
            continue  # a test runner's progress, not a measurement
        word = token.strip(_EDGE.replace("%", "")).rstrip(".:")
        if not word or not (word[0].isdigit() or word[0] in _CURRENCY or word[0] in "+-"):
            continue
        if word[0] in _CURRENCY:
            if _is_number(word[1:]):
                yield word
            continue
        number, unit = _split_unit(word)
        if not _is_number(number):
            continue
        if unit:
            if unit.lower().removeprefix("-") in _UNITS:  # "3.2GB", "24-hour"
                yield word
        elif i + 1 < len(tokens):
            following = tokens[i + 1].strip(_EDGE).rstrip(".:")
            if following.lower() in _UNITS and (following.isalpha() or following in ("%", "°C", "°F")):
                yield f"{word} {following}"


# --- errors ------------------------------------------------------------------------------------------------


def _is_exception_name(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return (bool(last) and last[0].isupper() and all(c.isalnum() or c == "_" for c in last)
            and all(part.isidentifier() for part in name.split(".")) and last.endswith(_ERROR_ENDINGS))


def _error_of(line: str, chat: bool) -> str | None:
    """The error fact a (stripped) line states, or None; ``chat``: a user's line, where an error may be
    quoted into a sentence."""
    if line.startswith("E ") and line[1:2].isspace():
        line = line[1:].strip()  # pytest's "E   AssertionError: …"
    first, _, rest = line.partition(" ")
    if first in ("FAILED", "ERROR") and "::" in rest.split(" ", 1)[0]:
        return rest.split(" ", 1)[0]  # the failing test's id
    if first in ("FAIL:", "ERROR:") and rest.startswith("test"):
        return line
    if line.endswith((" ... FAIL", " ... ERROR", " ... FAILED")) or line.startswith("--- FAIL: "):
        return line
    name, colon, _ = line.partition(":")
    if (colon or name == line) and " " not in name and _is_exception_name(name):
        return line
    if line.startswith(_TOOL_ERROR_STARTS) or ": error: " in line or ": fatal error: " in line:
        return line
    if first in ("Error", "ERROR", "error") and ":" in line[:60]:
        return line  # "Error fetching result: …"
    if any(marker in line for marker in _SYSTEM_ERRORS):
        return line
    return _quoted_error(line) if chat else None


def _quoted_error(line: str) -> str | None:
    """The message quoted after the word "error" (``got an error "…"``)."""
    at = line.lower().find("error")
    while at >= 0:
        rest = line[at + 5 :].lstrip(" :")
        close = _QUOTES.get(rest[:1])
        end = rest.find(close, 1) if close else -1
        if end > 10:
            return rest[1:end]
        at = line.lower().find("error", at + 5)
    return None


_FAILED_MARK = "[error]"


def _errors(text: str, chat: bool) -> Iterator[str]:
    lines = text.splitlines()
    if lines and lines[0].strip() == _FAILED_MARK:
        # A tool result marked as failed: its first line is the tool's error message.
        first = next((line for line in lines[1:] if line.strip()), "")
        if first:
            yield _clip(first)
    in_traceback = False
    for raw in lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
            continue
        if in_traceback:
            # Frames and source lines are indented, carets mark columns; the first line at the margin is the
            # exception.
            if raw[:1].isspace() or line.startswith(("^", "~")):
                continue
            in_traceback = False
            if not line.startswith(("During handling", "The above exception")):
                yield _clip(line)
                continue
        found = _error_of(line, chat)
        if found:
            yield _clip(found)


def _exit_status(result: str) -> tuple[str, str] | None:
    """(code, the line stating it) when ``result`` says its command exited non-zero."""
    lines = [line.strip() for line in result.splitlines() if line.strip()]
    for line in (*lines[:3], *lines[-3:]):
        lower = line.lower()
        for word in _EXIT_WORDS:
            at = lower.find(word)
            if at < 0:
                continue
            rest = lower[at + len(word):].lstrip(" :=>\"'")
            digits = ""
            for char in rest:
                if not char.isdigit():
                    break
                digits += char
            if digits and int(digits) != 0:
                return digits, line
    return None


# --- commands ----------------------------------------------------------------------------------------------


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
    raw = function.get("arguments")
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _command_of(call: Mapping[str, Any]) -> str | None:
    function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
    args = _arguments(call)
    value = args.get("command", args.get("cmd"))
    if not isinstance(value, str) and str(function.get("name", "")).lower() in _SHELL_TOOLS:
        value = next((v for v in args.values() if isinstance(v, str)), None)
    if not isinstance(value, str):
        return None
    first = next((line for line in value.splitlines() if line.strip()), "")
    return _clip(first, _COMMAND_CHARS) or None


def _typed_commands(text: str) -> Iterator[str]:
    """Lines a chat user types as a shell command: after ``sudo`` or a ``$`` prompt (a "nick:" address
    before it is not part of the command)."""
    for raw in text.splitlines():
        words = raw.split()
        if len(words) >= 2 and words[0].endswith((":", ",")) and words[1] in ("sudo", "$"):
            words = words[1:]
        if words and words[0] == "$":
            words = words[1:]
        elif not (words and words[0] == "sudo"):
            continue
        if len(words) >= 2 and words[1] not in _PROSE_WORDS and words[-1][-1:] != "?":
            yield _clip(" ".join(words), _COMMAND_CHARS)


# --- messages ----------------------------------------------------------------------------------------------


def _facts_of_text(text: str, role: str) -> Iterator[tuple[str, str]]:
    yield from (("path", p) for p in _paths(text, chat=role == "user"))
    yield from (("number", n) for n in _numbers(text))
    if role in ("user", "tool"):
        yield from (("error", e) for e in _errors(text, chat=role == "user"))
    if role == "user":
        yield from (("rule", _clip(r)) for r in stated_rules(text))
        yield from (("command", c) for c in _typed_commands(text))


def outside_facts(messages: Sequence[Mapping[str, Any]]) -> list[OutsideFact]:
    """Every fact of ``messages``, in message order, each (kind, text) once per message."""
    results = {str(m.get("tool_call_id")): message_text(m) for m in messages if m.get("role") == "tool"}
    facts: list[OutsideFact] = []
    for index, message in enumerate(messages):
        role = str(message.get("role"))
        if role == "system":
            continue
        seen: set[tuple[str, str]] = set()
        found: list[OutsideFact] = []
        for kind, text in _facts_of_text(message_text(message), role):
            if (kind, text) not in seen:
                seen.add((kind, text))
                found.append(OutsideFact(kind, text, index))
        for call in message.get("tool_calls") or () if role == "assistant" else ():
            command = _command_of(call)
            if command and ("command", command) not in seen:
                seen.add(("command", command))
                found.append(OutsideFact("command", command, index))
            for value in _arguments(call).values():
                if not isinstance(value, str):
                    continue
                for kind, text in (*(("path", p) for p in _paths(value)), *(("number", n) for n in _numbers(value))):
                    if (kind, text) not in seen:
                        seen.add((kind, text))
                        found.append(OutsideFact(kind, text, index))
            exit_status = _exit_status(results.get(str(call.get("id")), "")) if command else None
            if command and exit_status:
                found.append(OutsideFact("error", command, index, code=exit_status[0], status=exit_status[1]))
        facts.extend(found)
    return facts
