"""The spool: received messages the database could not take, kept in a local file until it can.

Discord never sends a message twice, so one the inbox cannot take (the database is down or too slow) needs a
durable home of its own before it is handed on. Each worker process appends such messages to its own file,
``<storage.data_dir>/spool/<worker>.jsonl`` — one line per message (the inbox's JSON), fsync'd before the append
returns —
and holds an exclusive ``flock`` on it for as long as it lives. `drain` moves what a spool holds into the
inbox (one transaction; a message stored there already is left as it is) and only then empties the file: this
worker's own spool, and every spool whose worker is gone (its lock is free), at start-up and each time the
inbox's recovery runs. A worker killed mid-outage therefore leaves its messages on disk, and its restart — or
any worker sharing the data directory — hands them to the inbox, whose recovery answers them.

A file is created under a temporary name, locked, then renamed into place, so no other worker ever sees an
unlocked spool of a live worker. A line cut short by a crash mid-append (no newline yet) is skipped: it was
never handed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO

__all__ = ["Spool"]

log = logging.getLogger(__name__)

SUFFIX = ".jsonl"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(file: IO[bytes], name: str) -> list[str]:
    file.seek(0)
    *lines, torn = file.read().split(b"\n")
    if torn:
        log.warning("spool %s: its last line was cut short by a crash while it was written; skipped", name)
    return [line.decode() for line in lines]


class Spool:
    """This worker's spool file and the drain of every spool in the directory."""

    def __init__(self, directory: Path, worker: str) -> None:
        self.directory = directory
        self.path = directory / f"{worker.replace('/', '_')}{SUFFIX}"
        self._file: IO[bytes] | None = None  # open (and locked) once something was spooled
        self._lock = asyncio.Lock()
        self.pending = 0  # messages in this worker's spool not moved to the inbox yet

    async def append(self, batch: Sequence[str]) -> None:
        """Keep ``batch`` (one line each, no newline in any) on disk, fsync'd, until `drain` moves it."""
        data = b"".join(line.encode() + b"\n" for line in batch)
        async with self._lock:
            await asyncio.to_thread(self._append, data)
            self.pending += len(batch)

    def _append(self, data: bytes) -> None:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(".new")
            file = temporary.open("a+b")
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
            temporary.rename(self.path)
            _fsync_dir(self.directory)
            self._file = file
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())

    async def drain(self, keep: Callable[[list[str], bool], Awaitable[None]]) -> int:
        """Move every spooled line into the inbox with ``keep(lines, ours)`` — ``ours``: from this worker's own
        spool, whose messages it may still be handling — then empty the spools; how many were moved. A ``keep``
        that fails leaves them spooled for the next drain."""
        moved = 0
        async with self._lock:
            if self._file is not None and self.pending:
                messages = await asyncio.to_thread(_read, self._file, self.path.name)
                if messages:
                    await keep(messages, True)
                await asyncio.to_thread(self._empty, self._file)
                moved += len(messages)
                self.pending = 0
        for path in sorted(self.directory.glob(f"*{SUFFIX}")) if self.directory.is_dir() else ():
            if path != self.path:
                moved += await self._drain_orphan(path, keep)
        return moved

    @staticmethod
    def _empty(file: IO[bytes]) -> None:
        file.truncate(0)
        file.seek(0)
        os.fsync(file.fileno())

    @classmethod
    def _remove(cls, file: IO[bytes], path: Path) -> None:
        cls._empty(file)  # emptied first: a drainer that opened it meanwhile finds nothing to move twice
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    async def _drain_orphan(self, path: Path, keep: Callable[[list[str], bool], Awaitable[None]]) -> int:
        """Drain the spool of a worker that is gone (its lock is free); 0 when it lives (or drains elsewhere)."""
        try:
            file = path.open("r+b")
        except FileNotFoundError:
            return 0
        with file:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0  # its worker lives, or another worker drains it right now
            messages = await asyncio.to_thread(_read, file, path.name)
            if messages:
                log.warning("spool %s: %d message(s) a stopped worker could not put in the inbox; moving them there",
                            path.name, len(messages))
                await keep(messages, False)
            await asyncio.to_thread(self._remove, file, path)
        return len(messages)

    def close(self) -> None:
        """Release this worker's spool (its lock); what it still holds is drained by the next worker."""
        if self._file is not None:
            self._file.close()
            self._file = None
