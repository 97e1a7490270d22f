"""Small values set through chat commands (a chat's persona, a paired user), keyed by (scope, name)."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store._rows import utcnow
from gateway.store.database import read, write
from gateway.store.models import ChatSettingRow

__all__ = ["ChatSettingsRepository"]

_T = ChatSettingRow.__table__


class ChatSettingsRepository:
    """Get, set and take one value; every write is one transaction, safe across workers."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        dialect = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert = dialect.insert

    async def get(self, scope: str, name: str) -> str | None:
        """The value, or None when unset."""
        async with read(self._engine) as conn:
            return (await conn.execute(select(ChatSettingRow.value).where(
                ChatSettingRow.scope == scope, ChatSettingRow.name == name))).scalar_one_or_none()

    async def put(self, scope: str, name: str, value: str) -> None:
        """Set the value (replacing any earlier one)."""
        stmt = self._insert(_T).values(scope=scope, name=name, value=value, updated_at=utcnow())
        stmt = stmt.on_conflict_do_update(index_elements=["scope", "name"],
                                          set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at})
        async with write(self._engine) as conn:
            await conn.execute(stmt)

    async def take(self, scope: str, name: str) -> str | None:
        """Remove the value and return it (None when unset); of two concurrent takes only one gets it."""
        async with write(self._engine) as conn:
            return (await conn.execute(delete(ChatSettingRow).where(
                ChatSettingRow.scope == scope, ChatSettingRow.name == name).returning(ChatSettingRow.value)
            )).scalar_one_or_none()
