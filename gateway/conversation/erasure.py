"""A deleted message, or everything one person wrote in a chat (``/forget``), leaves all Concord keeps.

Run under the session's turn lock (a deletion queues behind the message it deletes), in one chat — the
sessions of its shared chat key, per-user ones included, every session of their lineages:

1. **The message.** Every row holding it (its ``origin``: the copies compactions and rotations made keep it)
   becomes a tombstone — who wrote it, when, that it was deleted and when — keeping only a handoff summary a
   compaction merged in front of it.
2. **Its quotes.** The sender's own text of each version (the message, its edits' corrections; their rows'
   ``span``, and the inbox's kept payloads) gives the fragments to look for (`gateway.conversation.quotes.fragments`: the
   text, its lines, its distinctive tokens); they are cut out of every other row of the chat (an answer that
   repeated it, a search result, a group line passed on as context), of the delivery ledger's answers, and the
   memory files lose every entry citing the message or quoting it.
3. **Summaries.** A summary in view of an open session that covered a changed row (its coverage line) or quotes
   the text is rebuilt without a model from the messages it covered, erased ones left out — the static summary
   and the evidence ledger a compaction writes when its summary model fails (R-C8): no model is asked to
   forget, and nothing the old summary paraphrased survives. It is also the session's previous summary (the
   engine state the next compaction continues from). Summaries out of view (archived by later compactions, in
   ended sessions) are withdrawn: their coverage line and a note stay.
4. Everything is written in one transaction (`ErasureRepository.apply`); an open session whose active set
   changed is replaced, so other workers reload it. The kept inbox payloads of the messages (and of their edits
   and deletion) are emptied.
5. This worker's live sessions of the chat are dropped: the next message rebuilds them from the store, memory
   snapshot included.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from agent.compression.ledger import parse_coverage
from agent.compression.messages import content_text
from agent.compression.rebuild import rebuilt_summary, withdrawn_summary
from agent.compression.summary import summary_body
from agent.memory import MemoryEntry
from gateway.conversation.quotes import (
    MIN_QUOTE_CHARS,
    cut,
    fragments,
    is_tombstone,
    quotes,
    scrubbed,
    split_summary,
    stamp,
    tombstoned,
    with_summary,
)
from gateway.conversation.session import SessionManager
from gateway.intake.inbox import decode
from gateway.intake.keys import SessionKey
from gateway.store import MessageOrigin
from gateway.store.erasure import ChatSession, ErasableRow, Erasure, QuotingAnswer, RowRewrite

__all__ = ["ErasureReport", "ErasureRequest", "erase"]

log = logging.getLogger(__name__)

# The newest messages a rebuilt summary is made from: a summary's budget holds only the newest facts anyway.
REBUILD_ROWS = 2_000


@dataclass(frozen=True, slots=True)
class ErasureRequest:
    """What to erase in one chat: the messages ``keys`` (a platform delete), or everything ``author``
    (``platform:user id``) wrote there (``/forget``)."""

    keys: tuple[str, ...] = ()
    author: str | None = None

    @property
    def forgetting(self) -> bool:
        """Whether the author asked (or an admin asked for them) rather than a message being deleted."""
        return self.author is not None


@dataclass(frozen=True, slots=True)
class ErasureReport:
    """What an erasure changed: rows tombstoned, other rows (and ledger answers) with quotes cut out,
    summaries rebuilt or withdrawn, memory entries removed."""

    messages: int = 0
    quotes: int = 0
    summaries: int = 0
    answers: int = 0
    memory: int = 0
    # What was looked for where the erased texts may have been quoted.
    cuts: tuple[str, ...] = ()


@dataclass
class _Plan:
    """The rows an erasure rewrites, keyed by id, and the summaries it rebuilt per session."""

    rows: dict[int, tuple[ErasableRow, dict]] = field(default_factory=dict)
    rebuilt: dict[str, str] = field(default_factory=dict)
    summaries: int = 0

    def message(self, row: ErasableRow) -> dict:
        """``row``'s message as this erasure leaves it."""
        return self.rows[row.id][1] if row.id in self.rows else row.message


async def erase(sessions: SessionManager, key: SessionKey, request: ErasureRequest) -> ErasureReport:
    """Erase ``request`` in ``key``'s chat (see the module docstring); the caller holds the session's turn lock."""
    rt = sessions.rt
    store = rt.store.erasure
    now = rt.clock()
    chat = await store.sessions(key.platform, key.shared_chat_key)
    ids = [s.id for s in chat]
    marked = await store.rows_of(ids, origins=request.keys, author=request.author) if ids else []
    keys = sorted(set(request.keys) | {r.origin for r in marked if r.origin})
    kept = await (store.kept_in_chat(key.platform, key.shared_chat_key) if request.forgetting else store.kept(keys))
    kept_texts = _kept_texts(kept, request.author)
    keys = sorted(set(keys) | {k for k, _ in kept_texts})
    pins = [p.text for p in await rt.store.pins.list(key.platform, key.chat_key)
            if request.forgetting and p.created_by == request.author]
    texts = [t for r in marked if (t := _own_text(r.message))] + [t for _, t in kept_texts] + pins
    cuts = fragments(texts)
    plan = _Plan()
    for row in marked:
        if not is_tombstone(row.message):
            plan.rows[row.id] = (row, tombstoned(row.message, _tombstone(row, now, request)))
    erased = len(plan.rows)
    candidates = await store.quoting(ids, cuts) if ids else []
    for row in candidates:
        if row.id not in plan.rows and (clean := _scrubbed(row.message, cuts)) is not None:
            plan.rows[row.id] = (row, clean)
    quoted = len(plan.rows) - erased
    by_id = {s.id: s for s in chat}
    for row in sorted({r.id: r for r in (*marked, *candidates)}.values(), key=lambda r: r.id):
        await _settle_summary(sessions, plan, row, by_id, cuts, now)
    answers = [QuotingAnswer(a.id, cut(a.text, cuts)) for a in await store.quoting_answers(
        key.platform, key.chat_id, cuts) if quotes(a.text, cuts)] if cuts else []
    erasure = Erasure(rows=[RowRewrite(row.id, message, rt.counter.count_message(message))
                            for row, message in plan.rows.values()],
                      summaries=_previous_summaries(chat, plan, cuts, now),
                      inbox_keys=keys, answers=answers)
    replaced = await store.apply(erasure)
    memory = await _erase_memory(sessions, key, request, keys, marked, texts, cuts)
    if request.forgetting:
        memory += await rt.store.pins.clear_by(key.platform, key.chat_key, str(request.author))
    for session in chat:
        sessions.drop(SessionKey(key.platform, session.chat_key))
    report = ErasureReport(erased, quoted, plan.summaries, len(answers), memory, tuple(cuts))
    log.info("erasure in %s: %d message row(s) tombstoned, %d quoting row(s) cut, %d summary(ies) rebuilt or "
             "withdrawn, %d answer(s) cut, %d memory entry(ies) removed, %d active set(s) replaced", key,
             report.messages, report.quotes, report.summaries, report.answers, report.memory, len(replaced))
    return report


def _kept_texts(kept: Sequence[tuple[str, str]], author: str | None) -> list[tuple[str, str]]:
    """(the message key, the sender's text) of each kept inbound — only ``author``'s, when given."""
    found = []
    for key, payload in kept:
        try:
            inbound = decode(payload)
        except (ValueError, TypeError, KeyError):
            continue
        if author is None or f"{inbound.platform}:{inbound.user_id}" == author:
            found.append((key.split(":edit:")[0].removesuffix(":delete"), inbound.text))
    return found


def _own_text(message: dict) -> str:
    """The sender's own text in a stored message (its origin's span), '' when it has none."""
    origin = MessageOrigin.of(message)
    if origin is None or origin.span is None:
        return ""
    start, end = origin.span
    return content_text(message)[start:end]


def _tombstone(row: ErasableRow, now: datetime, request: ErasureRequest) -> str:
    origin = MessageOrigin.of(row.message)
    who = (origin.name if origin else "") or row.author or "someone"
    sent = origin.at[:16].replace("T", " ") + " UTC" if origin and origin.at else stamp(row.created_at)
    if request.forgetting:
        return f"[{who} asked to be forgotten: the message they sent {sent} was erased {stamp(now)}.]"
    return f"[{who} deleted the message they sent {sent}; it was erased {stamp(now)}.]"


def _scrubbed(message: dict, cuts: Sequence[str]) -> dict | None:
    return scrubbed(message, cuts) if cuts else None


def _lineage(session: ChatSession, by_id: dict[str, ChatSession]) -> list[str]:
    """``session`` and its ancestors: where the message numbers its summaries cite live."""
    ids, current = [], session
    while current is not None and current.id not in ids:
        ids.append(current.id)
        current = by_id.get(current.parent_session_id) if current.parent_session_id else None
    return ids


def _covers(plan: _Plan, lineage: Sequence[str], coverage: tuple[int, int] | None, before: int) -> bool:
    """Whether a summary covering ``coverage`` (unknown: every number below ``before``) in ``lineage``
    covered a row this erasure changes."""
    first, last = coverage if coverage is not None else (1, before - 1)
    return any(row.session_id in lineage and first <= row.seq <= last for row, _ in plan.rows.values())


async def _settle_summary(sessions: SessionManager, plan: _Plan, row: ErasableRow, by_id: dict[str, ChatSession],
                          cuts: Sequence[str], now: datetime) -> None:
    """Rebuild (in view of an open session) or withdraw the summary ``row`` starts with, when it covered a
    changed row or quotes an erased text."""
    summary, _ = split_summary(content_text(row.message))
    session = by_id.get(row.session_id)
    if not summary or session is None:
        return
    coverage = parse_coverage(summary_body(summary))
    lineage = _lineage(session, by_id)
    if not (quotes(summary, cuts) or _covers(plan, lineage, coverage, row.seq)):
        return
    if row.active and session.open and coverage is not None:
        fresh = await _rebuilt(sessions, plan, lineage, coverage, now)
        plan.rebuilt[session.id] = summary_body(fresh) or ""
    else:
        fresh = withdrawn_summary(coverage, _WITHDRAWN.format(when=stamp(now)))
    plan.rows[row.id] = (row, with_summary(plan.message(row), fresh))
    plan.summaries += 1


_REBUILT = ("This summary was rebuilt without a model on {when}: a message it covered was deleted. It lists what "
            "the remaining messages show; details an earlier summary held beyond them are gone (search_history and "
            "read_history still find every remaining message).")
_WITHDRAWN = ("This earlier summary was withdrawn on {when}: a message it covered was deleted. The current summary "
              "and search_history / read_history cover these messages.")


async def _rebuilt(sessions: SessionManager, plan: _Plan, lineage: Sequence[str], coverage: tuple[int, int],
                   now: datetime) -> str:
    """The handoff text of a summary of ``coverage`` in ``lineage`` rebuilt from its messages as this erasure
    leaves them (erased ones left out)."""
    rt = sessions.rt
    rows = await rt.store.erasure.between(lineage, coverage[0], coverage[1], REBUILD_ROWS)
    kept = [(row.seq, message) for row in rows if not is_tombstone(message := plan.message(row))]
    engine = rt.new_engine()  # the budgets a compaction of this conversation has now: its served window's
    return rebuilt_summary([m for _, m in kept], [n for n, _ in kept], coverage=coverage,
                           note=_REBUILT.format(when=stamp(now)), context_length=engine.context_length,
                           threshold_tokens=engine.threshold_tokens, counter=rt.counter, today=now.date())


def _previous_summaries(chat: Sequence[ChatSession], plan: _Plan, cuts: Sequence[str],
                        now: datetime) -> dict[str, str]:
    """The new previous summary (engine state) of each session whose own one covered or quotes what is erased:
    the rebuilt summary in view, or a withdrawn one."""
    by_id = {s.id: s for s in chat}
    out = dict(plan.rebuilt)
    for session in chat:
        previous = session.previous_summary
        if session.id in out or not previous:
            continue
        coverage = parse_coverage(previous)
        if quotes(previous, cuts) or (coverage is not None and _covers(plan, _lineage(session, by_id), coverage, 0)):
            out[session.id] = summary_body(withdrawn_summary(coverage, _WITHDRAWN.format(when=stamp(now)))) or ""
    return out


async def _erase_memory(sessions: SessionManager, key: SessionKey, request: ErasureRequest, keys: Sequence[str],
                        marked: Sequence[ErasableRow], texts: Sequence[str], cuts: Sequence[str]) -> int:
    """Remove the memory entries citing an erased message or quoting it, from the chat's, the bot's and each
    author's files."""
    chat_prefix = _message_prefix(key)
    flat_texts = [" ".join(t.split()) for t in texts]
    wanted = set(keys)

    def drop(entry: MemoryEntry) -> bool:
        if entry.message is not None and (entry.message in wanted or (
                request.author is not None and entry.ref == request.author and entry.message.startswith(chat_prefix))):
            return True
        flat = " ".join(entry.text.split())
        return quotes(entry.text, cuts) or (len(flat) >= MIN_QUOTE_CHARS and any(flat in t for t in flat_texts))

    authors = {r.author for r in marked if r.author} | ({request.author} if request.author else set())
    users = sorted({a.partition(":")[2] for a in authors if a.startswith(f"{key.platform}:")}) or [None]
    removed = 0
    for user in users:
        removed += await sessions.rt.new_memory(key, user).erase(drop)
    return removed


def _message_prefix(key: SessionKey) -> str:
    """How the keys of the chat's messages start (`gateway.intake.inbox.message_key`)."""
    kind, _, rest = key.shared_chat_key.partition(":")
    chat, _, thread = rest.partition(":") if kind == "thread" else (rest, "", "")
    return f"inbound:{key.platform}:{chat}:{thread}:"
