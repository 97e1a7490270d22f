"""Full-text search over every message ever stored, archived ones included.

The query is split on whitespace and every term must match (AND). Plain-word queries use the word indexes
(FTS5 unicode61 with prefix matching on SQLite, tsvector on PostgreSQL) and are ranked. Anything else —
CJK text (no spaces, so no words), JSON fragments, punctuation — is a substring search: trigram indexes for
terms of 3+ characters (FTS5 trigram / pg_trgm), and a plain LIKE for 1–2 character terms, which no trigram
index can serve.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Select, and_, func, literal_column, select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import aliased

from gateway.store.database import read
from gateway.store.models import MessageRow
from gateway.store.records import SearchHit

__all__ = ["MessageSearch", "split_terms"]

_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]")
_SNIPPET_RADIUS = 60
_WHOLE_LINE_CHARS = 400
# Occurrences considered when picking where to cut a snippet (a term repeated all over a log).
_MAX_SPOTS = 200


def split_terms(query: str) -> list[str]:
    """The query's terms (whitespace-separated, duplicates dropped, order kept)."""
    return list(dict.fromkeys(query.split()))


def _is_word(term: str) -> bool:
    return term.isalnum() and not _CJK.search(term)


def _fts5_string(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _best_match(lowered: str, terms: Sequence[str]) -> tuple[int, int]:
    """(position, length) of the best-matching term: the occurrence with the most distinct query terms
    near it, then the longest term (the most distinctive), then the earliest."""
    spots: list[tuple[int, int, int]] = []  # (position, length, term index)
    for index, term in enumerate(t.lower() for t in terms):
        at = lowered.find(term)
        while at >= 0 and len(spots) < _MAX_SPOTS:
            spots.append((at, len(term), index))
            at = lowered.find(term, at + max(len(term), 1))
    if not spots:
        return 0, 0
    def score(spot: tuple[int, int, int]) -> tuple[int, int, int]:
        near = {i for p, _, i in spots if abs(p - spot[0]) <= _SNIPPET_RADIUS * 2}
        return len(near), spot[1], -spot[0]
    at, length, _ = max(spots, key=score)
    return at, length


def snippet(body: str, terms: Sequence[str]) -> str:
    """``body`` around its best-matching term (see `_best_match`), on one line: ~120 characters, or the whole
    line of the match when that line is up to 400 characters (an error line or a command comes back whole)."""
    at, length = _best_match(body.lower(), terms)
    start = max(0, at - _SNIPPET_RADIUS)
    end = min(len(body), at + length + _SNIPPET_RADIUS)
    line_start = body.rfind("\n", 0, at) + 1
    line_end = body.find("\n", at)
    line_end = len(body) if line_end < 0 else line_end
    if line_end - line_start <= _WHOLE_LINE_CHARS:
        start, end = min(start, line_start), max(end, line_end)
    text_ = " ".join(body[start:end].split())
    return ("…" if start > 0 else "") + text_ + ("…" if end < len(body) else "")


class MessageSearch:
    """Dialect-aware search; returns `SearchHit`s, best (word queries) or newest (substring queries) first."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._dialect = engine.dialect.name

    def _words_sqlite(self, terms: Sequence[str]) -> Select[Any]:
        match = " AND ".join(_fts5_string(t) + "*" for t in terms)
        fts = text("SELECT rowid, bm25(messages_fts) AS rank FROM messages_fts WHERE messages_fts MATCH :q") \
            .bindparams(q=match).columns(literal_column("rowid"), literal_column("rank")).subquery("fts")
        return self._base().join(fts, fts.c.rowid == MessageRow.id).order_by(fts.c.rank, MessageRow.id.desc())

    def _words_postgres(self, terms: Sequence[str]) -> Select[Any]:
        query = func.to_tsquery("simple", " & ".join(f"{t}:*" for t in terms))
        tsv = literal_column("messages.search_tsv")
        return self._base().where(tsv.op("@@")(query)).order_by(func.ts_rank(tsv, query).desc(),
                                                                MessageRow.id.desc())

    def _substrings(self, terms: Sequence[str]) -> Select[Any]:
        query = self._base()
        like_terms = list(terms)
        if self._dialect == "sqlite":
            # The trigram table narrows by the 3+ character terms; LIKE checks the short ones on those rows.
            long_terms = [t for t in terms if len(t) >= 3]
            if long_terms:
                match = " AND ".join(_fts5_string(t) for t in long_terms)
                ids = text("SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH :tq").bindparams(
                    tq=match).columns(literal_column("rowid"))
                query = query.where(MessageRow.id.in_(ids))
                like_terms = [t for t in terms if len(t) < 3]
            like = MessageRow.search_text.like
        else:
            # pg_trgm's GIN index serves ILIKE for terms of 3+ characters; shorter ones scan.
            like = MessageRow.search_text.ilike
        if like_terms:
            query = query.where(and_(*(like(_like_pattern(t), escape="\\") for t in like_terms)))
        return query.order_by(MessageRow.id.desc())

    @staticmethod
    def _base() -> Select[Any]:
        return select(MessageRow.session_id, MessageRow.seq, MessageRow.role, MessageRow.created_at,
                      MessageRow.active, MessageRow.search_text)

    async def search(self, query: str, *, session_id: str | None = None, limit: int = 20,
                     session_ids: Sequence[str] | None = None, skip_active_of: str | None = None,
                     redact: Callable[[str], str] | None = None) -> list[SearchHit]:
        """Messages (active or archived) containing every term of ``query``.

        ``session_id`` / ``session_ids`` restrict the search to those sessions; ``skip_active_of`` leaves out
        that session's active rows (what its model already sees) and every row of the same text. ``redact`` rewrites each message's text
        before the snippet is cut from it, so a secret is replaced whole rather than shown in part.
        """
        terms = split_terms(query)
        if not terms or limit <= 0 or (session_ids is not None and not session_ids):
            return []
        if all(_is_word(t) for t in terms):
            stmt = self._words_postgres(terms) if self._dialect == "postgresql" else self._words_sqlite(terms)
        else:
            stmt = self._substrings(terms)
        if session_id is not None:
            stmt = stmt.where(MessageRow.session_id == session_id)
        if session_ids is not None:
            stmt = stmt.where(MessageRow.session_id.in_(list(session_ids)))
        if skip_active_of is not None:
            # A row equal to an active one is a copy of it too: compaction re-inserts its verbatim tail as new
            # rows, and rotation copies it into the child, so the originals would only repeat what is seen.
            seen = aliased(MessageRow)
            stmt = stmt.where(~select(seen.id).where(seen.session_id == skip_active_of, seen.active,
                                                     seen.search_text == MessageRow.search_text).exists())
        async with read(self._engine) as conn:
            rows = list(await conn.execute(stmt.limit(limit)))
        clean = redact or (lambda body: body)
        return [SearchHit(session_id=r.session_id, seq=r.seq, role=r.role, created_at=r.created_at,
                          snippet=snippet(clean(r.search_text), terms), archived=not r.active) for r in rows]
