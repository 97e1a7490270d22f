"""BM25-style ranking on PostgreSQL: ``ts_rank`` per query word, weighted by the word's rarity.

``ts_rank`` scores a message by how often and how close the query's words occur in it, with diminishing
returns for repeats, but it has no notion of how common a word is: a message that says "really" three
times outranks one that says "ceramics" once. BM25 weighs each word by its inverse document frequency
(IDF); here the frequencies are counted in the sessions searched (the word index answers each count, capped
at ``_COUNT_CAP`` rows — past that a word is common and its weight near its floor), and the rank is the sum
over the words of IDF × ``ts_rank`` of that word alone, with ``ts_rank``'s length normalization 1 (a long
message is not a better match for being long).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, Float, Select, func, literal, literal_column, select

from gateway.store.models import MessageRow

__all__ = ["bm25_idf", "pg_rank"]

_COUNT_CAP = 5_000
_TSV = literal_column("messages.search_tsv")


def bm25_idf(total: int, containing: int) -> float:
    """BM25's inverse document frequency (the "+1" form, never negative)."""
    return math.log((total - containing + 0.5) / (containing + 0.5) + 1.0)


def _prefix_query(keys: Sequence[str], joiner: str) -> Any:
    return func.to_tsquery("simple", joiner.join(f"{k}:*" for k in keys))


def _capped_count(where: Callable[[Select[Any]], Select[Any]], condition: Any | None) -> Any:
    rows = select(literal(1)).select_from(MessageRow)
    if condition is not None:
        rows = rows.where(condition)
    return select(func.count()).select_from(where(rows).limit(_COUNT_CAP).subquery()).scalar_subquery()


def pg_rank(conn: Connection, keys: Sequence[str], *, every: bool,
            where: Callable[[Select[Any]], Select[Any]]) -> Select[Any]:
    """Ids of the messages ``where`` admits that hold every (``every``) or any of ``keys`` as word prefixes,
    best first (see the module docstring); ``keys`` are plain words (letters and digits only)."""
    singles = [_prefix_query([k], "") for k in keys]
    counts = conn.execute(select(_capped_count(where, None),
                                 *(_capped_count(where, _TSV.op("@@")(q)) for q in singles))).one()
    total = max(int(counts[0]), 1)
    weights = [bm25_idf(total, int(n)) for n in counts[1:]]
    score = sum((literal(w, Float) * func.ts_rank(_TSV, q, 1) for w, q in zip(weights, singles, strict=True)),
                start=literal(0.0, Float))
    matches = _TSV.op("@@")(_prefix_query(keys, " & " if every else " | "))
    return where(select(MessageRow.id).where(matches)).order_by(score.desc(), MessageRow.id.desc())
