"""The runtime's parts: the store (migrated when opened here), turn and job locks, claims and arrival tickets,
limits, /stop across workers, memory, and `build_runtime`, which assembles them with the models
(`gateway.app.providers`) into the `Runtime` every conversation shares; `close_runtime` releases them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from agent.llm.base import Provider
from agent.memory import FileMemoryProvider, MemoryProvider
from agent.tokens import get_counter
from agent.tools.mcp_tools import McpTools
from gateway.app.providers import (
    as_chain,
    engine_factory,
    main_provider_for,
    resolve_windows,
    secret,
    serve_fallback_windows,
    summary_provider_for,
)
from gateway.config import Settings
from gateway.conversation.windows import StoredWindows
from gateway.intake.arrivals import ArrivalOrder, InProcessOrder, RedisArrivalOrder
from gateway.intake.claims import Claims, InProcessClaims, RedisClaims
from gateway.intake.keys import SessionKey
from gateway.intake.locks import InProcessLocks, LockBackend, RedisLocks, fail_fast_client
from gateway.intake.stops import LocalStops, RedisStops
from gateway.ops.data_dir import ensure_data_dir
from gateway.ops.logsetup import set_worker
from gateway.ops.metrics import MeteredProvider, Metrics
from gateway.policy.limit_backends import InProcessLimits, LimitBackend, RedisLimits
from gateway.policy.limits import charge_summary
from gateway.runtime import Runtime, default_worker_id, utc_now
from gateway.store import Store

__all__ = ["build_runtime", "close_runtime", "open_store"]


def _memory_factory(settings: Settings) -> Callable[[SessionKey, str | None], MemoryProvider]:
    if not settings.memory.enabled:
        return lambda key, user: MemoryProvider()
    root = settings.memory.directory or settings.storage.data_dir / "memory"
    bot = settings.gateway.bot_name
    # Users and chats are namespaced by platform: the same id on two platforms is two people, two chats.
    return lambda key, user: FileMemoryProvider(root, bot, f"{key.platform}-{user}" if user else None,
                                                chat_id=f"{key.platform}-{key.shared_chat_key}" if key.is_group else None)


async def open_store(settings: Settings) -> Store:
    """The configured store, migrated (the SQLite data directory made first)."""
    if settings.storage.database_url is None:
        ensure_data_dir(settings.storage.data_dir)
    return await Store.open(settings.storage.url)


def _locks(settings: Settings, metrics: Metrics) -> LockBackend:
    url = secret(settings.redis.url)
    if url:
        return RedisLocks.from_url(url, prefix=f"{settings.redis.key_prefix}lock:",
                                   turn_ttl=settings.redis.lock_timeout_seconds,
                                   compression_ttl=settings.redis.lock_timeout_seconds,
                                   on_error=metrics.record_lock_error)
    return InProcessLocks()


def _coordination(settings: Settings, metrics: Metrics) -> tuple[Claims, ArrivalOrder, Any]:
    """Inbound de-dup, job-slot claims and arrival tickets: in Redis (shared by every worker) when configured,
    with the client they use; in-process otherwise."""
    url = secret(settings.redis.url)
    if not url:
        return InProcessClaims(), InProcessOrder(), None
    client = fail_fast_client(url)
    # A ticket nobody handled for a lock's lifetime belonged to a worker that died.
    prefix = settings.redis.key_prefix
    order = RedisArrivalOrder(client, stale_after_s=settings.redis.lock_timeout_seconds, prefix=f"{prefix}order:",
                              on_error=metrics.record_lock_error)
    return RedisClaims(client, prefix=f"{prefix}claim:", on_error=metrics.record_lock_error), order, client


def _limits(settings: Settings) -> LimitBackend:
    url = secret(settings.redis.url)
    return RedisLimits.from_url(url, prefix=f"{settings.redis.key_prefix}limits:") if url else InProcessLimits()


async def build_runtime(settings: Settings, *, provider: Provider | None = None, store: Store | None = None,
                        locks: LockBackend | None = None, summary_provider: Provider | None = None,
                        clock: Callable[[], datetime] = utc_now, limits: LimitBackend | None = None,
                        probe_windows: bool = True) -> Runtime:
    """Construct the shared dependencies; the store is migrated when this function opens it.

    ``probe_windows``: ask the LLM servers which windows they serve (False: configured, learned or table only,
    for commands that only read the store)."""
    provider = as_chain(settings, provider) if provider is not None else main_provider_for(settings)
    summary_provider = summary_provider or summary_provider_for(settings, provider)
    metrics = Metrics()
    claims, arrivals, redis = _coordination(settings, metrics)
    store = store or await open_store(settings)
    window, summary_window = await resolve_windows(settings, StoredWindows(store.chat_settings),
                                                   probe=probe_windows and settings.llm.configured)
    # The engine's calls are summaries (its main provider is only a fallback for them): metered here, since
    # only the agent loop's own calls arrive as llm:response events.
    await serve_fallback_windows(settings, provider, window, StoredWindows(store.chat_settings),
                                 probe=probe_windows and settings.llm.configured)
    # Each summary call is charged, as it returns, to whoever caused the compaction (`gateway.policy.limits`).
    new_engine = engine_factory(settings, MeteredProvider(provider, metrics, charge_summary),
                                MeteredProvider(summary_provider, metrics, charge_summary), window, summary_window)
    counter = get_counter(settings.llm.encoding)
    provider.on_chat_call = metrics.record_agent_call  # every call a conversation begins, stopped ones too
    worker_id = settings.gateway.worker_id or default_worker_id()
    set_worker(worker_id)  # the same name in every log line as in the delivery ledger and leases
    stops = LocalStops() if redis is None else RedisStops(
        redis, prefix=f"{settings.redis.key_prefix}stop:", worker=worker_id, on_error=metrics.record_lock_error)
    return Runtime(
        settings=settings, store=store, locks=locks or _locks(settings, metrics),
        provider=provider, counter=counter,
        new_engine=new_engine, new_memory=_memory_factory(settings),
        model=settings.llm.model, engine_name=settings.context.engine, clock=clock, metrics=metrics,
        claims=claims, arrivals=arrivals, redis=redis, worker_id=worker_id,
        limits=limits or _limits(settings), stops=stops, window=window, summary_window=summary_window,
        mcp=McpTools([s.spec() for s in settings.tools.mcp_servers], counter=counter)
        if settings.tools.mcp_servers else None,
    )


async def close_runtime(rt: Runtime) -> None:
    """Release everything `build_runtime` opened, the store included."""
    if rt.mcp is not None:
        await rt.mcp.aclose()
    await rt.provider.aclose()
    await rt.locks.aclose()
    await rt.arrivals.aclose()
    await rt.claims.aclose()
    await rt.limits.aclose()
    await rt.store.aclose()
