"""Pinned rules per chat (platform + chat key): added, listed and removed; limits checked in the same write."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Connection, bindparam, delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import utcnow
from gateway.store.database import run_read, write
from gateway.store.errors import PinsFull
from gateway.store.models import PinRow
from gateway.store.records import PinRecord

__all__ = ["PinRepository", "chat_pins"]


def _chat(platform: str, chat_key: str) -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    return (PinRow.platform == platform, PinRow.chat_key == chat_key)


# Read before every message: built once, values bound at execution.
_CHAT_PINS = select(PinRow).where(PinRow.platform == bindparam("platform"),
                                  PinRow.chat_key == bindparam("chat_key")).order_by(PinRow.id)


def chat_pins(conn: Connection, platform: str, chat_key: str) -> list[PinRecord]:
    """The chat's pins, numbered from 1 in pin order, read on ``conn``."""
    rows = conn.execute(_CHAT_PINS, {"platform": platform, "chat_key": chat_key})
    return [PinRecord(number=i, text=r.text, tokens=r.tokens, created_at=r.created_at, created_by=r.created_by)
            for i, r in enumerate(rows, 1)]


class PinRepository:
    """A chat's pins in the order they were pinned. Pins belong to the chat, not to one of its sessions."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def list(self, platform: str, chat_key: str) -> list[PinRecord]:
        """The chat's pins, numbered from 1 in pin order."""
        return await run_read(self._engine, lambda conn: chat_pins(conn, platform, chat_key))

    async def add(self, platform: str, chat_key: str, text: str, tokens: int, *, max_count: int,
                  max_tokens: int, by: str | None = None) -> PinRecord:
        """Pin ``text`` (``tokens`` long) unless the chat would then hold more than ``max_count`` pins or
        ``max_tokens`` tokens of them, which raises `PinsFull` and changes nothing."""
        async with write(self._engine) as conn:
            count, used = (await conn.execute(
                select(func.count(PinRow.id), func.coalesce(func.sum(PinRow.tokens), 0))
                .where(*_chat(platform, chat_key)))).one()
            if count >= max_count:
                raise PinsFull(f"this chat already has {count} of {max_count} pins")
            if used + tokens > max_tokens:
                raise PinsFull(f"pins would take {used + tokens:,} tokens, over the limit of {max_tokens:,} "
                               f"({used:,} used)")
            at = utcnow()
            await conn.execute(insert(PinRow).values(platform=platform, chat_key=chat_key, text=text,
                                                     tokens=tokens, created_at=at, created_by=by))
        return PinRecord(number=count + 1, text=text, tokens=tokens, created_at=at, created_by=by)

    async def remove(self, platform: str, chat_key: str, number: int) -> PinRecord | None:
        """Unpin the ``number``-th pin (1-based, as `list` numbers them); None when there is no such pin."""
        if number < 1:
            return None
        async with write(self._engine) as conn:
            row = (await conn.execute(select(PinRow).where(*_chat(platform, chat_key)).order_by(PinRow.id)
                                      .offset(number - 1).limit(1))).first()
            if row is None:
                return None
            await conn.execute(delete(PinRow).where(PinRow.id == row.id))
        return PinRecord(number=number, text=row.text, tokens=row.tokens, created_at=row.created_at,
                         created_by=row.created_by)

    async def clear(self, platform: str, chat_key: str) -> int:
        """Unpin everything in the chat; return how many pins there were."""
        async with write(self._engine) as conn:
            result = await conn.execute(delete(PinRow).where(*_chat(platform, chat_key)))
        return int(result.rowcount or 0)

    async def clear_by(self, platform: str, chat_key: str, created_by: str) -> int:
        """Unpin every pin ``created_by`` (``platform:user id``) made in the chat; return how many."""
        async with write(self._engine) as conn:
            result = await conn.execute(delete(PinRow).where(*_chat(platform, chat_key), PinRow.created_by == created_by))
        return int(result.rowcount or 0)
