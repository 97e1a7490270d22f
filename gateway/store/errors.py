"""The store's error tree: everything it raises on purpose derives from `StoreError`."""

from __future__ import annotations

from gateway.store.records import Handling

__all__ = [
    "AlreadyStored",
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


class AlreadyStored(StoreError):
    """A step of handling an inbound message (its handled mark, a `Progress` step) is stored already — by an
    earlier attempt, typically one whose COMMIT reached the database while the answer to it was lost. The
    transaction that found it rolled back; ``handling`` is what is stored."""

    def __init__(self, key: str, handling: Handling) -> None:
        super().__init__(f"message {key}: already stored as {handling}")
        self.handling = handling


class CompactionNotFound(StoreError, LookupError):
    """The session has no compaction with that number."""


class StorageUnavailable(StoreError):
    """The database cannot be reached or created (server down, wrong host or credentials, unwritable path).

    The message names the database with its password hidden and the first line of the driver's reason.
    """


class PinsFull(StoreError):
    """A new pin would pass the chat's pin count or token limit; the message says which and by how much."""
