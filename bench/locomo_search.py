"""Do a LoCoMo question's own words find its evidence turns in the top 5 hits of ``search_history``?

    python -m bench.locomo_search                  # SQLite, and PostgreSQL when a URL is set
    python -m bench.locomo_search --postgres URL

Each LoCoMo conversation (``bench.corpus``) is stored as a session and compacted whole into a one-line
summary, so every turn is archived — what a long conversation looks like after its compactions — and each
question that has evidence is searched the way the agent's tool searches (this session, what the model
sees left out, 5 hits). The evidence is LoCoMo's own labels (the turns' ``dia_id``s), never anything the
search produced. The query is the question as asked, with and without the re-ranker by meaning when the
``rerank`` extra is installed. ``bench.reachability`` reports the same figures (`evidence_hits`) for the
turns its compaction took out of view, and for two of the question's distinctive words too (the rarest in
the conversation: the query it used before ranked search).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from bench.corpus import Transcript, iter_transcripts
from bench.scratch_db import bench_databases
from gateway.conversation.rerank import meaning_rerank
from gateway.store import Store
from gateway.store.search import Rerank

__all__ = ["TARGET", "TOP", "evidence_hits", "main", "variants"]

TOP = 5
TARGET = 0.50
QUESTION, TWO_WORDS = "the question as asked", "two of its words"
BY_MEANING = ", re-ranked by meaning"


def variants(rerank: Rerank | None, two_words: bool = False) -> list[str]:
    """The figures reported, in order: each query, then (with a re-ranker) each query re-ranked."""
    names = [QUESTION, TWO_WORDS] if two_words else [QUESTION]
    return names + [n + BY_MEANING for n in names] if rerank is not None else names


async def evidence_hits(store: Store, session_id: str, transcript: Transcript, seq_of: Callable[[str], int | None],
                        rerank: Rerank | None, two_words: Callable[[str, str], str] | None = None) -> Counter[str]:
    """For the questions of ``transcript`` whose evidence turns ``seq_of`` places (the message number, or None
    for a turn not to count): ``turns`` counted, and per variant how many of them were in the top hits.
    ``two_words`` (question, answer) → a query of two of the question's words, not taken from the answer."""
    counts: Counter[str] = Counter()
    for qa in transcript.meta.get("qa", ()):
        wanted = {s for s in (seq_of(e) for e in qa.evidence) if s is not None}
        if not wanted:
            continue
        counts["turns"] += len(wanted)
        queries = {QUESTION: qa.question}
        if two_words is not None:
            queries[TWO_WORDS] = two_words(qa.question, str(qa.answer or ""))
        for name, query in queries.items():
            for reranker, label in ((None, name), (rerank, name + BY_MEANING)):
                if (label != name and reranker is None) or not query:
                    continue
                hits = await store.search(query, session_ids=[session_id], skip_active_of=session_id, limit=TOP,
                                          rerank=reranker)
                counts[label] += len(wanted & {h.seq for h in hits})
    return counts


async def _store(store: Store, transcript: Transcript) -> tuple[str, int]:
    """Store the conversation and compact it whole; (session id, number of its first message)."""
    record = await store.sessions.get_or_create_active("bench", f"locomo:{transcript.name}")
    messages = transcript.messages
    await store.messages.append(record.id, messages, [1] * len(messages))
    active = await store.messages.load_active(record.id)
    summary = {"role": "assistant", "content": "Summary: a long conversation between two friends."}
    await store.compactions.replace_active(record.id, [summary], [10], active.watermark)
    return record.id, active.watermark - len(messages) + 1


async def _measure(store: Store, transcripts: Sequence[Transcript], rerank: Rerank | None) -> Counter[str]:
    stored = [await _store(store, t) for t in transcripts]
    if store.dialect == "postgresql":
        async with store.engine.begin() as conn:
            await conn.exec_driver_sql("ANALYZE")  # the word statistics autovacuum keeps in a live store
    totals: Counter[str] = Counter()
    for transcript, (session_id, first) in zip(transcripts, stored, strict=True):
        index: dict[str, int] = transcript.meta.get("dia_index", {})
        totals.update(await evidence_hits(store, session_id, transcript,
                                          lambda e, index=index, first=first: first + index[e] if e in index else None,
                                          rerank))
    return totals


async def run(postgres: str | None, kinds: Iterable[str] = ("locomo",)) -> int:
    """Search every LoCoMo question on each backend and print the table; 0 (figures, not a test)."""
    transcripts = list(iter_transcripts(kinds=kinds))
    if not transcripts:
        print("bench.locomo_search: corpus not found (set CONCORD_CORPUS_DIR); nothing to measure")
        return 0
    rerank = meaning_rerank()
    questions = sum(len(t.meta.get("qa", ())) for t in transcripts)
    print(f"{len(transcripts)} LoCoMo conversations, {questions:,} questions; evidence turns in the top {TOP} hits"
          f" (target ≥ {TARGET:.0%}); re-ranker: {'installed' if rerank else 'not installed (extra rerank)'}\n")
    print(f"{'backend':<12}" + "".join(f"{name:>48}" for name in variants(rerank)))
    async with bench_databases(postgres, "concord_locomo_search") as databases:
        for backend, url in databases:
            async with await Store.open(url, migrate=False) as store:
                totals = await _measure(store, transcripts, rerank)
            turns = max(totals["turns"], 1)
            print(f"{backend:<12}" + "".join(f"{totals[name] / turns:>48.1%}" for name in variants(rerank)))
    if postgres is None:
        print("postgresql: skipped (no URL; pass --postgres or set CONCORD_BENCH_POSTGRES_URL)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.locomo_search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", default=os.environ.get("CONCORD_BENCH_POSTGRES_URL")
                        or os.environ.get("CONCORD_TEST_POSTGRES_URL"))
    args = parser.parse_args(argv)
    return asyncio.run(run(args.postgres))


if __name__ == "__main__":
    raise SystemExit(main())
