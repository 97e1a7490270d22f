"""Relevance ranking: BM25 on both backends, all words first, any-word matching when that finds
too little (stop words left out), answers to matching questions, whole lines in snippets, re-ranking."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from gateway.conversation.rerank import meaning_rerank
from gateway.store import Store, message_text
from gateway.store.search import ALL_WORDS, ANY_WORD, BY_MEANING, EXACT_TEXT
from gateway.store.snippets import WHOLE_LINES_CHARS
from tests.store.conftest import assistant, user

STATUS = "status update: the build is green again"


async def archived(store: Store, messages: list[dict[str, Any]], chat: str = "rank") -> str:
    """A session holding ``messages`` (numbered from 1), every one of them compacted out of view; on
    PostgreSQL the word statistics are gathered, as autovacuum does in a live store."""
    session = await store.sessions.get_or_create_active("tg", chat)
    await store.messages.append(session.id, messages, [5] * len(messages))
    active = await store.messages.load_active(session.id)
    await store.compactions.replace_active(session.id, [assistant("Summary.")], [5], active.watermark)
    if store.dialect == "postgresql":
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE messages")
    return session.id


async def search(store: Store, session_id: str, query: str, limit: int = 8, **kwargs: Any) -> list[Any]:
    return await store.search(query, session_ids=[session_id], skip_active_of=session_id, limit=limit, **kwargs)


async def test_a_rare_word_outranks_a_common_one(store: Store) -> None:
    session = await archived(store, [user(f"{STATUS} ({i})") for i in range(30)]
                             + [user("I signed up for a ceramics course on Monday")])
    hits = await search(store, session, "ceramics status")
    assert [h.match for h in hits] == [ANY_WORD] * 8  # no message holds both words
    assert hits[0].seq == 31 and "ceramics course" in hits[0].snippet


async def test_stop_words_never_make_a_partial_match(store: Store) -> None:
    session = await archived(store, [user("what did she say about it? I think she said it was there"),
                                     user("the pottery class is on Tuesday evenings"),
                                     user(STATUS)])
    hits = await search(store, session, "What did she say about the pottery class?")
    # No message holds every word; "pottery" and "class" are the question's informative words, and the
    # message that shares only its stop words is no match at all.
    assert [(h.seq, h.match) for h in hits] == [(2, ANY_WORD)]
    only_stop_words = await search(store, session, "what did she say")
    assert [(h.seq, h.match) for h in only_stop_words] == [(1, ALL_WORDS)]  # required as typed, whole words


async def test_a_word_with_an_apostrophe_is_a_word_not_an_exact_text(store: Store) -> None:
    session = await archived(store, [user("Nate has a new dog, a husky"), user("my dog sleeps all day"),
                                     user("Nate's cat")])
    # The word indexes split "Nate's" at the apostrophe: all words "Nate" and "dog", not the text "Nate's".
    for query in ("Nate's dog?", "Nate’s dog?"):
        hits = await search(store, session, query)
        assert [(h.seq, h.match) for h in hits][:1] == [(1, ALL_WORDS)]
    assert [(h.seq, h.match) for h in await search(store, session, "don't")] == []


async def test_any_word_fills_only_what_all_words_left_empty(store: Store) -> None:
    session = await archived(store, [user(f"{STATUS} ({i})") for i in range(5)]
                             + [user("the green light is on"), user("a status page")])
    full = await search(store, session, "status green", limit=3)
    assert [h.match for h in full] == [ALL_WORDS] * 3
    topped = await search(store, session, "status green", limit=8)
    assert [h.match for h in topped] == [ALL_WORDS] * 5 + [ANY_WORD] * 2
    assert {h.seq for h in topped[5:]} == {6, 7}


async def test_the_answer_to_a_matching_question_is_a_hit(store: Store) -> None:
    session = await archived(store, [
        {"role": "user", "name": "Caroline", "content": "Wow, sounds wonderful! What concert was it?"},
        {"role": "user", "name": "Melanie", "content": "It was Matt Patterson, he is so talented!"},
        {"role": "user", "name": "Caroline", "content": "I went hiking on Sunday."},
    ])
    hits = await search(store, session, "Which concert did Melanie go to?")
    # The answer holds none of the words but "Melanie"; it ranks with the question it answers.
    assert {h.seq for h in hits[:2]} == {1, 2} and 3 not in {h.seq for h in hits}
    assert [h.snippet for h in hits if h.seq == 2] == ["Melanie: It was Matt Patterson, he is so talented!"]


async def test_a_named_speaker_is_found_by_name(store: Store) -> None:
    session = await archived(store, [
        {"role": "user", "name": "Alice", "content": "the deploy key rotates on Fridays"},
        {"role": "user", "name": "Bob", "content": "the deploy key is in the vault"},
    ])
    [hit, *_] = await search(store, session, "alice deploy key")
    assert (hit.seq, hit.match, hit.snippet) == (1, ALL_WORDS, "Alice: the deploy key rotates on Fridays")


async def test_an_error_line_found_by_its_text_is_shown_whole(store: Store) -> None:
    error = ("FAILED tests/store/test_x.py::test_migrations_roll_back - AssertionError: expected revision "
             "0009_search_names, got 0008_message_origins " + "(context) " * 20).strip()
    output = "\n".join([*(f"collected line {i} " + "." * 60 for i in range(40)), error,
                        *(f"summary line {i}" for i in range(40))])
    session = await archived(store, [user("run the tests"), {"role": "tool", "tool_call_id": "c1", "content": output}])
    [hit] = [h for h in await search(store, session, error) if h.match == EXACT_TEXT]
    assert hit.snippet == error and hit.more_at is None  # the line, whole, and nothing cut


async def test_a_very_long_line_is_cut_visibly_and_read_on_where_it_was_cut(store: Store) -> None:
    line = " ".join(f"item{i}" for i in range(2_000)) + " needle " + " ".join(f"tail{i}" for i in range(2_000))
    message = user(line)
    session = await archived(store, [message])
    [hit] = await search(store, session, "needle")
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…") and "needle" in hit.snippet
    assert len(hit.snippet) <= WHOLE_LINES_CHARS + 2 and hit.more_at is not None
    text = message_text(message)
    shown = hit.snippet.strip("…")
    assert text[: hit.more_at].endswith(shown)  # the read goes on right where the snippet stopped


async def test_a_reranker_orders_only_the_partial_matches(store: Store) -> None:
    session = await archived(store, [user("the ceramics course starts Monday"), user("a ceramics vase"),
                                     user("the course is full"), user("ceramics course, second week"),
                                     user("ceramics glaze on Monday"), user("Monday ceramics again")])
    seen: list[Sequence[str]] = []

    def prefers_full(query: str, texts: Sequence[str]) -> list[float]:
        seen.append(texts)
        return [1.0 if "full" in t else 0.0 for t in texts]

    plain = await search(store, session, "ceramics course Monday")
    ranked = await search(store, session, "ceramics course Monday", rerank=prefers_full)
    assert [h.match for h in ranked][:1] == [ALL_WORDS] and ranked[0].seq == plain[0].seq == 1
    assert {h.match for h in ranked[1:]} == {BY_MEANING} and seen
    assert [h.seq for h in ranked].index(3) < [h.seq for h in plain].index(3)  # moved up by meaning


def test_without_the_extra_there_is_no_reranker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wordllama", None)  # what `import wordllama` meets when not installed
    meaning_rerank.cache_clear()
    try:
        assert meaning_rerank() is None
    finally:
        meaning_rerank.cache_clear()


def test_the_installed_reranker_runs_offline_from_its_wheel() -> None:
    pytest.importorskip("wordllama")
    meaning_rerank.cache_clear()
    rerank = meaning_rerank()
    assert rerank is not None
    close, far = rerank("what did she say about the pottery class?",
                        ["I signed up for a ceramics course", "my car broke down on the highway"])
    assert close > far


async def test_words_are_weighed_by_how_common_they_are_in_the_conversation_searched(store: Store) -> None:
    # "deploy" is common in the store (another chat says it all day) and rare in this conversation; the
    # speaker's name is the other way round.
    await archived(store, [user(f"deploy the build, take {i}") for i in range(40)], chat="ops")
    session = await archived(store, [{"role": "user", "name": "Caroline", "content": f"status update {i}"}
                                     for i in range(20)]
                             + [{"role": "user", "name": "Melanie", "content": "we deploy on Fridays"}])
    hits = await search(store, session, "Caroline deploy")
    assert hits[0].seq == 21 and hits[0].match == ANY_WORD


async def test_a_rare_word_is_found_behind_a_hundred_newer_common_ones(store: Store) -> None:
    # The word index hands over only the newest matches of the words rarest in the conversation: the old
    # message with the rare word is among them, and a query word found nowhere does not crowd out the rest.
    session = await archived(store, [user("I signed up for a ceramics course on Monday")]
                             + [user(f"{STATUS} ({i})") for i in range(150)])
    hits = await search(store, session, "ceramics status")
    assert hits[0].seq == 1 and "ceramics course" in hits[0].snippet
    unknown = await search(store, session, "zeppelin status")
    assert len(unknown) == 8 and all(STATUS in h.snippet for h in unknown)
