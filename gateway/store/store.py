"""`Store`: one database, its repositories, and an explicit lifecycle."""

from __future__ import annotations

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.chat_settings import ChatSettingsRepository
from gateway.store.compaction import CompactionRepository
from gateway.store.database import create_engine, dispose_engine, read, run_read
from gateway.store.deliveries import DeliveryRepository
from gateway.store.erasure import ErasureRepository
from gateway.store.inbox import InboxRepository, handling
from gateway.store.messages import MessageRepository
from gateway.store.migrate import upgrade_database
from gateway.store.pins import PinRepository, chat_pins
from gateway.store.records import ChatSnapshot, Handling
from gateway.store.search import MessageSearch
from gateway.store.sessions import SessionRepository, active_session

__all__ = ["Store"]


class Store:
    """The session store. ``store.sessions``, ``store.messages``, ``store.compactions``, ``store.search``,
    ``store.chat_settings``, ``store.pins``, ``store.deliveries`` (the delivery ledger), ``store.inbox``
    (inbound messages kept until handled), ``store.erasure`` (deleted messages and ``/forget``).

    Open with ``await Store.open(url)`` (migrates the database first unless ``migrate=False``) and close
    with ``await store.aclose()`` (idempotent), or use ``async with await Store.open(url) as store``.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.sessions = SessionRepository(engine)
        self.messages = MessageRepository(engine)
        self.compactions = CompactionRepository(engine)
        self.deliveries = DeliveryRepository(engine)
        self.inbox = InboxRepository(engine)
        self.chat_settings = ChatSettingsRepository(engine)
        self.pins = PinRepository(engine)
        self.erasure = ErasureRepository(engine)
        self._search = MessageSearch(engine)
        self.search = self._search.search
        self._closed = False

    @classmethod
    async def open(cls, url: str, *, migrate: bool = True, pool_size: int | None = None) -> Store:
        """Connect to ``url`` (``sqlite+aiosqlite:///…`` or ``postgresql+asyncpg://…``)."""
        if migrate:
            await upgrade_database(url)
        kwargs = {"pool_size": pool_size} if pool_size is not None else {}
        return cls(create_engine(url, **kwargs))

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    async def chat_snapshot(self, platform: str, chat_key: str, *, message_key: str | None = None) -> ChatSnapshot:
        """The chat's open session, its pins and how far the handling of ``message_key`` got, in one read
        transaction: the one read before every message's turn (one round trip on SQLite, one BEGIN on
        PostgreSQL)."""

        def snapshot(conn: Connection) -> ChatSnapshot:
            return ChatSnapshot(active_session(conn, platform, chat_key), tuple(chat_pins(conn, platform, chat_key)),
                                handling(conn, message_key) if message_key is not None else Handling())

        return await run_read(self.engine, snapshot)

    async def ping(self) -> bool:
        """True when the database answers a trivial query (readiness); raises when it cannot be reached."""
        async with read(self.engine) as conn:
            await conn.exec_driver_sql("SELECT 1")
        return True

    async def aclose(self) -> None:
        """Close every pooled connection. Safe to call twice."""
        if not self._closed:
            self._closed = True
            await dispose_engine(self.engine)

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()
