"""The store's error tree: everything it raises on purpose derives from `StoreError`."""

from __future__ import annotations

__all__ = [
    "CompactionNotFound",
    "SessionEnded",
    "SessionNotFound",
    "StaleWatermark",
    "StorageUnavailable",
    "StoreError",
]


class StoreError(Exception):
    """Base of the store's own errors."""


class SessionNotFound(StoreError, LookupError):
    """No session has this id."""


class SessionEnded(StoreError):
    """The session was ended (idle expiry, /new, rotation); the caller should look up the open one."""


class StaleWatermark(StoreError):
    """The active set changed under the caller (another compaction or a restore committed since it read)."""


class CompactionNotFound(StoreError, LookupError):
    """The session has no compaction with that number."""


class StorageUnavailable(StoreError):
    """The database cannot be reached or created (server down, wrong host or credentials, unwritable path).

    The message names the database with its password hidden and the first line of the driver's reason.
    """


class PinsFull(StoreError):
    """A new pin would pass the chat's pin count or token limit; the message says which and by how much."""
