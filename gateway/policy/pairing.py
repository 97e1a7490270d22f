"""DM pairing (``gateway.dm_policy: pairing``): an unknown sender gets a one-time code, an admin approves it.

Codes and approvals live in the store's chat settings, so they survive restarts and work across workers: the
code a DM got from one worker can be approved on another. A code expires after ``gateway.pairing_code_minutes``;
a sender asking again while theirs is valid gets the same code back.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gateway.store.chat_settings import ChatSettingsRepository

__all__ = ["Pairing", "normalise_code"]

# No 0/O, 1/I/L: a code is read off one screen and typed on another.
_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
_CODES = "pairing"
_APPROVED = "approved"
_CODE = "pairing_code"


def _user_scope(user: str) -> str:
    return f"user:{user}"


def normalise_code(text: str) -> str:
    """``abcd efgh`` / ``ABCD-EFGH`` → ``ABCDEFGH``: how a code is typed must not matter."""
    return "".join(ch for ch in text.upper() if ch.isalnum())


def _pack(value: str, expires: datetime) -> str:
    return f"{value}|{expires.isoformat()}"


def _unpack(packed: str) -> tuple[str, datetime]:
    value, _, expires = packed.rpartition("|")
    return value, datetime.fromisoformat(expires)


@dataclass(frozen=True, slots=True)
class Pairing:
    """Issue and approve pairing codes for ``platform:user`` senders."""

    settings: ChatSettingsRepository
    lifetime: timedelta
    clock: Callable[[], datetime]

    async def is_approved(self, user: str) -> bool:
        """Whether an admin approved ``user``."""
        return await self.settings.get(_user_scope(user), _APPROVED) is not None

    async def code_for(self, user: str) -> str:
        """``user``'s valid pending code, or a new one (shown as ``ABCD-EFGH``)."""
        now = self.clock()
        pending = await self.settings.get(_user_scope(user), _CODE)
        if pending is not None:
            code, expires = _unpack(pending)
            if expires > now:
                return _display(code)
        code = "".join(secrets.choice(_ALPHABET) for _ in range(8))
        expires = now + self.lifetime
        await self.settings.put(_CODES, code, _pack(user, expires))
        await self.settings.put(_user_scope(user), _CODE, _pack(code, expires))
        return _display(code)

    async def approve(self, code_text: str) -> str | None:
        """Approve the sender a valid ``code`` was issued to and return them; None for an unknown or expired
        code. A code works once."""
        code = normalise_code(code_text)
        if not code:
            return None
        packed = await self.settings.take(_CODES, code)
        if packed is None:
            return None
        user, expires = _unpack(packed)
        await self.settings.take(_user_scope(user), _CODE)
        if expires <= self.clock():
            return None
        await self.settings.put(_user_scope(user), _APPROVED, self.clock().isoformat())
        return user


def _display(code: str) -> str:
    return f"{code[:4]}-{code[4:]}"
