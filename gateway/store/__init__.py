"""Session store (R-S1…R-S3): sessions, messages, atomic compaction, rotation, full-text search, the
delivery ledger and the inbox.

The public surface is re-exported here; everything else in the package is an implementation detail.
"""

from gateway.store._rows import message_text, payload_of
from gateway.store.errors import (
    AlreadyStored,
    CompactionNotFound,
    PinsFull,
    SessionEnded,
    SessionNotFound,
    StaleWatermark,
    StorageUnavailable,
    StoreError,
)
from gateway.store.migrate import current_revision, downgrade_database, upgrade_database
from gateway.store.records import (
    ActiveSet,
    ChatSnapshot,
    CompactionInfo,
    CompactionRecord,
    DeliveryRecord,
    EngineState,
    Handled,
    Handling,
    InboxEntry,
    InboxRecord,
    MessageOrigin,
    MessageRecord,
    NewAnswer,
    PinRecord,
    PreparedRecord,
    Progress,
    SearchHit,
    SessionRecord,
)
from gateway.store.store import Store

__all__ = [
    "ActiveSet",
    "AlreadyStored",
    "ChatSnapshot",
    "CompactionInfo",
    "CompactionNotFound",
    "CompactionRecord",
    "DeliveryRecord",
    "EngineState",
    "Handled",
    "Handling",
    "InboxEntry",
    "InboxRecord",
    "MessageOrigin",
    "MessageRecord",
    "NewAnswer",
    "PinRecord",
    "PinsFull",
    "PreparedRecord",
    "Progress",
    "SearchHit",
    "SessionEnded",
    "SessionNotFound",
    "SessionRecord",
    "StaleWatermark",
    "StorageUnavailable",
    "Store",
    "StoreError",
    "current_revision",
    "downgrade_database",
    "message_text",
    "payload_of",
    "upgrade_database",
]
