"""Helpers for the multi-process store tests: forked children, a deterministic compactor, invariant checks.

Children are forked (not spawned) so each starts in milliseconds with everything imported; they build their
own engine and never touch the parent's connections, and they end with ``os._exit`` or SIGKILL.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gateway.store import Store

Message = dict[str, Any]
TAIL = 2


def compress(messages: list[Message]) -> list[Message]:
    """A deterministic stand-in for the compressor: one summary naming the middle, plus a verbatim tail."""
    middle = messages[:-TAIL]
    digest = hashlib.sha1(json.dumps(middle, sort_keys=True).encode()).hexdigest()[:16]
    return [{"role": "assistant", "content": f"summary:{len(middle)}:{digest}"}, *messages[-TAIL:]]


def original(n: int) -> Message:
    """The n-th original message a child appends."""
    return {"role": "user", "content": f"orig-{n}"}


def original_number(message: Message) -> int | None:
    """n for ``original(n)``, else None."""
    content = message.get("content")
    if isinstance(content, str) and content.startswith("orig-"):
        return int(content[5:])
    return None


def fork_child(body: Callable[[int], Coroutine[Any, Any, None]]) -> tuple[int, int]:
    """Fork a child running ``asyncio.run(body(write_fd))``; return (pid, read_fd of its pipe)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        code = 0
        try:
            asyncio.run(body(write_fd))
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def read_all(fd: int) -> bytes:
    """Everything the child wrote before it died; closes ``fd``."""
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


def kill_and_reap(pid: int) -> None:
    """SIGKILL the child (if still alive) and wait for it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


async def compaction_loop(url: str, session_id: str, next_original: int, out: int) -> None:
    """Append originals and compact, forever; report b"c" before and b"d" after each compaction call."""
    store = await Store.open(url, migrate=False)
    await store.sessions.require(session_id)  # connect first, so the kill window covers real work
    os.write(out, b"r")
    n = next_original
    while True:
        await store.messages.append(session_id, [original(n), original(n + 1)], [5, 5])
        n += 2
        active = await store.messages.load_active(session_id)
        if len(active.messages) >= 6:
            new = compress(active.messages)
            os.write(out, b"c")
            await store.compactions.replace_active(session_id, new, [3, *active.token_counts[-TAIL:]],
                                                   active.watermark)
            os.write(out, b"d")


@dataclass(slots=True)
class Verdict:
    """What the invariant check learned."""

    highest_original: int
    compactions: int


async def verify(store: Store, session_id: str, known_highest: int) -> Verdict:
    """Assert the invariants after a crash; return what the next round builds on.

    * the active set is exactly ``compress(rows archived by the last compaction)`` followed only by originals
      appended after it — the old set or the new one, never a mix;
    * every original ever committed is still stored (active or archived), numbered without gaps;
    * the session's counters match its active rows.
    """
    rows = await store.messages.export(session_id, include_archived=True)
    session = await store.sessions.require(session_id)
    active = [r for r in rows if r.active]
    assert session.message_count == len(active)
    assert session.token_count == sum(r.tokens for r in active)
    if session.compactions == 0:
        assert all(r.active for r in rows)
        prefix: list[Message] = []
    else:
        replaced = [r.message for r in rows if r.archived_by == session.compactions]
        prefix = compress(replaced)
        assert [r.message for r in active[:len(prefix)]] == prefix
    appended = [original_number(r.message) for r in active[len(prefix):]]
    assert all(n is not None for n in appended)
    assert appended == sorted(appended)  # type: ignore[type-var]
    numbers = sorted({n for r in rows if (n := original_number(r.message)) is not None})
    assert numbers == list(range(len(numbers)))
    highest = numbers[-1] if numbers else -1
    assert highest >= known_highest
    return Verdict(highest_original=highest, compactions=session.compactions)
