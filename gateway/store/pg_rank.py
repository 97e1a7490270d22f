"""BM25-style ranking on PostgreSQL: ``ts_rank`` per query word, weighted by the word's rarity.

``ts_rank`` scores a message by how often the query's words occur in it, with diminishing returns for
repeats, but it has no notion of how common a word is: a message that says "really" three times outranks
one that says "ceramics" once. BM25 weighs each word by its inverse document frequency (IDF). The
frequencies come from the statistics PostgreSQL keeps of the word index (``pg_stats.most_common_elems`` of
``search_tsv``, refreshed by ANALYZE / autovacuum): the share of messages holding each common word; a word
not listed is rarer than the least common one listed. Counting them per query instead would read every
message holding a common word. Like FTS5's ``bm25()`` on SQLite, the statistics cover the whole store.

The rank is the sum over the query's words of IDF × ``ts_rank`` of that word alone, with length
normalization 1 (a long message is not a better match for being long). Only a bounded set of candidates is
ranked, since each rank reads the message's word vector: the newest ``CANDIDATES`` messages holding the
query's rare words (any-word matching: a message with common words only ranks below one with a rare word
anyway), or all its words (all-words matching, or when none of its words is rare).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Float, Select, func, literal, literal_column, select, text

from gateway.store.models import MessageRow

__all__ = ["CANDIDATES", "RARE_SHARE", "WordStats", "WordStatsCache", "bm25_idf", "load_word_stats", "pg_rank"]

CANDIDATES = 1_000
# A word in fewer than this share of the messages is rare: any-word candidates are the messages holding one.
RARE_SHARE = 0.02
_STATS_TTL_S = 300.0
_TSV = literal_column("messages.search_tsv")
_STATS = text(
    "SELECT s.most_common_elems::text::text[] AS words, s.most_common_elem_freqs AS shares, c.reltuples AS rows "
    "FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema() AND s.tablename = 'messages' "
    "AND s.attname = 'search_tsv' WHERE c.relname = 'messages' AND c.relnamespace = current_schema()::regnamespace")


def bm25_idf(total: float, containing: float) -> float:
    """BM25's inverse document frequency (the "+1" form, never negative)."""
    return math.log((total - containing + 0.5) / (containing + 0.5) + 1.0)


@dataclass(frozen=True)
class WordStats:
    """How common words are in the store: ``rows`` messages; ``words`` (sorted) with the share of messages
    holding each; ``floor``, the share below which a word is not listed."""

    rows: float
    words: tuple[str, ...]
    shares: tuple[float, ...]
    floor: float

    def share(self, prefix: str) -> float:
        """The share of messages holding a word that starts with ``prefix`` (at most 1)."""
        low = bisect.bisect_left(self.words, prefix)
        high = bisect.bisect_left(self.words, prefix + "\U0010ffff")
        return min(1.0, sum(self.shares[low:high])) if high > low else self.floor / 2

    def share_of(self, word: str) -> float:
        """The share of messages holding ``word`` itself."""
        at = bisect.bisect_left(self.words, word)
        return self.shares[at] if at < len(self.words) and self.words[at] == word else self.floor / 2


def load_word_stats(conn: Connection) -> WordStats | None:
    """The word statistics of ``search_tsv``; None before the first ANALYZE."""
    row = conn.execute(_STATS).first()
    if row is None or not row.words or not row.shares or row.rows is None or row.rows <= 0:
        return None
    pairs = sorted(zip(row.words, row.shares[: len(row.words)], strict=True))
    # The frequency array ends with the minimum and maximum listed share and the share of empty vectors.
    return WordStats(float(row.rows), tuple(w for w, _ in pairs), tuple(float(s) for _, s in pairs),
                     float(row.shares[len(row.words)]))


class WordStatsCache:
    """`load_word_stats`, read again at most every five minutes (it changes with ANALYZE, not per message)."""

    def __init__(self) -> None:
        self._stats: WordStats | None = None
        self._read_at = -math.inf

    def get(self, conn: Connection) -> WordStats | None:
        """The statistics, from the cache while fresh."""
        now = time.monotonic()
        if now - self._read_at > _STATS_TTL_S:
            self._stats, self._read_at = load_word_stats(conn), now
        return self._stats


def pg_rank(keys: Sequence[str], prefixed: Sequence[bool], stats: WordStats | None, *, every: bool,
            where: Callable[[Select[Any]], Select[Any]]) -> Select[Any]:
    """Ids (and scores) of the messages ``where`` admits that hold every (``every``) or any of ``keys`` — as
    word prefixes where ``prefixed`` says so, else as whole words — best first (see the module docstring);
    ``keys`` are plain words (letters and digits only)."""
    as_prefix = dict(zip(keys, prefixed, strict=True))

    def _prefix_query(words: Sequence[str], joiner: str) -> Any:
        return func.to_tsquery("simple", joiner.join(w + (":*" if as_prefix[w] else "") for w in words))

    shares = [(stats.share(k) if as_prefix[k] else stats.share_of(k)) if stats else 0.0 for k in keys]
    rare = [k for k, share in zip(keys, shares, strict=True) if share < RARE_SHARE]
    matching = keys if every or not rare else rare
    condition = _TSV.op("@@")(_prefix_query(matching, " & " if every else " | "))
    candidates = (where(select(MessageRow.id, _TSV.label("tsv")).where(condition))
                  .order_by(MessageRow.id.desc()).limit(CANDIDATES).subquery("candidates"))
    rows = stats.rows if stats else 1.0
    weights = [bm25_idf(rows, share * rows) if stats else 1.0 for share in shares]
    score = sum((literal(w, Float) * func.ts_rank(candidates.c.tsv, _prefix_query([k], ""), 1)
                 for k, w in zip(keys, weights, strict=True)), start=literal(0.0, Float))
    return select(candidates.c.id, score.label("score")).order_by(score.desc(), candidates.c.id.desc())
