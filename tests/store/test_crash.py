"""R-S2 under SIGKILL: a child compacts in a loop and is killed at random moments; after every kill the
active set is the old one or the new one and no message is lost — on SQLite (file) and PostgreSQL.

``CONCORD_CRASH_KILLS`` sets the kills per database (default 100, i.e. 200 for the two databases).
"""

from __future__ import annotations

import asyncio
import os
import random
import time

from gateway.store import Store
from tests.store.crashkit import compaction_loop, fork_child, kill_and_reap, read_all, verify

KILLS = int(os.environ.get("CONCORD_CRASH_KILLS", "100"))
MAX_DELAY_S = 0.02


async def _setup(url: str) -> str:
    async with await Store.open(url, migrate=False) as store:
        return (await store.sessions.get_or_create_active("tg", "crash")).id


async def _check(url: str, session_id: str, known: int) -> tuple[int, int]:
    async with await Store.open(url, migrate=False) as store:
        verdict = await verify(store, session_id, known)
    return verdict.highest_original, verdict.compactions


def _await_compactions(fd: int, count: int) -> bytes:
    """Block until the child announced ``count`` compaction starts; return what it wrote meanwhile."""
    seen = b""
    while seen.count(b"c") < count:
        chunk = os.read(fd, 1)
        assert chunk, "the child died on its own"
        seen += chunk
    return seen


def test_sigkill_during_compactions_never_mixes_or_loses(store_url: str) -> None:
    session_id = asyncio.run(_setup(store_url))
    rng = random.Random(0xC0C0)
    highest, mid_compaction, finished_one = -1, 0, 0
    for _ in range(KILLS):
        pid, fd = fork_child(lambda out, n=highest + 1: compaction_loop(store_url, session_id, n, out))
        assert os.read(fd, 1) == b"r"
        # Kill at a random moment shortly after 0, 1 or 2 compaction starts, so most kills land near or
        # inside a compaction transaction whatever the machine's speed.
        starts = rng.randrange(3)
        seen = _await_compactions(fd, starts)
        time.sleep(rng.uniform(0, MAX_DELAY_S))
        kill_and_reap(pid)
        trace = seen + read_all(fd)
        mid_compaction += trace.rfind(b"c") > trace.rfind(b"d")
        finished_one += starts == 2  # the first compaction finished before the second started
        highest, compactions = asyncio.run(_check(store_url, session_id, highest))
    assert compactions >= finished_one
    assert mid_compaction > 0, "no kill landed inside a compaction"
