"""Full-text search over active AND archived messages: English words, JSON fragments, Chinese terms."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.store import Store
from gateway.store.search import snippet, split_terms
from tests.store.conftest import assistant, user

CONFIG_CALL = {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "write_file", "arguments": '{"path": "deploy/config.yaml", "max_retries": 7, "port": 8443}'}}],
}
CONVERSATION: list[dict[str, Any]] = [
    user("Please configure the Redis lock expiry for the gateway workers."),
    assistant("The compression lock now expires after 60 seconds."),
    CONFIG_CALL,
    {"role": "tool", "tool_call_id": "c1", "content": "wrote 212 bytes"},
    user("我们需要压缩上下文窗口，并且保留数据库连接。"),
    assistant("好的，已经完成。"),
]


@pytest.fixture
async def archived_session(store: Store) -> str:
    """A session whose whole conversation was compacted away into one summary."""
    session = await store.sessions.get_or_create_active("tg", "search")
    await store.messages.append(session.id, CONVERSATION, [10] * len(CONVERSATION))
    active = await store.messages.load_active(session.id)
    await store.compactions.replace_active(session.id, [assistant("Summary: lock configured.")], [5],
                                           active.watermark)
    return session.id


@pytest.mark.parametrize(("query", "expected_seq"), [
    ("redis lock", 1),                       # English words
    ("EXPIRY", 1),                           # case-insensitive
    ("configur gatew", 1),                   # word prefixes
    ('"max_retries": 7', 3),                 # JSON fragment from tool-call arguments
    ("deploy/config.yaml", 3),               # path with punctuation
    ("write_file", 3),                       # tool name
    ("上下文", 5),                            # 3+ CJK characters: trigram index
    ("压缩", 5),                              # 2 CJK characters: LIKE fallback
    ("数据库 连接", 5),                        # several CJK terms
    ("完成", 6),
])
async def test_finds_terms_in_archived_rows(store: Store, archived_session: str, query: str,
                                            expected_seq: int) -> None:
    hits = await store.search(query)
    assert [(h.session_id, h.seq) for h in hits] == [(archived_session, expected_seq)]
    assert hits[0].archived is True
    assert hits[0].role == CONVERSATION[expected_seq - 1]["role"]


async def test_indexes_message_text_not_the_json_envelope(store: Store, archived_session: str) -> None:
    assert await store.search("tool_calls") == []
    assert await store.search("content") == []
    assert await store.search("nothing-like-this") == []


async def test_active_rows_and_session_filter(store: Store, archived_session: str) -> None:
    other = await store.sessions.get_or_create_active("tg", "other")
    await store.messages.append(other.id, [user("the redis lock is fine here")], [5])
    hits = await store.search("redis lock")
    assert {(h.session_id, h.archived) for h in hits} == {(archived_session, True), (other.id, False)}
    only = await store.search("redis lock", session_id=other.id)
    assert [(h.session_id, h.seq, h.archived) for h in only] == [(other.id, 1, False)]
    assert len(await store.search("lock", limit=1)) == 1
    assert await store.search("   ") == []
    summary_hits = await store.search("Summary configured")
    assert [(h.archived, h.seq) for h in summary_hits] == [(False, 8)]


async def test_like_fallback_escapes_wildcards(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(session.id, [user("100% done"), user("1000 items"), user("a_b")], [1, 1, 1])
    assert [h.seq for h in await store.search("0%")] == [1]
    assert [h.seq for h in await store.search("_b")] == [3]


def test_snippet_centres_on_the_match() -> None:
    body = "x" * 200 + " needle " + "y" * 200
    text = snippet(body, ["NEEDLE"])
    assert "needle" in text and text.startswith("…") and text.endswith("…")
    assert len(text) < 150
    assert snippet("short\nline", ["zzz"]) == "short line"


def test_terms_split_on_whitespace_once_each() -> None:
    assert split_terms("  a  b a\tc ") == ["a", "b", "c"]
