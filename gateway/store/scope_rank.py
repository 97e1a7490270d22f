"""BM25 by the statistics of the sessions searched, not of the whole store.

A search is scoped to one conversation, but the word indexes keep their statistics for the whole store
(FTS5's ``bm25()``, PostgreSQL's ``pg_stats``): there a word is weighed by how common it is among every
chat's and agent's messages. A speaker's name is rare in the store and in half the messages of its own
conversation; a word like "code" is common in agent transcripts and rare in a chat. What tells one message
of a conversation from the others is how common a word is in that conversation, so each query key is weighed
by its inverse document frequency in the scope (`ScopeStatsCache`: a count per key through the word index,
restricted to the scope's sessions, kept for a minute).

The word index still finds the candidates and gives a first order (its own rank, `POOL` of them); those are
scored again here by BM25 with the scope's IDF, term frequencies counted in the first `TEXT_CHARS`
characters of each candidate (a megabyte log costs what a page does; its length still counts in full).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Select, func, literal_column, select, text

from gateway.store.models import MessageRow

__all__ = ["POOL", "TEXT_CHARS", "ScopeStats", "ScopeStatsCache", "bm25_scores", "fts5_key"]

# Candidates the word index hands over, best first by its own rank.
POOL = 200
TEXT_CHARS = 4_000
# BM25's term-frequency saturation and length normalization. Normalization is mild: in a conversation the
# longer turns are where the details are (on LoCoMo, b = 0.75, FTS5's choice, puts 4 points fewer evidence
# turns in the top 5 than b = 0.2; b from 0 to 0.2 is flat).
_K1, _B = 1.2, 0.2
_TTL_S = 60.0
# A key counted in more than this many of the scope's messages is common there: its IDF is near its floor
# whatever the exact count, and counting on would read every message holding it.
_COUNT_CAP = 2_000
Where = Callable[[Select[Any]], Select[Any]]


def fts5_key(key: str, prefixed: bool) -> str:
    """``key`` as an FTS5 query phrase (a prefix query when ``prefixed``)."""
    return '"' + key.replace('"', '""') + '"' + ("*" if prefixed else "")


def _pg_key(key: str, prefixed: bool) -> Any:
    return func.to_tsquery("simple", key + (":*" if prefixed else ""))


@dataclass(frozen=True)
class ScopeStats:
    """How many messages the scope holds, and how many of them hold each (key, prefixed)."""

    rows: int
    holding: dict[tuple[str, bool], int]

    def idf(self, key: str, prefixed: bool) -> float:
        """BM25's inverse document frequency of the key in the scope (the "+1" form, never negative)."""
        containing = self.holding.get((key, prefixed), 0)
        return math.log((self.rows - containing + 0.5) / (containing + 0.5) + 1.0)


class ScopeStatsCache:
    """Counts per scope and key, each read again after a minute (a conversation grows a message at a time;
    its word statistics drift slowly)."""

    def __init__(self) -> None:
        self._counts: dict[tuple[Any, ...], tuple[float, int]] = {}

    def _cached(self, key: tuple[Any, ...], count: Callable[[], int]) -> int:
        now = time.monotonic()
        hit = self._counts.get(key)
        if hit is not None and now - hit[0] <= _TTL_S:
            return hit[1]
        if len(self._counts) > 10_000:
            self._counts = {k: v for k, v in self._counts.items() if now - v[0] <= _TTL_S}
        value = count()
        self._counts[key] = (now, value)
        return value

    def get(self, conn: Connection, scope_key: tuple[str, ...] | None, where: Where,
            keys: Sequence[tuple[str, bool]]) -> ScopeStats:
        """The scope's statistics for ``keys`` (word, prefixed); ``where`` restricts a query to the scope."""
        rows = self._cached((scope_key,), lambda: conn.execute(
            where(select(func.count()).select_from(MessageRow))).scalar_one())
        holding = {k: self._cached((scope_key, *k), lambda k=k: _count_holding(conn, where, *k)) for k in keys}
        return ScopeStats(max(rows, 1), holding)


def _count_holding(conn: Connection, where: Where, key: str, prefixed: bool) -> int:
    if conn.dialect.name == "postgresql":
        inner = where(select(MessageRow.id).where(literal_column("messages.search_tsv").op("@@")(_pg_key(key, prefixed))))
    else:
        fts = text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :q").bindparams(
            q=fts5_key(key, prefixed)).columns(literal_column("rowid")).subquery("fts")
        inner = where(select(MessageRow.id).join(fts, fts.c.rowid == MessageRow.id))
    return conn.execute(select(func.count()).select_from(inner.limit(_COUNT_CAP).subquery())).scalar_one()


def _key_pattern(keys: Sequence[tuple[str, bool]]) -> re.Pattern[str]:
    # One group per key, at the start of a word: a prefix key takes the rest of the word, a whole-word key
    # none of it.
    parts = [f"({re.escape(k.lower())})" + (r"[^\W_]*" if prefixed else r"(?![^\W_])") for k, prefixed in keys]
    return re.compile(r"(?<![^\W_])(?:" + "|".join(parts) + ")")


def bm25_scores(candidates: Sequence[tuple[int, str, int]], keys: Sequence[tuple[str, bool]],
                stats: ScopeStats) -> dict[int, float]:
    """BM25 of each (id, first characters of its text, its full length) with the scope's IDF; the average
    length is the candidates' (a scope's own would read every message)."""
    if not candidates:
        return {}
    pattern = _key_pattern(keys)
    idf = [stats.idf(k, p) for k, p in keys]
    counted = []
    for id_, head, length in candidates:
        frequency = [0] * len(keys)
        for found in pattern.finditer(head.lower()):
            frequency[found.lastindex - 1] += 1  # type: ignore[operator]
        words = len(head.split())
        counted.append((id_, frequency, words * length / len(head) if head else 0.0))
    average = sum(c[2] for c in counted) / len(counted) or 1.0
    scores = {}
    for id_, frequency, words in counted:
        norm = _K1 * (1 - _B + _B * words / average)
        scores[id_] = sum(w * f * (_K1 + 1) / (f + norm) for w, f in zip(idf, frequency, strict=True) if f)
    return scores
