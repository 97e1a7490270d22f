"""Chat settings on both databases: set, replace, read, and take exactly once under concurrency."""

from __future__ import annotations

import asyncio

from gateway.store import Store


async def test_put_replaces_and_get_reads(store: Store) -> None:
    repo = store.chat_settings
    assert await repo.get("chat:discord:group:1", "persona") is None
    await repo.put("chat:discord:group:1", "persona", "a pirate")
    await repo.put("chat:discord:group:1", "persona", "a poet")
    await repo.put("chat:discord:group:2", "persona", "a judge")
    assert await repo.get("chat:discord:group:1", "persona") == "a poet"
    assert await repo.get("chat:discord:group:2", "persona") == "a judge"


async def test_take_hands_a_value_to_one_caller_only(store: Store) -> None:
    repo = store.chat_settings
    await repo.put("pairing", "ABCDEFGH", "telegram:7")
    taken = await asyncio.gather(*(repo.take("pairing", "ABCDEFGH") for _ in range(8)))
    assert taken.count("telegram:7") == 1 and taken.count(None) == 7
    assert await repo.get("pairing", "ABCDEFGH") is None
