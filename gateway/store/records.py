"""Immutable records the store hands out: sessions, engine state, compactions, messages, search hits.

Callers never see SQLAlchemy rows; these frozen values are the store's whole vocabulary.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = [
    "ActiveSet",
    "CompactionInfo",
    "CompactionRecord",
    "DeliveryRecord",
    "EngineState",
    "Handled",
    "InboxEntry",
    "InboxRecord",
    "MessageOrigin",
    "MessageRecord",
    "PinRecord",
    "SearchHit",
    "SessionRecord",
    "origin_columns",
]

Message = dict[str, Any]
# Where a stored message names the platform message it holds (`MessageOrigin`).
ORIGIN_KEY = "origin"


@dataclass(frozen=True, slots=True)
class MessageOrigin:
    """The platform message a stored message holds: its key (`gateway.intake.inbox.message_key`), who wrote it
    (``author``: ``platform:user id``, and their ``name``), when (``at``, ISO 8601), and where the sender's own
    text sits in the stored message's text (``span``; a request also holds a speaker tag, a group's earlier
    lines, a note). Carried in the message itself under ``"origin"`` — providers are sent only the keys they
    know, so the model never sees it — which every copy a compaction or rotation makes keeps; the store also
    writes the key and the author into the row's own columns, to find them."""

    message: str
    author: str
    name: str
    at: str
    span: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """The form kept in a message."""
        return {"message": self.message, "author": self.author, "name": self.name, "at": self.at,
                "span": list(self.span) if self.span is not None else None}

    @classmethod
    def of(cls, message: Any) -> MessageOrigin | None:
        """The origin a message carries, None when it has none (or an unreadable one)."""
        raw = message.get(ORIGIN_KEY) if isinstance(message, Mapping) else None
        if not isinstance(raw, dict) or not isinstance(raw.get("message"), str):
            return None
        span = raw.get("span")
        readable = isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span)
        return cls(raw["message"], str(raw.get("author") or ""), str(raw.get("name") or ""),
                   str(raw.get("at") or ""), (span[0], span[1]) if readable else None)


def origin_columns(message: Any) -> dict[str, str | None]:
    """The row columns ``origin`` and ``author`` of a message (None for a message no platform message became)."""
    origin = MessageOrigin.of(message)
    if origin is None:
        return {"origin": None, "author": None}
    return {"origin": origin.message[:1024], "author": origin.author[:160] or None}


@dataclass(frozen=True, slots=True)
class CompactionInfo:
    """The figures of one compaction as the engine reports them (shown by /status)."""

    at: datetime
    reason: str
    tokens_before: int
    tokens_after: int
    messages_before: int = 0
    messages_after: int = 0
    number: int | None = None
    # How many messages the active set held right after this replacement, the rows carried over included: the
    # ones after it were appended since (None: written before it was recorded).
    active_after: int | None = None

    @property
    def savings_pct(self) -> float:
        """Fraction of tokens saved, 0.0 when nothing was."""
        if self.tokens_before <= 0:
            return 0.0
        return max(0.0, 1.0 - self.tokens_after / self.tokens_before)

    def to_json(self) -> str:
        """Serialize for the session row."""
        return json.dumps({
            "at": self.at.isoformat(), "reason": self.reason, "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after, "messages_before": self.messages_before,
            "messages_after": self.messages_after, "number": self.number, "active_after": self.active_after,
        })

    @classmethod
    def from_json(cls, raw: str | None) -> CompactionInfo | None:
        """Inverse of `to_json`; None for an empty column."""
        if not raw:
            return None
        data = json.loads(raw)
        at = datetime.fromisoformat(data["at"])
        return cls(
            at=at if at.tzinfo else at.replace(tzinfo=UTC), reason=data["reason"],
            tokens_before=int(data["tokens_before"]), tokens_after=int(data["tokens_after"]),
            messages_before=int(data.get("messages_before", 0)), messages_after=int(data.get("messages_after", 0)),
            number=data.get("number"), active_after=data.get("active_after"),
        )


@dataclass(frozen=True, slots=True)
class EngineState:
    """Context-engine state that must survive a restart, so anti-thrash guards stay armed."""

    last_prompt_tokens: int = 0
    previous_summary: str | None = None
    compression_count: int = 0
    ineffective_count: int = 0
    cooldown_until: datetime | None = None
    context_length: int | None = None
    last_compaction: CompactionInfo | None = None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One conversation. ``message_count``/``token_count`` describe the ACTIVE set only."""

    id: str
    platform: str
    chat_key: str
    title: str | None
    goal: str | None
    parent_session_id: str | None
    started_at: datetime
    last_active_at: datetime
    ended_at: datetime | None
    end_reason: str | None
    message_count: int
    token_count: int
    compactions: int
    engine: EngineState = field(default_factory=EngineState)

    @property
    def active(self) -> bool:
        """True until the session is ended."""
        return self.ended_at is None


@dataclass(frozen=True, slots=True)
class ActiveSet:
    """The active messages of a session in order, and the watermark sequence they were read at.

    Pass ``watermark`` back to ``replace_active``: rows appended later have a higher sequence and are carried
    over after the compressed set.
    """

    session_id: str
    messages: list[Message]
    token_counts: list[int]
    watermark: int

    @property
    def tokens(self) -> int:
        """Exact token sum of the active messages."""
        return sum(self.token_counts)


@dataclass(frozen=True, slots=True)
class PreparedRecord:
    """What the context engine prepared for message ``seq`` of a session once it was stored (``record``, the
    engine's own text), to keep with the row — only while the row still holds ``payload``, the stored message
    it was made from: an erasure that rewrote the row meanwhile wins."""

    seq: int
    payload: str
    record: str


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A stored message with its bookkeeping (for export and inspection)."""

    session_id: str
    seq: int
    role: str
    message: Message
    tokens: int
    created_at: datetime
    active: bool
    archived_at: datetime | None
    archived_by: int | None
    compacted: bool


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """One replacement of a session's active set (a compaction or a restore)."""

    session_id: str
    number: int
    at: datetime
    reason: str
    watermark: int
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    carried: int


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One full-text search match. ``match`` says how it matched ("all words", "any word", "exact text", or
    "any word, by meaning" when a re-ranker ordered it); ``more_at`` is the character offset where the line
    the snippet was cut from goes on (None when the snippet shows its lines whole)."""

    session_id: str
    seq: int
    role: str
    created_at: datetime
    snippet: str
    archived: bool
    match: str = "all words"
    more_at: int | None = None


@dataclass(frozen=True, slots=True)
class PinRecord:
    """One pinned rule; ``number`` is its 1-based place in the chat's pins (what /unpin takes)."""

    number: int
    text: str
    tokens: int
    created_at: datetime
    created_by: str | None = None


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """One answer in the delivery ledger: where it goes, what it says, and how far it got."""

    id: int
    session_id: str | None
    platform: str
    chat_id: str
    thread_id: str | None
    reply_to: str | None
    text: str
    status: str
    created_at: datetime
    worker: str
    sent_at: datetime | None = None
    recovered_by: str | None = None


@dataclass(frozen=True, slots=True)
class InboxEntry:
    """An inbound message to keep until it is handled: its de-duplication key, its session and its payload."""

    key: str
    platform: str
    session_key: str
    payload: str
    received_at: datetime


@dataclass(frozen=True, slots=True)
class InboxRecord:
    """One inbox row: a message kept since ``received_at``, held by ``claimed_by``, handled at ``handled_at``."""

    id: int
    key: str
    platform: str
    session_key: str
    payload: str | None
    received_at: datetime
    claimed_by: str | None
    claimed_at: datetime | None
    handled_at: datetime | None


@dataclass(slots=True)
class NewAnswer:
    """An answer for the delivery ledger, written (pending) by the transaction that stores its turn.

    ``id`` is its row's id, set by that transaction: read it once the store returned. A transaction that
    failed may have set it before rolling back, so each attempt to store a turn takes a fresh one.
    """

    platform: str
    chat_id: str
    thread_id: str | None
    reply_to: str | None
    text: str
    session_id: str | None
    worker: str
    id: int | None = None


@dataclass(frozen=True, slots=True)
class Handled:
    """An inbound message marked handled in the transaction that stores what handling it produced, with the
    handling's ``answer`` written to the delivery ledger in that same transaction."""

    key: str
    platform: str
    session_key: str
    answer: NewAnswer | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    """A step of handling the inbound message ``key`` stored in the transaction that does it: the message's
    progress moves from ``start`` (what the step's attempt read) to ``to`` — or the transaction rolls back
    with `AlreadyStored` when the progress is not ``start`` any more (an earlier attempt stored the step)."""

    key: str
    platform: str
    session_key: str
    start: int
    to: int


@dataclass(frozen=True, slots=True)
class Handling:
    """How far the handling of one inbound message got, as stored: marked handled (``answer_id``: the ledger
    row of the answer stored with the mark), or ``progress`` steps made before that (see `gateway.store.inbox`)."""

    handled: bool = False
    progress: int = 0
    answer_id: int | None = None


@dataclass(frozen=True, slots=True)
class ChatSnapshot:
    """What a message's turn reads first, in one transaction: the chat's open session (None: none is open),
    its pins, and how far the handling of the message itself got (marked handled already?)."""

    session: SessionRecord | None
    pins: tuple[PinRecord, ...]
    message: Handling
