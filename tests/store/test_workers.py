"""Two worker processes compress the same session at once: the Redis compression lock lets exactly one do
it (the other skips), and even without a lock the store refuses the second, stale compaction."""

from __future__ import annotations

import asyncio
import os
import uuid

from gateway.intake.locks import RedisLocks
from gateway.store import StaleWatermark, Store
from tests.store.conftest import user
from tests.store.crashkit import compress, fork_child, kill_and_reap, read_all


async def _setup(url: str) -> str:
    async with await Store.open(url, migrate=False) as store:
        session = await store.sessions.get_or_create_active("tg", "workers")
        await store.messages.append(session.id, [user(f"m{i}") for i in range(12)], [10] * 12)
        return session.id


async def _worker(url: str, redis_url: str | None, prefix: str, session_id: str, go: int, out: int) -> None:
    store = await Store.open(url, migrate=False)
    locks = RedisLocks.from_url(redis_url, prefix=prefix) if redis_url else None
    active = await store.messages.load_active(session_id)
    os.write(out, b"r")
    os.read(go, 1)  # both workers leave this line together

    async def compact() -> bytes:
        await asyncio.sleep(0.3)  # the summary call
        try:
            await store.compactions.replace_active(session_id, compress(active.messages),
                                                   [3, *active.token_counts[-2:]], active.watermark)
        except StaleWatermark:
            return b"stale"
        return b"compacted"

    if locks is None:
        os.write(out, await compact())
        return
    async with locks.try_compression_lock(session_id) as acquired:
        os.write(out, await compact() if acquired else b"skipped")
    await locks.aclose()


def _race(url: str, redis_url: str | None) -> list[bytes]:
    session_id = asyncio.run(_setup(url))
    prefix = f"concord-test:{uuid.uuid4().hex}:"
    go_read, go_write = os.pipe()
    children = [fork_child(lambda out: _worker(url, redis_url, prefix, session_id, go_read, out))
                for _ in range(2)]
    for _, fd in children:
        assert os.read(fd, 1) == b"r"
    os.write(go_write, b"gg")
    outcomes = sorted(read_all(fd) for _, fd in children)
    for pid, _ in children:
        kill_and_reap(pid)
    os.close(go_read)
    os.close(go_write)
    return outcomes


async def _history(url: str) -> tuple[int, list[str]]:
    async with await Store.open(url, migrate=False) as store:
        session = await store.sessions.get_active("tg", "workers")
        assert session is not None
        active = await store.messages.load_active(session.id)
        return session.compactions, [str(m["content"]) for m in active.messages]


def test_two_processes_with_the_redis_lock_compact_once(store_url: str, redis_url: str) -> None:
    assert _race(store_url, redis_url) == [b"compacted", b"skipped"]
    compactions, contents = asyncio.run(_history(store_url))
    assert compactions == 1
    assert contents[1:] == ["m10", "m11"]


def test_without_a_lock_the_store_still_refuses_the_second(store_url: str) -> None:
    assert _race(store_url, None) == [b"compacted", b"stale"]
    compactions, _ = asyncio.run(_history(store_url))
    assert compactions == 1
