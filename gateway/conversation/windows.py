"""Learned context windows kept in the database, so a restart starts from what the server said last time.

The agent learns a model's real window from its server (an overflow error that states it, a prompt the server
silently truncated) and hands it to a `WindowStore`; this one keeps it in the small key/value table
(``chat_settings``, scope ``served-window``), one row per base URL and model, shared by every worker.
"""

from __future__ import annotations

import json

from agent.llm.window import WindowStore
from gateway.store.chat_settings import ChatSettingsRepository

__all__ = ["StoredWindows"]

SCOPE = "served-window"


class StoredWindows(WindowStore):
    """`WindowStore` over the ``chat_settings`` table."""

    def __init__(self, settings: ChatSettingsRepository) -> None:
        self._settings = settings

    async def recall(self, key: str) -> tuple[int, str] | None:
        """The window learned for ``key`` and how (None when none was, or the row is unreadable)."""
        raw = await self._settings.get(SCOPE, key)
        try:
            data = json.loads(raw) if raw else None
            tokens, source = int(data["tokens"]), str(data["source"])
        except (ValueError, TypeError, KeyError):
            return None
        return (tokens, source) if tokens > 0 else None

    async def remember(self, key: str, tokens: int, source: str) -> None:
        """Keep ``tokens`` for ``key``; a smaller window another worker stored meanwhile is kept."""
        known = await self.recall(key)
        if known is not None and known[0] <= tokens:
            return
        await self._settings.put(SCOPE, key, json.dumps({"tokens": tokens, "source": source}))
