"""Full-text search over active AND archived messages: English words, JSON fragments, Chinese terms."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.store import SearchHit, Store
from gateway.store.search import ANY_WORD
from gateway.store.search_terms import split_terms
from gateway.store.snippets import WHOLE_LINES_CHARS, cut_snippet
from tests.store.conftest import assistant, user

CONFIG_CALL = {
    "role": "assistant", "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "write_file", "arguments": '{"path": "deploy/config.yaml", "max_retries": 7, "port": 8443, '
                                           '"note": "say \\"hi\\"\\nthen go"}'}}],
}
CONVERSATION: list[dict[str, Any]] = [
    user("Please configure the Redis lock expiry for the gateway workers."),
    assistant("The compression lock now expires after 60 seconds."),
    CONFIG_CALL,
    {"role": "tool", "tool_call_id": "c1", "content": "wrote 212 bytes"},
    user("我们需要压缩上下文窗口，并且保留数据库连接。"),
    assistant("好的，已经完成。"),
]


def firm(hits: list[SearchHit]) -> list[SearchHit]:
    """The hits that matched the query whole (every word, or the exact text), not by some of its words."""
    return [h for h in hits if h.match != ANY_WORD]


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
    ("max_retries: 7", 3),                   # a tool-call argument, as "key: value" (not JSON-escaped)
    ("deploy/config.yaml", 3),               # path with punctuation
    ("write_file", 3),                       # tool name
    ('say "hi"', 3),                         # argument values unescaped: quotes as typed
    ("上下文", 5),                            # 3+ CJK characters: trigram index
    ("压缩", 5),                              # 2 CJK characters: LIKE fallback
    ("数据库 连接", 5),                        # several CJK terms
    ("完成", 6),
])
async def test_finds_terms_in_archived_rows(store: Store, archived_session: str, query: str,
                                            expected_seq: int) -> None:
    hits = await store.search(query)
    assert [(h.session_id, h.seq) for h in firm(hits)] == [(archived_session, expected_seq)]
    assert hits[0].seq == expected_seq  # a whole match comes before any partial one
    assert hits[0].archived is True
    assert hits[0].role == CONVERSATION[expected_seq - 1]["role"]


async def test_indexes_message_text_not_the_json_envelope(store: Store, archived_session: str) -> None:
    assert firm(await store.search("tool_calls")) == []
    assert await store.search("content") == []
    assert await store.search("nothing-like-this") == []


async def test_active_rows_and_session_filter(store: Store, archived_session: str) -> None:
    other = await store.sessions.get_or_create_active("tg", "other")
    await store.messages.append(other.id, [user("the redis lock is fine here")], [5])
    hits = await store.search("redis lock")
    assert {(h.session_id, h.archived) for h in firm(hits)} == {(archived_session, True), (other.id, False)}
    only = await store.search("redis lock", session_id=other.id)
    assert [(h.session_id, h.seq, h.archived) for h in only] == [(other.id, 1, False)]
    assert len(await store.search("lock", limit=1)) == 1
    assert await store.search("   ") == []
    summary_hits = await store.search("Summary configured")
    assert [(h.archived, h.seq) for h in firm(summary_hits)] == [(False, 8)]


async def test_like_fallback_escapes_wildcards(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    await store.messages.append(session.id, [user("100% done"), user("1000 items"), user("a_b")], [1, 1, 1])
    assert [h.seq for h in await store.search("0%")] == [1]
    assert [h.seq for h in await store.search("_b")] == [3]


async def test_exact_text_is_literal_and_ignores_case(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "c")
    texts = ["see Ärger/Datei.TXT (a+b)*[c]", "see ärger/datei.txt only", "a.b", "axb"]
    await store.messages.append(session.id, [user(t) for t in texts], [1] * len(texts))
    assert sorted(h.seq for h in firm(await store.search("ärger/DATEI.txt"))) == [1, 2]
    assert [h.seq for h in firm(await store.search("(a+b)*[c]"))] == [1]  # regex syntax is text
    assert [h.seq for h in firm(await store.search("a.b"))] == [3]


def test_snippet_centres_on_the_match_of_a_long_line() -> None:
    body = "x" * 2_000 + " needle " + "y" * 2_000
    cut = cut_snippet(body, ["NEEDLE"])
    assert "needle" in cut.text and cut.text.startswith("…") and cut.text.endswith("…")
    assert len(cut.text) <= WHOLE_LINES_CHARS + 2
    assert cut.more_at is not None and body[cut.more_at - 10 : cut.more_at] in cut.text  # where the line goes on
    assert cut_snippet("short\nline", ["zzz"]).text == "short line"  # no term as typed: the beginning


def test_terms_split_on_whitespace_once_each() -> None:
    assert split_terms("  a  b a\tc ") == ["a", "b", "c"]


async def test_session_ids_filter_and_skipping_what_the_model_sees(store: Store, archived_session: str) -> None:
    child = await store.sessions.get_or_create_active("tg", "child")
    await store.messages.append(child.id, [user("redis lock again"), user("old redis lock note")], [5, 5])
    active = await store.messages.load_active(child.id)
    await store.compactions.replace_active(child.id, [user("redis lock summary")], [5], active.watermark)
    stranger = await store.sessions.get_or_create_active("tg", "stranger")
    await store.messages.append(stranger.id, [user("the redis lock of someone else")], [5])
    both = [archived_session, child.id]
    hits = await store.search("redis lock", session_ids=both, skip_active_of=child.id)
    assert {(h.session_id, h.seq, h.archived) for h in firm(hits)} == {
        (archived_session, 1, True), (child.id, 1, True), (child.id, 2, True)}
    assert all(h.session_id in both and not (h.session_id == child.id and not h.archived) for h in hits)
    kept = await store.search("redis lock", session_ids=[child.id])
    assert {(h.seq, h.archived) for h in kept} == {(1, True), (2, True), (4, False)}
    assert await store.search("redis lock", session_ids=[]) == []


async def test_substring_search_within_sessions(store: Store, archived_session: str) -> None:
    other = await store.sessions.get_or_create_active("tg", "other")
    await store.messages.append(other.id, [user("deploy/config.yaml is mine")], [5])
    current = await store.sessions.get_or_create_active("tg", "current")
    await store.messages.append(current.id, [user("deploy/config.yaml, 上下文 too")], [5])
    scope = [archived_session, current.id]
    for query in ("deploy/config.yaml", "上下文"):
        hits = await store.search(query, session_ids=scope, skip_active_of=current.id)
        assert [(h.session_id, h.archived) for h in firm(hits)] == [(archived_session, True)]
        assert current.id not in {h.session_id for h in hits}
        everything = await store.search(query, session_ids=scope)
        assert {h.session_id for h in firm(everything)} == {archived_session, current.id}


async def test_redact_runs_before_the_snippet_is_cut(store: Store) -> None:
    session = await store.sessions.get_or_create_active("tg", "secret")
    secret = "sk-proj-" + "A1b2C3d4" * 6
    await store.messages.append(session.id, [user(f"deploy note: the key {secret} belongs to staging " + "x " * 80)],
                                [5])
    [raw] = await store.search("staging")
    [clean] = await store.search("staging", redact=lambda body: body.replace(secret, "[REDACTED]"))
    assert "A1b2C3d4" in raw.snippet  # the unredacted snippet shows part of the key
    assert "A1b2C3d4" not in clean.snippet and "[REDACTED]" in clean.snippet


async def test_copies_of_what_the_model_sees_are_skipped(store: Store) -> None:
    parent = await store.sessions.get_or_create_active("tg", "copies")
    rows = [user("alpha kept"), user("alpha middle"), user("alpha tail")]
    await store.messages.append(parent.id, rows, [5, 5, 5])
    active = await store.messages.load_active(parent.id)
    # In place: the new active set keeps the tail verbatim; its original row is archived.
    await store.compactions.replace_active(parent.id, [assistant("summary"), rows[2]], [5, 5], active.watermark)
    hits = await store.search("alpha", session_ids=[parent.id], skip_active_of=parent.id)
    assert sorted(h.seq for h in hits) == [1, 2]
    # Rotation: the child holds a copy of the parent's tail.
    child = await store.compactions.rotate(parent.id, [assistant("summary 2"), rows[1]], [5, 5])
    hits = await store.search("alpha", session_ids=[child.id, parent.id], skip_active_of=child.id)
    assert sorted((h.session_id == parent.id, h.seq, h.archived) for h in hits) == [
        (True, 1, True), (True, 3, True), (True, 6, False)]
