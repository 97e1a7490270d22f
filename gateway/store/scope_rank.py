"""BM25 by the statistics of the sessions searched, not of the whole store.

A search is scoped to one conversation, but the word indexes keep their statistics for the whole store
(FTS5's ``bm25()``, PostgreSQL's ``pg_stats``): there a word is weighed by how common it is among every
chat's and agent's messages. A speaker's name is rare in the store and in half the messages of its own
conversation; a word like "code" is common in agent transcripts and rare in a chat. What tells one message
of a conversation from the others is how common a word is in that conversation, so each query key is weighed
by its inverse document frequency in the scope (`ScopeStatsCache`, kept for a minute): on SQLite a count per
key through FTS5 over the scope's span of ids (`_sqlite_span`); on PostgreSQL one pass over the scope's
newest `PG_SAMPLE` messages for all the query's keys (`_pg_holding`).

The word index only finds the candidates, unranked: the newest `POOL` matches (of every key, or for
any-word matching of the keys rarest in the scope, `ScopeStats.rarest`). They are scored here by BM25 with
the scope's IDF, term frequencies and length counted in the first `TEXT_CHARS` characters of each
candidate: a megabyte log costs what a page does (and no more than a page weighs in the length
normalization, which is mild here).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, func, literal_column, select, text

from gateway.store.models import MessageRow

__all__ = ["PG_SAMPLE", "POOL", "TEXT_CHARS", "ScopeStats", "ScopeStatsCache", "bm25_scores", "fts5_key"]

# Candidates the word index hands over, best first by its own rank.
POOL = 100
TEXT_CHARS = 2_000
# On PostgreSQL, the newest messages of a scope its word counts are taken from.
PG_SAMPLE = 2_000
# BM25's term-frequency saturation and length normalization. Normalization is mild: in a conversation the
# longer turns are where the details are (on LoCoMo, b = 0.75, FTS5's choice, puts 4 points fewer evidence
# turns in the top 5 than b = 0.2; b from 0 to 0.2 is flat).
_K1, _B = 1.2, 0.2
_TTL_S = 60.0
Where = Callable[[Select[Any]], Select[Any]]


def fts5_key(key: str, prefixed: bool) -> str:
    """``key`` as an FTS5 query phrase (a prefix query when ``prefixed``)."""
    return '"' + key.replace('"', '""') + '"' + ("*" if prefixed else "")


def _pg_key(key: str, prefixed: bool) -> Any:
    return func.to_tsquery("simple", key + (":*" if prefixed else ""))


@dataclass(frozen=True)
class ScopeStats:
    """How many messages the scope holds, how many of them hold each (key, prefixed), and (on SQLite) the
    first and last id of its messages."""

    rows: int
    holding: dict[tuple[str, bool], int]
    span: tuple[int, int] = (0, -1)

    def idf(self, key: str, prefixed: bool) -> float:
        """BM25's inverse document frequency of the key in the scope (the "+1" form, never negative)."""
        containing = self.holding.get((key, prefixed), 0)
        return math.log((self.rows - containing + 0.5) / (containing + 0.5) + 1.0)

    def rarest(self, keys: Sequence[tuple[str, bool]], most: int) -> list[tuple[str, bool]]:
        """The keys rarest in the scope, as many as hold at most ``most`` messages together (up to the first
        that holds any, whatever it holds): a message with none of them has only common words, and BM25 ranks
        it lower than almost any message with a rare one."""
        chosen: list[tuple[str, bool]] = []
        held = 0
        for key in sorted(keys, key=lambda k: self.holding.get(k, 0)):
            before, held = held, held + self.holding.get(key, 0)
            if before and held > most:
                break
            chosen.append(key)
        return chosen


class ScopeStatsCache:
    """Counts per scope and key, each read again after a minute (a conversation grows a message at a time;
    its word statistics drift slowly)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[Any, ...], tuple[float, Any]] = {}

    def _cached(self, key: tuple[Any, ...], now: float, read: Callable[[], Any]) -> Any:
        hit = self._counts.get(key)
        if hit is None or now - hit[0] > _TTL_S:
            hit = self._counts[key] = (now, read())
        return hit[1]

    def get(self, conn: Connection, scope_key: tuple[str, ...] | None, sessions: Where,
            keys: Sequence[tuple[str, bool]]) -> ScopeStats:
        """The scope's statistics for ``keys`` (word, prefixed); ``sessions`` restricts a query to the scope's
        sessions."""
        now = time.monotonic()
        if len(self._counts) > 10_000:
            self._counts = {k: v for k, v in self._counts.items() if now - v[0] <= _TTL_S}
        if conn.dialect.name == "postgresql":
            rows = self._cached((scope_key,), now, lambda: _pg_count(conn, sessions))
            stale = [k for k in keys if now - self._counts.get((scope_key, *k), (-math.inf,))[0] > _TTL_S]
            if stale:
                for k, count in zip(stale, _pg_holding(conn, sessions, stale, rows), strict=True):
                    self._counts[(scope_key, *k)] = (now, count)
            holding = [self._counts[(scope_key, *k)][1] for k in keys]
            return ScopeStats(max(rows, 1), dict(zip(keys, holding, strict=True)))
        span = self._cached((scope_key,), now, lambda: _sqlite_span(conn, sessions))
        holding = [self._cached((span, *k), now, lambda k=k: _sqlite_count(conn, span, k)) for k in keys]
        return ScopeStats(max(span[2], 1), dict(zip(keys, holding, strict=True)), span[:2])


def _pg_count(conn: Connection, sessions: Where) -> int:
    """The scope's messages, counted through the session index."""
    return int(conn.execute(select(func.count()).select_from(sessions(select(MessageRow.id)).subquery())).scalar_one())


def _pg_holding(conn: Connection, sessions: Where, keys: Sequence[tuple[str, bool]], rows: int) -> list[int]:
    """How many of the scope's messages hold each key, counted in its newest `PG_SAMPLE` messages and scaled
    to its ``rows``: exact in a conversation of up to that many messages, else the statistics of its recent
    past. Counted exactly, a common word costs a check of every message holding it (GIN keeps no counts)."""
    recent = (sessions(select(literal_column("messages.search_tsv").label("tsv")).select_from(MessageRow))
              .order_by(MessageRow.id.desc()).limit(PG_SAMPLE).subquery())
    counts = select(func.count(), *(func.count().filter(recent.c.tsv.op("@@")(_pg_key(*k))) for k in keys))
    sampled, *holding = conn.execute(counts).one()
    return [round(n * rows / max(sampled, 1)) for n in holding]


def _sqlite_span(conn: Connection, sessions: Where) -> tuple[int, int, int]:
    """(first id, last id, messages between them) of the scope: on SQLite the statistics are those of the
    messages written over the scope's span, which FTS5 counts from its own lists in a fraction of a
    millisecond (counting the scope's own rows means looking up each match: tens of milliseconds per common
    word in a long session). They are the scope's own where its conversation had the store to itself over
    that span, and else still those of its time, not of the whole store's."""
    low, high = conn.execute(sessions(select(func.min(MessageRow.id), func.max(MessageRow.id)))).one()
    if low is None:
        return 0, -1, 0
    rows = conn.execute(select(func.count()).where(MessageRow.id.between(low, high))).scalar_one()
    return int(low), int(high), int(rows)


def _sqlite_count(conn: Connection, span: tuple[int, int, int], key: tuple[str, bool]) -> int:
    found = text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q AND rowid BETWEEN :low AND :high")
    return int(conn.execute(found, {"q": fts5_key(*key), "low": span[0], "high": span[1]}).scalar_one())


def _occurrences(head: str, key: str, prefixed: bool) -> int:
    """How many words of ``head`` (lower case) are ``key``, or start with it when ``prefixed``. str.find, not
    a regular expression: ``re`` tries every position of a text, ten times slower on a page."""
    found, at = 0, head.find(key)
    while at >= 0:
        end = at + len(key)
        if (at == 0 or not head[at - 1].isalnum()) and (prefixed or end == len(head) or not head[end].isalnum()):
            found += 1
        at = head.find(key, end)
    return found


def bm25_scores(candidates: Sequence[tuple[int, str]], keys: Sequence[tuple[str, bool]],
                stats: ScopeStats) -> dict[int, float]:
    """BM25 of each (id, first characters of its text) with the scope's IDF; the average length is the
    candidates' (a scope's own would read every message)."""
    if not candidates:
        return {}
    idf = [stats.idf(k, p) for k, p in keys]
    lowered = [(k.lower(), p) for k, p in keys]
    counted = []
    for id_, head in candidates:
        head = head.lower()
        frequency = [_occurrences(head, k, p) for k, p in lowered]
        # Words counted by their separators: the length only scales the mild normalization.
        counted.append((id_, frequency, float(head.count(" ") + head.count("\n") + 1)))
    average = sum(c[2] for c in counted) / len(counted) or 1.0
    scores = {}
    for id_, frequency, words in counted:
        norm = _K1 * (1 - _B + _B * words / average)
        scores[id_] = sum(w * f * (_K1 + 1) / (f + norm) for w, f in zip(idf, frequency, strict=True) if f)
    return scores
