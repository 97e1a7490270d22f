"""Full-text search over every message ever stored, archived ones included, ranked by relevance.

A query of plain words (`parse_query`) is matched with all its words first (word prefixes, on the word
indexes: FTS5 unicode61 on SQLite, the ``search_tsv`` tsvector on PostgreSQL). The index finds the
candidates, unranked — the newest `POOL` matches (for any-word matching, of the words rarest in the sessions
searched) — and they are ranked by BM25 with the statistics of the sessions searched (`scope_rank`), not of
the whole store. When all-words matching fills fewer than the ``limit`` places asked for,
any-word matching fills the rest: messages holding any of the query's informative words (stop words left
out, words cut to their stems), ranked the same way, after every all-words hit. An all-words match holds
everything the caller thought of, so it keeps its place; the rest of the page goes to the closest partial
matches — a paraphrase shares some words with its question, rarely all of them — and to the answers to the
matching messages that ask something (`_with_answers`): "what concert was it?" matches, "It was Matt
Patterson" answers.

Anything else — CJK text (no spaces, so no words), JSON fragments, paths, punctuation — is an exact
substring search, newest first: trigram indexes for terms of 3+ characters (FTS5 trigram / pg_trgm), and a
plain LIKE for 1–2 character terms, which no trigram index can serve; when it finds too little, any-word
matching on the query's words fills the rest too.

Every hit says how it matched (``SearchHit.match``). A ``rerank`` function (`gateway.conversation.rerank`) may re-order
the any-word candidates by meaning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Connection, Select, and_, func, literal_column, or_, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.database import run_read
from gateway.store.models import MessageRow
from gateway.store.records import SearchHit
from gateway.store.scope_rank import POOL, TEXT_CHARS, ScopeStats, ScopeStatsCache, bm25_scores, fts5_key
from gateway.store.search_terms import Query, matches_as_prefix, parse_query, split_terms
from gateway.store.snippets import Snippet, cut_snippet

__all__ = ["ALL_WORDS", "ANY_WORD", "BY_MEANING", "EXACT_TEXT", "MessageSearch", "Rerank", "split_terms"]

ALL_WORDS, ANY_WORD, EXACT_TEXT, BY_MEANING = "all words", "any word", "exact text", "any word, by meaning"
# Any-word candidates a re-ranker orders (the best of them by words), and how it fuses the two orders
# (reciprocal rank fusion: 1 / (k + place by words) + weight / (k + place by meaning)). The weight was chosen
# on LoCoMo conversations 0-6 (every turn archived, top 5) and checked on 7-9 and on the compacted middles of
# `bench.reachability`: at 0.3 more evidence turns reach the top 5 than by words alone in each of them, by the
# question as asked and by two of its words (0.5 lost some by the question; by meaning alone loses a third).
RERANK_POOL = 10
_FUSION_K = 5
_MEANING_WEIGHT = 0.3
# Any-word candidates whose answers are ranked with them.
ANSWER_POOL = 20
# (query, candidate texts) → one similarity per text, higher is closer.
Rerank = Callable[[str, Sequence[str]], Sequence[float]]


class _Scored(NamedTuple):
    """A word-matching candidate: its id, its BM25 score, and whether its first characters ask something."""

    id: int
    score: float
    asks: bool


@dataclass(frozen=True, slots=True)
class _Row:
    id: int
    session_id: str
    seq: int
    role: str
    created_at: Any
    active: bool
    text: str
    match: str


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class _Scope:
    """Which rows a search may return: the sessions asked for, less the current session's active rows (what
    its model sees) and every row of the same text (compaction and rotation copy the verbatim tail)."""

    def __init__(self, session_ids: Sequence[str] | None, skip_active_of: str | None) -> None:
        self.session_ids = list(session_ids) if session_ids is not None else None
        self.skip_active_of = skip_active_of
        self.seen: set[str] = set()
        # What the statistics of the scope are cached under.
        self.key = tuple(sorted(self.session_ids)) if self.session_ids is not None else None

    def where(self, query: Select[Any], session: ColumnElement[Any] = MessageRow.session_id) -> Select[Any]:
        """``query`` restricted to the rows a search may return; ``session`` is the session id column as the
        conditions should name it."""
        if self.session_ids is not None:
            query = query.where(session.in_(self.session_ids))
        if self.skip_active_of is not None:
            query = query.where(or_(session != self.skip_active_of, ~MessageRow.active))
        return query

    def sessions(self, query: Select[Any]) -> Select[Any]:
        """``query`` restricted to the sessions asked for (every row of them, what the model sees included)."""
        return query.where(MessageRow.session_id.in_(self.session_ids)) if self.session_ids is not None else query

    def load_seen(self, conn: Connection) -> None:
        if self.skip_active_of is None:
            return
        self.seen = set(conn.execute(_ACTIVE_TEXTS[conn.dialect.name], {"session": self.skip_active_of}).scalars())


# The texts of a session's active rows. On SQLite the partial index is named: without statistics the planner
# picks the (session_id, archived_by) index and reads every row the session ever had.
_ACTIVE_TEXTS = {
    "sqlite": text("SELECT search_text FROM messages INDEXED BY ix_messages_active "
                   "WHERE session_id = :session AND active"),
    "postgresql": text("SELECT search_text FROM messages WHERE session_id = :session AND active"),
}


class MessageSearch:
    """Dialect-aware search; returns `SearchHit`s best first (see the module docstring)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name
        self._scope_stats = ScopeStatsCache()

    # ------------------------------------------------------------------ ordered candidate ids per matcher

    def _pool(self, pairs: Sequence[tuple[str, bool]], stats: ScopeStats, *, every: bool, scope: _Scope) -> Select[Any]:
        """Ids of the newest `POOL` candidates: messages with every (``every``) or any of the (key, prefixed)
        ``pairs`` — any-word matching takes the keys rarest in the scope (`ScopeStats.rarest`). No rank here
        (FTS5's ``bm25()`` or ``ts_rank`` would be worked out for every match, then thrown away): `_words`
        scores the candidates itself."""
        chosen = pairs if every else stats.rarest(pairs, POOL)
        if self._dialect == "postgresql":
            joiner = " & " if every else " | "
            condition = literal_column("messages.search_tsv").op("@@")(
                func.to_tsquery("simple", joiner.join(k + (":*" if p else "") for k, p in chosen)))
            session: ColumnElement[Any] = MessageRow.session_id
        else:
            match = (" AND " if every else " OR ").join(fts5_key(k, p) for k, p in chosen)
            # An IN list, not a join: joined to messages under a session filter, FTS5 runs once per row. The
            # matches are looked up by id: "+" keeps the planner off the session index, which it would walk
            # through every row of a long session.
            matches = text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q AND rowid BETWEEN :low AND "
                           ":high").bindparams(q=match, low=stats.span[0], high=stats.span[1])
            condition = MessageRow.id.in_(matches.columns(literal_column("rowid")))
            session = literal_column("+messages.session_id")
        query = scope.where(select(MessageRow.id).where(condition), session)
        return query.order_by(MessageRow.id.desc()).limit(POOL)

    def _words(self, conn: Connection, keys: Sequence[str], *, every: bool, scope: _Scope) -> list[_Scored]:
        """Messages with every (``every``) or any of ``keys``, as word prefixes or whole words
        (`matches_as_prefix`), scored by BM25 with the scope's statistics (`scope_rank`), best first."""
        pairs = [(k, matches_as_prefix(k, required=every)) for k in keys]
        stats = self._scope_stats.get(conn, scope.key, scope.sessions, pairs)
        ids = list(conn.execute(self._pool(pairs, stats, every=every, scope=scope)).scalars())
        if not ids:
            return []
        heads = [tuple(r) for r in conn.execute(
            select(MessageRow.id, func.substr(MessageRow.search_text, 1, TEXT_CHARS)).where(MessageRow.id.in_(ids)))]
        scores = bm25_scores(heads, pairs, stats)
        asking = {i for i, head in heads if "?" in head}
        return sorted((_Scored(i, scores.get(i, 0.0), i in asking) for i in ids), key=lambda p: (-p.score, -p.id))

    def _substrings(self, terms: Sequence[str], scope: _Scope) -> Select[Any]:
        """Ids newest first: messages holding every term as typed."""
        query = select(MessageRow.id)
        if self._dialect == "sqlite":
            # The trigram table narrows by the 3+ character terms; LIKE checks the short ones on those rows.
            like_terms = list(terms)
            long_terms = [t for t in terms if len(t) >= 3]
            if long_terms:
                match = " AND ".join(fts5_key(t, False) for t in long_terms)
                ids = text("SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH :tq").bindparams(
                    tq=match).columns(literal_column("rowid"))
                query = query.where(MessageRow.id.in_(ids))
                like_terms = [t for t in terms if len(t) < 3]
            if like_terms:
                query = query.where(and_(*(MessageRow.search_text.like(_like_pattern(t), escape="\\")
                                           for t in like_terms)))
        else:
            # pg_trgm's GIN index serves terms of 3+ characters; shorter ones scan. A case-insensitive regular
            # expression marked literal ("***="), not ILIKE: the index's candidates are checked again on their
            # text, and ILIKE lower-cases a whole text first (20 ms for a megabyte, the regex half that).
            query = query.where(and_(*(MessageRow.search_text.op("~*")("***=" + t) for t in terms)))
        return scope.where(query).order_by(MessageRow.id.desc())

    # ------------------------------------------------------------------ paging through a matcher's order

    @staticmethod
    def _take(conn: Connection, ids: Sequence[int], want: int, match: str, scope: _Scope, taken: set[int],
              rows: list[_Row]) -> None:
        """Append to ``rows`` those of ``ids`` (in order) not in ``taken`` and not copies of what the model sees,
        until there are ``want``."""
        fresh = [i for i in ids if i not in taken]
        if not fresh:
            return
        found = {r.id: r for r in conn.execute(
            select(MessageRow.id, MessageRow.session_id, MessageRow.seq, MessageRow.role, MessageRow.created_at,
                   MessageRow.active, MessageRow.search_text).where(MessageRow.id.in_(fresh)))}
        for i in fresh:
            if len(rows) >= want:
                return
            r = found[i]
            taken.add(i)
            # A copy of what the model sees is left out (compaction and rotation copy the verbatim tail); two
            # equal texts elsewhere are two messages, each with its own neighbours.
            if r.search_text not in scope.seen:
                rows.append(_Row(r.id, r.session_id, r.seq, r.role, r.created_at, r.active, r.search_text, match))

    def _collect(self, conn: Connection, pages: Iterable[Sequence[int]], want: int, match: str, scope: _Scope,
                 taken: set[int]) -> list[_Row]:
        """The first ``want`` rows of ``pages`` (ids in order, page after page) that are not in ``taken`` and not
        copies of what the model sees; texts are loaded only for those (never for every candidate)."""
        rows: list[_Row] = []
        for ids in pages:
            self._take(conn, ids, want, match, scope, taken, rows)
            if len(rows) >= want:
                break
        return rows

    @staticmethod
    def _sql_pages(conn: Connection, ordered: Select[Any], want: int, taken: set[int]) -> Iterator[list[int]]:
        """The ids of ``ordered`` page after page, each page twice the last."""
        offset, page = 0, want + len(taken) + 8
        while True:
            ids = list(conn.execute(ordered.limit(page).offset(offset)).scalars())
            yield ids
            if len(ids) < page:
                return
            offset, page = offset + page, page * 2

    @staticmethod
    def _with_answers(conn: Connection, ranked: Sequence[_Scored], scope: _Scope, pool: int) -> list[int]:
        """The ``pool`` best of ``ranked``, and the answers to those that ask something, by score; an answer
        (the message right after one with a "?" in its first `TEXT_CHARS` characters) gets the question's score
        added to its own: in a conversation the answer to a matching question is often where the query's
        words are not."""
        best = ranked[:pool]
        scored = {r.id: r.score for r in best}
        total = dict(scored)
        asks = [r.id for r in best if r.asks]
        if asks:
            asking = {(r.session_id, r.seq): r.id for r in conn.execute(
                select(MessageRow.id, MessageRow.session_id, MessageRow.seq).where(MessageRow.id.in_(asks)))}
            # Sessions and numbers apart (each served by the (session_id, seq) index), the pairs checked here:
            # SQLite scans for a row-value IN list.
            answers = scope.where(select(MessageRow.id, MessageRow.session_id, MessageRow.seq).where(
                MessageRow.session_id.in_({s for s, _ in asking}), MessageRow.seq.in_({q + 1 for _, q in asking})))
            for r in conn.execute(answers):
                question = asking.get((r.session_id, r.seq - 1))
                if question is not None:
                    total[r.id] = total.get(r.id, 0.0) + scored[question]
        return sorted(total, key=lambda i: (-total[i], -i))

    def _rows(self, conn: Connection, query: Query, limit: int, scope: _Scope, pool: int) -> list[_Row]:
        """All-words (or exact) hits, then any-word hits up to ``limit`` (``pool`` of them when a re-ranker
        will choose among them)."""
        if self._dialect == "postgresql":
            # After five runs of a prepared statement PostgreSQL may switch to a plan made without the query's
            # words, and the word index's selectivity is all that keeps a ranking query cheap.
            conn.exec_driver_sql("SET LOCAL plan_cache_mode = force_custom_plan")
        scope.load_seen(conn)
        taken: set[int] = set()
        if query.words:
            first = self._words(conn, query.words, every=True, scope=scope)
            rows = self._collect(conn, [[r.id for r in first]], limit, ALL_WORDS, scope, taken)
        else:
            pages = self._sql_pages(conn, self._substrings(query.substrings, scope), limit, taken)
            rows = self._collect(conn, pages, limit, EXACT_TEXT, scope, taken)
        if len(rows) < limit and query.keys:
            rest = self._words(conn, query.keys, every=False, scope=scope)
            want = max(limit - len(rows), pool)
            best = self._with_answers(conn, rest, scope, max(want, ANSWER_POOL))
            rows += self._collect(conn, [best, [r.id for r in rest]], want, ANY_WORD, scope, taken)
        return rows

    async def search(self, query: str, *, session_id: str | None = None, limit: int = 20,
                     session_ids: Sequence[str] | None = None, skip_active_of: str | None = None,
                     redact: Callable[[str], str] | None = None, rerank: Rerank | None = None) -> list[SearchHit]:
        """Messages (active or archived) matching ``query``, best first, at most ``limit``.

        ``session_id`` / ``session_ids`` restrict the search to those sessions; ``skip_active_of`` leaves out
        that session's active rows (what its model already sees) and every row of the same text. ``redact``
        rewrites the shown part of each message (with a margin) before it is shown, so a secret is replaced
        whole rather than shown in part. ``rerank`` re-orders the any-word hits by meaning.
        """
        parsed = parse_query(query)
        if not parsed.terms or limit <= 0 or (session_ids is not None and not session_ids):
            return []
        ids = [session_id] if session_id is not None else None
        if session_ids is not None:
            ids = [i for i in session_ids if ids is None or i in ids]
        scope = _Scope(ids, skip_active_of)
        pool = RERANK_POOL if rerank is not None else 0
        rows = await run_read(self._engine, lambda conn: self._rows(conn, parsed, limit, scope, pool))
        if rerank is not None:
            # A thread: the first call loads the model (about a second), and each embeds ~30 texts.
            rows = await asyncio.to_thread(_reranked, rows, parsed, rerank)
        terms = parsed.words or parsed.substrings
        hits = []
        # Compaction copies its verbatim tail: a long paste kept there is stored (and found) several times.
        cuts: dict[tuple[bool, str], Snippet] = {}
        for row in rows[:limit]:
            whole = row.match == ALL_WORDS
            cut = cuts.get((whole, row.text))
            if cut is None:
                cut = cuts[whole, row.text] = cut_snippet(row.text, terms if whole else [*terms, *parsed.keys],
                                                          parsed.phrase, redact=redact)
            hits.append(SearchHit(session_id=row.session_id, seq=row.seq, role=row.role, created_at=row.created_at,
                                  snippet=cut.text, archived=not row.active, match=row.match, more_at=cut.more_at))
        return hits


def _reranked(rows: list[_Row], query: Query, rerank: Rerank) -> list[_Row]:
    """The first-pass hits as they are, then the any-word hits by reciprocal rank fusion of their word rank and
    their rank by similarity to the query. Fused, not replaced: measured on LoCoMo, ordering by similarity
    alone loses a third of the evidence the word ranking finds (static embeddings of a question and of its
    answer are not close; README, "Search by meaning")."""
    firm = [r for r in rows if r.match != ANY_WORD]
    loose = [r for r in rows if r.match == ANY_WORD]
    if len(loose) < 2:
        return rows
    scores = rerank(query.phrase, [cut_snippet(r.text, query.keys, query.phrase).text for r in loose])
    by_meaning = {i: place for place, i in enumerate(sorted(range(len(loose)), key=lambda i: -scores[i]))}
    fused = sorted(range(len(loose)), key=lambda i: -(1 / (_FUSION_K + i) + _MEANING_WEIGHT / (_FUSION_K + by_meaning[i])))
    return firm + [replace(loose[i], match=BY_MEANING) for i in fused]
