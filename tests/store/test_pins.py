"""Pins per chat and message lookup by number, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from gateway.store import Handled, Handling, PinsFull, Store
from tests.store.conftest import assistant, user


async def test_pins_are_per_chat_numbered_and_capped(store: Store) -> None:
    add = store.pins.add
    first = await add("tg", "dm:1", "Answer in French.", 5, max_count=2, max_tokens=20, by="tg:1")
    assert (first.number, first.text, first.tokens, first.created_by) == (1, "Answer in French.", 5, "tg:1")
    await add("tg", "dm:1", "Be brief.", 3, max_count=2, max_tokens=20)
    await add("tg", "dm:2", "Other chat.", 3, max_count=2, max_tokens=20)
    with pytest.raises(PinsFull, match="already has 2 of 2 pins"):
        await add("tg", "dm:1", "Third.", 1, max_count=2, max_tokens=20)
    with pytest.raises(PinsFull, match="pins would take 21 tokens, over the limit of 20"):
        await add("tg", "dm:2", "Long.", 18, max_count=5, max_tokens=20)
    assert [(p.number, p.text) for p in await store.pins.list("tg", "dm:1")] == [(1, "Answer in French."),
                                                                                 (2, "Be brief.")]
    removed = await store.pins.remove("tg", "dm:1", 1)
    assert removed is not None and removed.text == "Answer in French."
    assert await store.pins.remove("tg", "dm:1", 5) is None and await store.pins.remove("tg", "dm:1", 0) is None
    assert [(p.number, p.text) for p in await store.pins.list("tg", "dm:1")] == [(1, "Be brief.")]
    assert await store.pins.clear("tg", "dm:1") == 1
    assert await store.pins.list("tg", "dm:1") == []
    assert [p.text for p in await store.pins.list("tg", "dm:2")] == ["Other chat."]


async def test_around_reads_one_message_and_its_neighbours_within_the_given_sessions(store: Store) -> None:
    mine = await store.sessions.get_or_create_active("tg", "mine")
    other = await store.sessions.get_or_create_active("tg", "other")
    await store.messages.append(mine.id, [user(f"m{i}") for i in range(1, 7)], [1] * 6)
    await store.messages.append(other.id, [user(f"o{i}") for i in range(1, 7)], [1] * 6)
    active = await store.messages.load_active(mine.id)
    await store.compactions.replace_active(mine.id, [assistant("summary")], [1], active.watermark)
    rows = await store.messages.around([mine.id], 3, before=1, after=2)
    assert [(r.seq, r.message["content"], r.active) for r in rows] == [
        (2, "m2", False), (3, "m3", False), (4, "m4", False), (5, "m5", False)]
    # After the archived rows come the next generation's rows (sequence 7 is the burned marker).
    assert [r.seq for r in await store.messages.around([mine.id], 6, after=5)] == [6, 8]
    assert await store.messages.around([other.id], 99) == []
    assert await store.messages.around([], 3) == []
    # Never another session's row: "o3" is not in scope, and with both, the first listed wins.
    assert [r.message["content"] for r in await store.messages.around([mine.id], 3)] == ["m3"]
    assert [r.message["content"] for r in await store.messages.around([other.id, mine.id], 3)] == ["o3"]


async def test_rotation_numbers_the_child_on_from_the_parent(store: Store) -> None:
    parent = await store.sessions.get_or_create_active("tg", "chain")
    await store.messages.append(parent.id, [user("a"), user("b")], [1, 1])
    child = await store.compactions.rotate(parent.id, [assistant("S")], [1])
    assert [r.seq for r in await store.messages.export(child.id)] == [4]
    assert await store.messages.append(child.id, [user("c")], [1]) == 5


async def test_the_chat_snapshot_reads_session_pins_and_handled_mark_together(store: Store) -> None:
    empty = await store.chat_snapshot("discord", "dm:snap", message_key="inbound:discord:dm:snap::1")
    assert (empty.session, empty.pins, empty.message) == (None, (), Handling())
    record = await store.sessions.get_or_create_active("discord", "dm:snap")
    await store.pins.add("discord", "dm:snap", "answer in UTC", 4, max_count=10, max_tokens=100)
    await store.inbox.mark_handled(Handled(key="inbound:discord:dm:snap::1", platform="discord",
                                           session_key="discord:dm:snap"))
    snapshot = await store.chat_snapshot("discord", "dm:snap", message_key="inbound:discord:dm:snap::1")
    assert snapshot.session is not None and snapshot.session.id == record.id
    assert [p.text for p in snapshot.pins] == ["answer in UTC"] and snapshot.message.handled
    other = await store.chat_snapshot("discord", "dm:snap", message_key="inbound:discord:dm:snap::2")
    assert not other.message.handled
    assert not (await store.chat_snapshot("discord", "dm:snap")).message.handled
