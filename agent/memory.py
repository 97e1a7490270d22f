"""Long-term memory beside compression (R-S6): what must survive a compaction or a new session.

Compression is lossy by design; facts a user wants kept (preferences, hard constraints, exact values) belong
in memory. A `MemoryProvider` is told before every compression (``on_pre_compress``) so it can rescue what
is about to be summarized away, and when a compaction moves the conversation to another session id
(``on_session_switch``). Its content enters the system prompt as a snapshot frozen at session start: writes
during the session — a rescue before a compaction included — land on disk but do not change the prompt, which
keeps the prompt cache valid across compactions. (The gateway takes the snapshot again when the session is
built anew, and when another process replaced its active set otherwise than by a compaction: an erasure may
have removed an entry.)

`FileMemoryProvider` keeps three files under a root directory, each with its own trust boundary:

- ``bots/<bot>/MEMORY.md`` — bot-wide, in the prompt of every chat on every platform, so only the bot's
  operators write it (``/remember``, or the tool in a turn whose sender is an operator).
- ``users/<platform>-<user>/USER.md`` — one user's facts, only in that user's own conversations (DMs and
  per-user group sessions), written only there.
- ``chats/<platform>-<chat>/CHAT.md`` — one group chat's notes, only in that chat.

Every entry is redacted (no secret is ever stored) and capped in size, and so is every file. An entry written
during a turn cites the message that turn answers (`Author.message`, `Author.ref`), in an HTML comment at the end
of its line that the model is never shown; `erase` drops entries by their citation or their text, so a deleted
message takes what was remembered from it along.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.compression.redact import redact_secrets
from agent.tokens import message_text
from agent.tools.memory_tool import MAX_ENTRY_CHARS, memory_tool
from agent.tools.registry import Tool

__all__ = [
    "DEFAULT_MAX_FILE_CHARS",
    "Author",
    "FileMemoryProvider",
    "MemoryEntry",
    "MemoryFull",
    "MemoryProvider",
    "Target",
    "system_prompt_with_memory",
]

Target = Literal["user", "chat", "bot"]

DEFAULT_MAX_FILE_CHARS = 20_000
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# "remember that X" / "please remember: X" at the start of a line of a user message.
# Each run of blanks before the fact is taken whole and the fact starts at a non-blank: the plain form's runs
# could share blanks in every split, 18 s for "remember" and 400 spaces before a long line (any user can send
# that). The one difference: a fact of fewer than 3 non-blank characters is no longer padded with blanks to 3.
_REMEMBER = re.compile(r"(?im)^[^\S\n]*+(?:please\s++)?remember(?:\s++that)?(?:\s*+[:,])?\s++(?=\S)(.{3,500}?)\s*$")
# An entry's citation: ``<!-- from discord:42 in inbound:discord:3000::10001 -->`` ends its line. Tried from a run of
# blanks' start only, the run taken whole: from every blank, each read the rest of the run, 1.5 s for a line of
# 32,000 blanks.
_CITE = re.compile(r"(?<![ \t])[ \t]*+<!-- from (\S*) in (\S*) -->[ \t]*$", re.MULTILINE)


class MemoryFull(Exception):
    """An entry is too long, or an append would grow a memory file past its size cap."""


@dataclass(frozen=True, slots=True)
class Author:
    """Who is talking to the agent this turn: ``operator`` may write the bot-wide memory."""

    user_id: str | None = None
    operator: bool = False
    # The message the turn answers (its key) and its sender (``platform:user id``): what entries written now cite.
    message: str | None = None
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """One entry of a memory file: its text and, when it has one, the message it cites and that message's author."""

    text: str
    message: str | None = None
    ref: str | None = None


class MemoryProvider:
    """Hooks the agent loop and gateway call. Every hook is optional: this base is the "no memory" provider."""

    async def start_session(self, session_id: str) -> None:
        """A session starts: take the snapshot the system prompt will carry for its whole life."""

    def system_prompt_block(self) -> str:
        """The frozen snapshot for the system prompt ('' when there is nothing to show)."""
        return ""

    async def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Called before every compression with the messages about to be compressed."""

    async def on_session_switch(self, old_session_id: str, new_session_id: str) -> None:
        """A compaction or /new moved the conversation from one session id to another."""

    def set_author(self, author: Author) -> None:
        """The sender of the turn about to run (the gateway calls this before each turn)."""

    async def append(self, target: Target, text: str) -> None:
        """Add one entry to a memory file; this provider has none (`LookupError`)."""
        raise LookupError("memory is turned off")

    def tools(self) -> list[Tool]:
        """Tools this memory offers the model."""
        return []

    async def erase(self, drop: Callable[[MemoryEntry], bool]) -> int:
        """Remove every entry ``drop`` picks from this conversation's memory files; how many (none here)."""
        return 0


def system_prompt_with_memory(base: str, memory: MemoryProvider | None) -> str:
    """A session's system prompt: ``base`` plus the memory snapshot frozen by ``memory.start_session``."""
    block = memory.system_prompt_block() if memory is not None else ""
    return f"{base}\n\n{block}" if block else base


def _safe_id(raw: str) -> str:
    """A file-system-safe directory name for a platform id (no traversal, no odd characters)."""
    if _SAFE_ID.match(raw) and raw not in (".", ".."):
        return raw
    return "id-" + hashlib.sha256(raw.encode()).hexdigest()[:24]


class FileMemoryProvider(MemoryProvider):
    """MEMORY.md per bot and USER.md per user under ``root``; appends only, each file capped in size."""

    def __init__(self, root: Path, bot_id: str, user_id: str | None = None, *, chat_id: str | None = None,
                 max_file_chars: int = DEFAULT_MAX_FILE_CHARS) -> None:
        self.root = Path(root)
        self.bot_file = self.root / "bots" / _safe_id(bot_id) / "MEMORY.md"
        self.user_file = self.root / "users" / _safe_id(user_id) / "USER.md" if user_id else None
        self.chat_file = self.root / "chats" / _safe_id(chat_id) / "CHAT.md" if chat_id else None
        self.max_file_chars = max_file_chars
        self.author = Author()
        self._snapshot = ""
        self._lock = asyncio.Lock()

    def _path(self, target: Target) -> Path:
        if target == "bot":
            return self.bot_file
        path = self.user_file if target == "user" else self.chat_file
        if path is None:
            raise LookupError(f"this conversation has no {target} memory")
        return path

    @property
    def scopes(self) -> list[Target]:
        """The scopes this conversation has, the default (narrowest) first."""
        present: list[Target] = [t for t, f in (("user", self.user_file), ("chat", self.chat_file)) if f]
        return [*present, "bot"]

    def set_author(self, author: Author) -> None:
        """The sender of the turn about to run; only an operator's turn may write the bot-wide memory."""
        self.author = author

    def may_write(self, target: Target) -> bool:
        """Whether this turn's sender may write ``target`` (the bot-wide memory: operators only)."""
        return target in self.scopes and (target != "bot" or self.author.operator)

    async def read(self, target: Target) -> str:
        """The current content of a memory file as the model may see it ('' when it does not exist yet): its
        entries without their citations."""
        return _CITE.sub("", await self._load(target))

    async def _load(self, target: Target) -> str:
        path = self._path(target)
        return await asyncio.to_thread(lambda: path.read_text("utf-8") if path.exists() else "")

    async def append(self, target: Target, text: str) -> None:
        """Add one entry (a ``- `` bullet line, secrets redacted) to a memory file, citing the message the turn
        answers; `MemoryFull` for an entry over `MAX_ENTRY_CHARS` or past the file's size cap. Trusted: callers
        check `may_write` first."""
        flat = " ".join(redact_secrets(text).split())
        if len(flat) > MAX_ENTRY_CHARS:
            raise MemoryFull(f"an entry holds at most {MAX_ENTRY_CHARS:,} characters ({len(flat):,} given)")
        cite = self.author
        # Ids have no spaces: one that did could not be read back, so it is not written.
        cited = cite.message and cite.ref and not any(c.isspace() for c in cite.message + cite.ref)
        entry = f"- {flat} <!-- from {cite.ref} in {cite.message} -->\n" if cited else f"- {flat}\n"
        path = self._path(target)
        async with self._lock:
            current = await self._load(target)
            if len(current) + len(entry) > self.max_file_chars:
                raise MemoryFull(f"{path.name} is full ({len(current):,} of {self.max_file_chars:,} characters)")
            await asyncio.to_thread(_append_text, path, entry)

    async def start_session(self, session_id: str) -> None:
        """Freeze the files into the snapshot the system prompt carries for this session (redacted again:
        a file may predate the redactor, or have been edited by hand)."""
        headings = {"bot": "## What you remember (MEMORY.md)", "chat": "## What this chat asked you to remember "
                    "(CHAT.md)", "user": "## What you know about this user (USER.md)"}
        blocks = []
        for target in ("bot", "chat", "user"):
            if target in self.scopes:
                content = redact_secrets((await self.read(target)).strip())  # type: ignore[arg-type]
                if content:
                    blocks.append(f"{headings[target]}\n{content}")
        self._snapshot = "\n\n".join(blocks)

    def system_prompt_block(self) -> str:
        """The snapshot taken by `start_session` ('' before it, or when both files are empty)."""
        return self._snapshot

    async def on_pre_compress(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Rescue explicit "remember that …" requests into USER.md before they are summarized away."""
        if self.user_file is None:
            return
        wanted = [m.group(1) for msg in messages if msg.get("role") == "user"
                  for m in _REMEMBER.finditer(message_text(msg))]
        if not wanted:
            return
        current = await self.read("user")
        for fact in dict.fromkeys(wanted):
            if " ".join(fact.split()) not in current:
                try:
                    await self.append("user", fact)
                except MemoryFull:
                    return
                current = await self.read("user")

    def tools(self) -> list[Tool]:
        """The ``memory`` tool bound to these files and to the trust rules of `may_write`."""
        return [memory_tool(self)]

    async def erase(self, drop: Callable[[MemoryEntry], bool]) -> int:
        """Remove every entry ``drop`` picks from this conversation's files (the bot's, the chat's, the user's);
        how many. Each file is rewritten whole, through a temporary file, so a crash leaves it old or new."""
        removed = 0
        async with self._lock:
            for target in self.scopes:
                path = self._path(target)
                kept, dropped = _without(await self._load(target), drop)
                if dropped:
                    await asyncio.to_thread(_replace_text, path, kept)
                    removed += dropped
        return removed


def _entry(line: str) -> MemoryEntry:
    """The entry a line of a memory file holds (its text without the bullet and the citation)."""
    cite = _CITE.search(line)
    text = (line[: cite.start()] if cite else line).strip()
    text = text[2:] if text.startswith("- ") else text
    return MemoryEntry(text, cite.group(2), cite.group(1)) if cite else MemoryEntry(text)


def _without(content: str, drop: Callable[[MemoryEntry], bool]) -> tuple[str, int]:
    """``content`` without the lines whose entry ``drop`` picks, and how many those were."""
    kept = [line for line in content.splitlines(keepends=True) if not (line.strip() and drop(_entry(line)))]
    return "".join(kept), len(content.splitlines()) - len(kept)


def _replace_text(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.erasing")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


def _append_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
