"""The store's side of erasures, on SQLite and PostgreSQL: rows found by the message they hold (copies
included), rewritten in place with the open session's active set replaced, kept inbox payloads emptied, and
SQLite's full-text pages rewritten by the sweep when an erasure marked it due."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text

from gateway.store import InboxEntry, NewAnswer, Store
from gateway.store.erasure import FTS_SECURE_DELETE, Erasure, QuotingAnswer, RowRewrite
from tests.store.conftest import assistant, user

KEY = "inbound:discord:c1::17"


def planted(content: str, key: str = KEY, author: str = "discord:42") -> dict[str, Any]:
    return {"role": "user", "content": content, "origin": {"message": key, "author": author, "name": "Ann",
                                                           "at": "2025-01-01T00:00:00+00:00", "span": [0, len(content)]}}


async def test_rows_are_found_by_message_and_author_copies_included(store: Store) -> None:
    session = await store.sessions.get_or_create_active("discord", "dm:c1")
    await store.messages.append(session.id, [user("hi"), planted("the code is zephyr-7781"), assistant("ok"),
                                             planted("bob's", key="inbound:discord:c1::18", author="discord:43")],
                                [1, 5, 1, 2])
    active = await store.messages.load_active(session.id)
    await store.compactions.replace_active(session.id, active.messages[1:], active.token_counts[1:],
                                           active.watermark)  # copies keep the origin
    assert await store.erasure.locate(KEY) == "discord:dm:c1"
    assert await store.erasure.locate("inbound:discord:c1::99") is None
    assert await store.messages.number_of(KEY) == 2  # the first row holding it, not its copy
    ids = [s.id for s in await store.erasure.sessions("discord", "dm:c1")]
    by_key = await store.erasure.rows_of(ids, origins=[KEY])
    assert [(r.seq, r.active) for r in by_key] == [(2, False), (6, True)]
    assert len(await store.erasure.rows_of(ids, author="discord:43")) == 2
    quoting = await store.erasure.quoting(ids, ["ZEPHYR-7781"])  # a superset where LIKE ignores case
    assert {r.seq for r in quoting} <= {2, 6} and {r.seq for r in await store.erasure.quoting(ids, ["zephyr-7781"])} == {2, 6}


async def test_apply_rewrites_rows_replaces_the_open_set_and_empties_kept_payloads(store: Store) -> None:
    session = await store.sessions.get_or_create_active("discord", "dm:c1")
    await store.messages.append(session.id, [planted("the code is zephyr-7781"), assistant("zephyr-7781 noted")],
                                [5, 3])
    at = datetime.now(UTC)
    await store.inbox.keep([InboxEntry(KEY, "discord", "discord:dm:c1", json.dumps({"text": "zephyr-7781"}), at),
                            InboxEntry(f"{KEY}:delete", "discord", "discord:dm:c1", "{}", at),
                            InboxEntry("inbound:discord:c1::170", "discord", "discord:dm:c1", "{}", at)], "w#1")
    answer = await store.deliveries.record(NewAnswer("discord", "c1", None, "17", "zephyr-7781 noted", session.id,
                                                     "w"))
    ids = [s.id for s in await store.erasure.sessions("discord", "dm:c1")]
    rows = await store.erasure.rows_of(ids, origins=[KEY])
    tomb = {"role": "user", "content": "[Ann deleted the message]"}
    replaced = await store.erasure.apply(Erasure(rows=[RowRewrite(rows[0].id, tomb, 4)], inbox_keys=[KEY],
                                                 answers=[QuotingAnswer(answer, "[deleted] noted")]))
    assert replaced == [session.id]
    record = await store.sessions.require(session.id)
    assert (record.compactions, record.message_count, record.token_count) == (1, 2, 7)
    assert (await store.compactions.history(session.id))[-1].reason == "erasure"
    assert record.engine.last_compaction is None  # an erasure is no compaction (/status)
    assert (await store.messages.load_active(session.id)).messages[0] == tomb
    assert await store.search("zephyr") != []  # the answer still quotes it: the caller cuts quotes out
    kept = {k: await store.inbox.get(k) for k in (KEY, f"{KEY}:delete", "inbound:discord:c1::170")}
    assert kept[KEY].payload is None and kept[KEY].handled_at is not None  # type: ignore[union-attr]
    assert kept[f"{KEY}:delete"].payload is None  # type: ignore[union-attr]
    assert kept["inbound:discord:c1::170"].payload == "{}"  # another message whose key merely starts alike
    assert (await store.deliveries.get(answer)).text == "[deleted] noted"  # type: ignore[union-attr]


async def test_sqlite_full_text_pages_lose_the_words_at_the_sweep(store: Store) -> None:
    session = await store.sessions.get_or_create_active("discord", "dm:c1")
    await store.messages.append(session.id, [planted("the code is zephyrword7781"), assistant("ok")], [5, 1])
    if store.dialect == "sqlite":
        # A long-lived index: its segments merged into one large one, which FTS5's automatic merges of the small
        # new segments an erasure writes do not reach.
        async with store.engine.begin() as conn:
            await conn.execute(text("INSERT INTO messages_fts(messages_fts) VALUES('optimize')"))
    rows = await store.erasure.rows_of([session.id], origins=[KEY])
    await store.erasure.apply(Erasure(rows=[RowRewrite(rows[0].id, {"role": "user", "content": "[gone]"}, 2)]))
    assert await store.search("zephyrword7781") == []

    async def pages_holding() -> int:
        async with store.engine.connect() as conn:
            return sum(1 for (block,) in await conn.execute(text("SELECT block FROM messages_fts_data"))
                       if isinstance(block, bytes) and b"zephyrword7781" in block)

    if store.dialect != "sqlite":
        assert await store.erasure.purge_if_due() is False
        return
    if not FTS_SECURE_DELETE:
        assert await pages_holding() > 0  # FTS5 keeps a replaced row's words until its pages are rewritten
    assert await store.erasure.purge_if_due() is not FTS_SECURE_DELETE
    assert await pages_holding() == 0
    assert await store.erasure.purge_if_due() is False  # done: nothing due any more
