"""What the context engine prepared for each stored message: kept with its row in a later append, read back for
the active set, carried into a compaction's copies — and never kept with, or left on, a row whose text changed."""

from __future__ import annotations

from sqlalchemy import select

from gateway.store import PreparedRecord, Store, payload_of
from gateway.store.erasure import Erasure, RowRewrite
from gateway.store.models import MessageRow
from tests.store.conftest import assistant, user


def kept(seq: int, message: dict[str, object], record: str) -> PreparedRecord:
    return PreparedRecord(seq, payload_of(message), record)


async def test_records_go_with_the_next_append_and_come_back_in_order(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    first = [user("a"), assistant("b"), user("c")]
    await store.messages.append(session.id, first, [3, 3, 3])
    assert await store.messages.prepared_of_active(session.id, 3) == [None, None, None]
    await store.messages.append(session.id, [assistant("d")], [3],
                                prepared=[kept(1, first[0], "r1"), kept(3, first[2], "r3")])
    assert await store.messages.prepared_of_active(session.id, 4) == ["r1", None, "r3", None]
    assert await store.messages.prepared_of_active(session.id, 2) == ["r1", None]  # up to the watermark read


async def test_a_record_made_from_another_text_is_not_kept(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(session.id, [user("the code is zephyr-7781")], [5])
    # Made from what the row held before an erasure rewrote it, or misaligned: the row does not hold it.
    await store.messages.append(session.id, [assistant("ok")], [1],
                                prepared=[kept(1, user("something else"), "stale"),
                                          kept(2, user("the code is zephyr-7781"), "wrong row")])
    assert await store.messages.prepared_of_active(session.id, 2) == [None, None]


async def test_an_erasure_takes_the_record_with_the_text(store: Store) -> None:
    session = await store.sessions.get_or_create_active("discord", "dm:c1")
    secret = user("the code is zephyr-7781")
    await store.messages.append(session.id, [secret, assistant("noted")], [5, 1])
    await store.messages.append(session.id, [user("next")], [1],
                                prepared=[kept(1, secret, "facts of zephyr-7781"), kept(2, assistant("noted"), "r2")])
    async with store.engine.connect() as conn:
        row_id = (await conn.execute(select(MessageRow.id).where(MessageRow.seq == 1))).scalar_one()
    await store.erasure.apply(Erasure(rows=[RowRewrite(row_id, user("[deleted]"), 2)]))
    async with store.engine.connect() as conn:
        left = {r.seq: r.prepared for r in await conn.execute(select(MessageRow.seq, MessageRow.prepared))}
    assert left[1] is None  # the rewritten row, archived by the replacement the erasure made
    assert "facts of zephyr-7781" not in left.values()
    active = await store.messages.load_active(session.id)
    assert await store.messages.prepared_of_active(session.id, active.watermark) == [None, "r2", None]


async def test_a_compaction_keeps_the_records_of_the_messages_it_keeps(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    old = [user("a"), assistant("b"), user("c"), assistant("d")]
    await store.messages.append(session.id, old, [3, 3, 3, 3])
    await store.messages.append(session.id, [user("e")], [3],
                                prepared=[kept(i + 1, m, f"r{i + 1}") for i, m in enumerate(old)])
    active = await store.messages.load_active(session.id)
    summary = user("[CONTEXT COMPACTION] the summary")
    await store.compactions.replace_active(session.id, [summary, old[2], old[3]], [9, 3, 3], active.watermark - 1)
    after = await store.messages.load_active(session.id)
    # The summary is new; the verbatim tail keeps its records; the row appended after the watermark is carried.
    assert await store.messages.prepared_of_active(session.id, after.watermark) == [None, "r3", "r4", None]
    child = await store.compactions.rotate(session.id, [summary, old[3]], [9, 3], after.watermark)
    assert await store.messages.prepared_of_active(child.id, child.message_count + 10**6) == [None, "r4"]
