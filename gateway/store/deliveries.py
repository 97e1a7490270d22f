"""The delivery ledger's rows: record an answer before sending it, confirm it, and claim unconfirmed ones.

A worker that crashed between storing an answer and the platform's confirmation leaves a ``pending`` row.
`claim_unconfirmed` hands each such row to exactly one worker (a conditional UPDATE from ``pending`` to
``resending``: of several workers racing for a row, one changes it), which sends it once more and marks it
``sent`` (recovered) or ``failed``; a row older than the freshness window is marked ``expired`` instead.

A turn's answer is written by `insert_answer` inside the transaction that stores the turn
(`gateway.store.inbox.settle`): the turn and its answer are stored together or not at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent.storable import storable_text
from gateway.store._rows import utcnow
from gateway.store.database import read, run_write, write
from gateway.store.models import DeliveryRow
from gateway.store.records import DeliveryRecord, NewAnswer

__all__ = ["DeliveryRepository", "insert_answer"]

# Rows in status "draft" were written by earlier versions for turns that were never stored: never sent.
PENDING, RESENDING, SENT, FAILED, EXPIRED = "pending", "resending", "sent", "failed", "expired"


# Once per answer each (`insert_answer`, `mark_sent`): built once, values bound at execution.
_RECORD = insert(DeliveryRow)
_MARK_SENT = update(DeliveryRow).where(DeliveryRow.id == bindparam("delivery_id")).values(
    status=SENT, sent_at=bindparam("sent", type_=DeliveryRow.__table__.c.sent_at.type))


def _record(row: Any) -> DeliveryRecord:
    return DeliveryRecord(id=row.id, session_id=row.session_id, platform=row.platform, chat_id=row.chat_id,
                          thread_id=row.thread_id, reply_to=row.reply_to, text=row.text, status=row.status,
                          created_at=row.created_at, worker=row.worker, sent_at=row.sent_at,
                          recovered_by=row.recovered_by)


class DeliveryRepository:
    """Answers on their way to a platform."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def record(self, answer: NewAnswer, at: datetime | None = None) -> int:
        """Store an answer about to be sent (status pending) in a transaction of its own; return its id."""
        at = at or utcnow()
        return await run_write(self._engine, lambda conn: insert_answer(conn, answer, at))

    async def mark_sent(self, delivery_id: int) -> None:
        """The platform confirmed the answer."""
        at = utcnow()
        await run_write(self._engine, lambda conn: conn.execute(_MARK_SENT, {"delivery_id": delivery_id, "sent": at}))

    async def mark_failed(self, delivery_id: int) -> None:
        """The one resend of a recovered answer failed too; it is not tried again."""
        await self._set(delivery_id, FAILED)

    async def _set(self, delivery_id: int, status: str, **values: Any) -> None:
        query = update(DeliveryRow).where(DeliveryRow.id == delivery_id).values(status=status, **values)
        await run_write(self._engine, lambda conn: conn.execute(query))

    async def expire_older_than(self, cutoff: datetime) -> int:
        """Mark pending answers stored before ``cutoff`` expired (too old to send); return how many."""
        async with write(self._engine) as conn:
            result = await conn.execute(update(DeliveryRow).where(
                DeliveryRow.status == PENDING, DeliveryRow.created_at < cutoff).values(status=EXPIRED))
        return int(result.rowcount or 0)

    async def prune(self, stored_before: datetime) -> int:
        """Forget the answers stored before ``stored_before`` that are no longer pending; how many."""
        query = delete(DeliveryRow).where(DeliveryRow.status != PENDING, DeliveryRow.created_at < stored_before)
        return await run_write(self._engine, lambda conn: int(conn.execute(query).rowcount or 0))

    async def claim_unconfirmed(self, older_than: datetime, worker: str, *, platforms: Sequence[str] | None = None,
                                limit: int = 100) -> list[DeliveryRecord]:
        """Pending answers stored before ``older_than`` (on ``platforms``, when given), oldest first, each now
        claimed by ``worker`` alone (status resending); a row another worker claimed first is left out."""
        query = select(DeliveryRow.id).where(DeliveryRow.status == PENDING, DeliveryRow.created_at < older_than)
        if platforms is not None:
            query = query.where(DeliveryRow.platform.in_(platforms))
        async with read(self._engine) as conn:
            ids = list((await conn.execute(
                query.order_by(DeliveryRow.created_at, DeliveryRow.id).limit(limit))).scalars())
        claimed: list[DeliveryRecord] = []
        for delivery_id in ids:
            async with write(self._engine) as conn:
                won = await conn.execute(update(DeliveryRow).where(
                    DeliveryRow.id == delivery_id, DeliveryRow.status == PENDING)
                    .values(status=RESENDING, recovered_by=worker))
                if won.rowcount == 1:
                    row = (await conn.execute(select(DeliveryRow).where(DeliveryRow.id == delivery_id))).one()
                    claimed.append(_record(row))
        return claimed

    async def get(self, delivery_id: int) -> DeliveryRecord | None:
        """One ledger row, or None."""
        async with read(self._engine) as conn:
            row = (await conn.execute(select(DeliveryRow).where(DeliveryRow.id == delivery_id))).first()
        return _record(row) if row else None

    async def counts(self) -> dict[str, int]:
        """How many answers are in each status."""
        async with read(self._engine) as conn:
            rows = await conn.execute(select(DeliveryRow.status, func.count()).group_by(DeliveryRow.status))
            return {status: int(count) for status, count in rows}


def insert_answer(conn: Connection, answer: NewAnswer, at: datetime) -> int:
    """Inside a write transaction: store ``answer`` as pending as of ``at``; its id, also set on ``answer``."""
    values = {"session_id": answer.session_id, "platform": answer.platform, "chat_id": answer.chat_id,
              "thread_id": answer.thread_id, "reply_to": answer.reply_to, "text": storable_text(answer.text),
              "status": PENDING, "created_at": at, "worker": answer.worker}
    answer.id = int(conn.execute(_RECORD, values).inserted_primary_key[0])
    return answer.id
