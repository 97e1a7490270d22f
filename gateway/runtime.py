"""What every gateway stage shares: settings, store, locks, provider, metrics and the per-session factories.

Built once by `gateway.app` (the composition root); tests build one around the fake LLM server.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from redis.asyncio import Redis

from agent.compression.engine import ContextEngine
from agent.llm.failover import FailoverProvider
from agent.llm.window import ServedWindow
from agent.memory import MemoryProvider
from agent.tokens import TokenCounter
from agent.tools.mcp_tools import McpTools
from gateway.config import Settings
from gateway.intake.arrivals import ArrivalOrder, InProcessOrder
from gateway.intake.claims import Claims, InProcessClaims
from gateway.intake.durability import StorageGuard
from gateway.intake.keys import SessionKey
from gateway.intake.locks import LockBackend
from gateway.intake.stops import LocalStops, StopRelay
from gateway.ops.metrics import Metrics
from gateway.policy.limit_backends import InProcessLimits, LimitBackend
from gateway.store import Store

__all__ = ["EngineFactory", "MemoryFactory", "Runtime", "default_worker_id", "utc_now"]

EngineFactory = Callable[[], ContextEngine]
# (session key, the speaker's user id or None for a shared group session) -> memory for that conversation
MemoryFactory = Callable[[SessionKey, str | None], MemoryProvider]


def utc_now() -> datetime:
    """The wall clock, timezone-aware."""
    return datetime.now(UTC)


def default_worker_id() -> str:
    """``<hostname>:<pid>``: unique among live workers, readable in the ledger and logs."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Runtime:
    """The gateway's dependencies, constructed in one place."""

    settings: Settings
    store: Store
    locks: LockBackend
    # The configured models (main first, then llm.fallbacks); each session calls them through its own view.
    provider: FailoverProvider
    counter: TokenCounter
    new_engine: EngineFactory
    new_memory: MemoryFactory = field(default=lambda key, user: MemoryProvider())
    clock: Callable[[], datetime] = utc_now
    model: str = ""
    engine_name: str = "compressor"
    # One per process: the router's, hygiene's, /compress's and the sweep's event sink, and /stats' source.
    metrics: Metrics = field(default_factory=Metrics)
    # Shared by all workers when Redis is configured: handled inbound ids, scheduled-run slots.
    claims: Claims = field(default_factory=InProcessClaims)
    # Arrival tickets per session, so several workers keep a session's order (in-process: the FIFO does).
    arrivals: ArrivalOrder = field(default_factory=InProcessOrder)
    # The Redis client behind ``claims`` and the polling lease (None: a single worker, nothing shared).
    redis: Redis | None = None
    worker_id: str = field(default_factory=default_worker_id)
    # Rate-limit and token-budget state: Redis when configured (shared by workers), else this process's.
    limits: LimitBackend = field(default_factory=InProcessLimits)
    # One per process: whether the database is down right now, and the retries through an outage.
    storage: StorageGuard = field(default_factory=StorageGuard)
    # The MCP servers (``tools.mcp_servers``; None: none configured), started and stopped by the gateway.
    mcp: McpTools | None = None
    # Carries /stop to the worker running the turn (in Redis when configured; one worker needs nothing).
    stops: StopRelay = field(default_factory=LocalStops)
    # The windows the main and the summary model are really served with (None: unknown, the engine's own).
    window: ServedWindow | None = None
    summary_window: ServedWindow | None = None
