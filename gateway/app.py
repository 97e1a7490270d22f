"""The composition root: every concrete part of Concord is named and wired here, and only here.

`build_runtime` turns `Settings` into the shared dependencies (store with migrations applied, locks, LLM
provider, engine and memory factories); `Gateway` adds the router, scheduler and adapters and owns start-up
and graceful shutdown. `run_gateway` (``concord run``) and `run_sweep` (``concord sweep``) are the
command-line entry points. Any part can be passed in pre-built, which is how tests use a fake LLM server and
scripted adapters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from rich.progress import Progress as RichProgress

from adapters.base import Adapter
from adapters.console import ConsoleAdapter, input_is_empty
from agent.compression.engine import ContextEngine
from agent.compression.registry import resolve_engine_factory
from agent.llm.base import Provider
from agent.llm.failover import FailoverProvider, ModelRoute
from agent.llm.models import (
    ProviderSpec,
    build_provider,
    build_provider_from_spec,
    context_length_for,
    resolve_auxiliary,
    spec_from,
)
from agent.llm.window import ServedWindow, WindowStore, resolve_served_window
from agent.memory import FileMemoryProvider, MemoryProvider
from agent.tokens import get_counter
from agent.tools.mcp_tools import McpTools
from gateway.config import Settings, summary_deadline_seconds
from gateway.conversation.scheduler import GatewayScheduler, claim_sweep_slot
from gateway.conversation.session import SessionManager
from gateway.conversation.status_commands import StatusFigures, status_figures
from gateway.conversation.sweep import SweepReport, expire_idle, print_sweep_report, sweep
from gateway.conversation.windows import StoredWindows
from gateway.delivery.delivery import Deliveries
from gateway.intake.arrivals import ArrivalOrder, InProcessOrder, RedisArrivalOrder
from gateway.intake.claims import Claims, InProcessClaims, RedisClaims
from gateway.intake.inbox import Inbox
from gateway.intake.keys import SessionKey
from gateway.intake.lease import Lease, RedisLease, SoleLease
from gateway.intake.locks import InProcessLocks, LockBackend, RedisLocks, fail_fast_client
from gateway.intake.stops import LocalStops, RedisStops
from gateway.ops.data_dir import ensure_data_dir, hold_sqlite_lock, sqlite_path
from gateway.ops.health import HealthServer, ReadinessCheck
from gateway.ops.heartbeat import beat
from gateway.ops.logsetup import set_worker
from gateway.ops.metrics import MeteredProvider, Metrics
from gateway.policy.limit_backends import InProcessLimits, LimitBackend, RedisLimits
from gateway.policy.limits import charge_summary
from gateway.router import Router
from gateway.runtime import Runtime, default_worker_id, utc_now
from gateway.store import Store

__all__ = [
    "Gateway",
    "SweepSlotTaken",
    "build_adapters",
    "build_runtime",
    "check_engine",
    "llm_setup_help",
    "main_provider_for",
    "print_sweep_report",
    "resolve_windows",
    "run_gateway",
    "run_sweep",
    "session_status",
    "summary_deadline_seconds",
    "summary_provider_for",
    "with_stored_window",
]

log = logging.getLogger(__name__)

EXIT_NOT_CONFIGURED = 2
# A platform could not be reached at start-up or its connection cannot be recovered: exit so that the service
# manager (systemd Restart=on-failure, docker restart policies) starts a fresh process.
EXIT_PLATFORM_FAILED = 1
NO_PLATFORM_HELP = ("concord: error: no platform is configured (set CONCORD_DISCORD__TOKEN or "
                    "CONCORD_TELEGRAM__TOKEN) and stdin gave no input for the console; run it in a terminal or pipe "
                    "messages in")
SHUTDOWN_GRACE_SECONDS = 30.0


def llm_setup_help() -> str:
    """What to set when no LLM is configured (printed by ``concord run`` instead of a traceback)."""
    return "\n".join([
        "concord: error: no LLM is configured, so there is nobody to answer.",
        "",
        "Set these (environment, .env or config.yaml under `llm:`):",
        "  CONCORD_LLM__BASE_URL   the OpenAI-compatible endpoint, e.g. https://api.openai.com/v1",
        "  CONCORD_LLM__MODEL      the model name, e.g. gpt-4o-mini",
        "  CONCORD_LLM__API_KEY    the API key (not needed for most local servers)",
        "  CONCORD_LLM__PROVIDER   openai (default, any OpenAI-compatible server) or anthropic",
        "",
        "A local OpenAI-compatible server works too, no key needed:",
        "  llama.cpp:  llama-server -m model.gguf --port 8080",
        "              CONCORD_LLM__BASE_URL=http://127.0.0.1:8080/v1 CONCORD_LLM__MODEL=local",
        "  Ollama:     ollama serve; ollama pull qwen2.5",
        "              CONCORD_LLM__BASE_URL=http://127.0.0.1:11434/v1 CONCORD_LLM__MODEL=qwen2.5",
        "  vLLM:       vllm serve Qwen/Qwen2.5-7B-Instruct",
        "              CONCORD_LLM__BASE_URL=http://127.0.0.1:8000/v1 CONCORD_LLM__MODEL=Qwen/Qwen2.5-7B-Instruct",
        "Concord asks the server which window it serves the model with (vLLM, llama.cpp, Ollama, LM Studio);",
        "set CONCORD_LLM__CONTEXT_LENGTH for a server that does not say (the smaller of the two is used).",
    ])


def _secret(value: object) -> str | None:
    getter = getattr(value, "get_secret_value", None)
    return getter() if callable(getter) else None


def _provider_options(settings: Settings, base_url: str | None, timeout: float | None = None) -> dict[str, Any]:
    caching = settings.prompt_caching
    return {
        "timeout": timeout or settings.llm.timeout_seconds,
        # A base URL of one's own is usually a local server (llama.cpp, Ollama, vLLM) that wants no key.
        "require_api_key": base_url is None,
        # None: on where the route accepts cache_control (R-K2); False: the operator switched it off.
        "prompt_caching": None if caching.enabled else False,
        "cache_ttl": caching.cache_ttl,
    }


def main_provider_for(settings: Settings) -> FailoverProvider:
    """The configured models as one provider: the main model (``llm.*``, ``prompt_caching.*``) and the
    ``llm.fallbacks`` it fails over to, each with its own endpoint, key, window and deadline."""
    llm = settings.llm
    main = build_provider(llm.provider, llm.base_url, _secret(llm.api_key), llm.model,
                          **_provider_options(settings, llm.base_url))
    routes = [_main_route(settings, main)]
    for fallback in llm.fallbacks:
        spec = resolve_auxiliary(llm, fallback)
        provider = build_provider_from_spec(spec, **_provider_options(settings, spec.base_url,
                                                                      fallback.timeout_seconds))
        routes.append(ModelRoute(fallback.label, provider, context_length_for(spec.model, spec.context_length),
                                 fallback.max_tokens))
    return FailoverProvider(routes, cooldown_seconds=llm.fallback_cooldown_seconds)


def _main_route(settings: Settings, provider: Provider) -> ModelRoute:
    llm = settings.llm
    return ModelRoute(llm.model or provider.model or "main", provider, context_length_for(llm.model, llm.context_length),
                      llm.max_tokens)


async def _serve_fallback_windows(settings: Settings, chain: FailoverProvider, main: ServedWindow,
                                  store: WindowStore, *, probe: bool) -> None:
    """Each configured model's window as its server serves it: the main one's is ``main``; each fallback's is
    asked of its own server (configured, learned or from the table when it does not say)."""
    windows = [main]
    for fallback in settings.llm.fallbacks[: len(chain.routes) - 1]:
        spec = resolve_auxiliary(settings.llm, fallback)
        windows.append(await resolve_served_window(spec, store=store, probe=probe))
        log.info("context window of the fallback %s: %s", fallback.label, windows[-1].describe())
    chain.serve_windows(windows)


def _as_chain(settings: Settings, provider: Provider) -> FailoverProvider:
    """``provider`` as a chain of models (a pre-built one, as tests pass, is the main model alone)."""
    if isinstance(provider, FailoverProvider):
        return provider
    return FailoverProvider([_main_route(settings, provider)], cooldown_seconds=settings.llm.fallback_cooldown_seconds)


def summary_provider_for(settings: Settings, main: Provider | None = None) -> Provider:
    """The summary model's provider (``auxiliary.compression``, falling back to ``llm``); ``main`` is reused
    when the summary model is the main model with the same deadline."""
    spec = resolve_auxiliary(settings.llm, settings.auxiliary.compression)
    timeout = settings.auxiliary.compression.timeout_seconds
    if main is not None and spec.model == settings.llm.model and timeout in (None, settings.llm.timeout_seconds):
        return main
    return build_provider_from_spec(spec, **_provider_options(settings, spec.base_url, timeout))


def _same_endpoint(a: ProviderSpec, b: ProviderSpec) -> bool:
    return (a.provider, a.model, a.effective_base_url) == (b.provider, b.model, b.effective_base_url)


async def resolve_windows(settings: Settings, store: WindowStore | None = None, *,
                          probe: bool = True, announce: bool = True) -> tuple[ServedWindow, ServedWindow]:
    """The windows the main and the summary model are served with (the same object when they are the same
    model at the same endpoint), each logged once (``announce``) with how it is known."""
    main_spec = spec_from(settings.llm)
    aux_spec = resolve_auxiliary(settings.llm, settings.auxiliary.compression)
    main = await resolve_served_window(main_spec, store=store, probe=probe)
    summary = main if _same_endpoint(aux_spec, main_spec) else \
        await resolve_served_window(aux_spec, store=store, probe=probe)
    if announce:
        log.info("context window of %s: %s", main_spec.model or "the model", main.describe())
        if summary is not main:
            log.info("context window of the summary model %s: %s", aux_spec.model, summary.describe())
    return main, summary


async def check_engine(settings: Settings) -> None:
    """Build one engine with the windows known without asking any server, so an unknown context.engine or
    a far too small summary model (R-C9) stops start-up with one line before any request is sent."""
    window, summary_window = await resolve_windows(settings, probe=False, announce=False)
    provider = main_provider_for(settings)
    summary = summary_provider_for(settings, provider)
    try:
        _engine_factory(settings, provider, summary, window, summary_window)
    finally:
        await provider.aclose()
        await summary.aclose()


def _engine_factory(settings: Settings, provider: Provider, summary: Provider, window: ServedWindow,
                    summary_window: ServedWindow) -> Callable[[], ContextEngine]:
    llm, comp = settings.llm, settings.compression
    factory = resolve_engine_factory(settings.context.engine)

    def build() -> ContextEngine:
        # Read at every build: a window learned meanwhile (an overflow error) applies to new sessions too.
        return factory(
            context_length=window.tokens, threshold=comp.threshold, target_ratio=comp.target_ratio,
            protect_first_n=comp.protect_first_n, protect_last_n=comp.protect_last_n,
            max_tokens=llm.max_tokens, reserve_output=True, summary_provider=summary,
            main_provider=provider, summary_context_length=summary_window.tokens, summary_window=summary_window,
            abort_on_summary_failure=comp.abort_on_summary_failure, encoding=llm.encoding,
            provider_name=llm.provider, model=llm.model, autoraise=comp.autoraise,
            summary_deadline_seconds=summary_deadline_seconds(settings),
        )

    # Build one engine now, so an unknown context.engine or a far too small summary model (R-C9) stops
    # start-up with a clear message instead of failing on the first message of every chat.
    build()
    return build


def _memory_factory(settings: Settings) -> Callable[[SessionKey, str | None], MemoryProvider]:
    if not settings.memory.enabled:
        return lambda key, user: MemoryProvider()
    root = settings.memory.directory or settings.storage.data_dir / "memory"
    bot = settings.gateway.bot_name
    # Users and chats are namespaced by platform: the same id on two platforms is two people, two chats.
    return lambda key, user: FileMemoryProvider(root, bot, f"{key.platform}-{user}" if user else None,
                                                chat_id=f"{key.platform}-{key.shared_chat_key}" if key.is_group else None)


async def _open_store(settings: Settings) -> Store:
    if settings.storage.database_url is None:
        ensure_data_dir(settings.storage.data_dir)
    return await Store.open(settings.storage.url)


def _locks(settings: Settings, metrics: Metrics) -> LockBackend:
    url = _secret(settings.redis.url)
    if url:
        return RedisLocks.from_url(url, prefix=f"{settings.redis.key_prefix}lock:",
                                   turn_ttl=settings.redis.lock_timeout_seconds,
                                   compression_ttl=settings.redis.lock_timeout_seconds,
                                   on_error=metrics.record_lock_error)
    return InProcessLocks()


def _coordination(settings: Settings, metrics: Metrics) -> tuple[Claims, ArrivalOrder, Any]:
    """Inbound de-dup, job-slot claims and arrival tickets: in Redis (shared by every worker) when configured,
    with the client they use; in-process otherwise."""
    url = _secret(settings.redis.url)
    if not url:
        return InProcessClaims(), InProcessOrder(), None
    client = fail_fast_client(url)
    # A ticket nobody handled for a lock's lifetime belonged to a worker that died.
    prefix = settings.redis.key_prefix
    order = RedisArrivalOrder(client, stale_after_s=settings.redis.lock_timeout_seconds, prefix=f"{prefix}order:",
                              on_error=metrics.record_lock_error)
    return RedisClaims(client, prefix=f"{prefix}claim:", on_error=metrics.record_lock_error), order, client


def _limits(settings: Settings) -> LimitBackend:
    url = _secret(settings.redis.url)
    return RedisLimits.from_url(url, prefix=f"{settings.redis.key_prefix}limits:") if url else InProcessLimits()


async def build_runtime(settings: Settings, *, provider: Provider | None = None, store: Store | None = None,
                        locks: LockBackend | None = None, summary_provider: Provider | None = None,
                        clock: Callable[[], datetime] = utc_now, limits: LimitBackend | None = None,
                        probe_windows: bool = True) -> Runtime:
    """Construct the shared dependencies; the store is migrated when this function opens it.

    ``probe_windows``: ask the LLM servers which windows they serve (False: configured, learned or table only,
    for commands that only read the store)."""
    provider = _as_chain(settings, provider) if provider is not None else main_provider_for(settings)
    summary_provider = summary_provider or summary_provider_for(settings, provider)
    metrics = Metrics()
    claims, arrivals, redis = _coordination(settings, metrics)
    store = store or await _open_store(settings)
    window, summary_window = await resolve_windows(settings, StoredWindows(store.chat_settings),
                                                   probe=probe_windows and settings.llm.configured)
    # The engine's calls are summaries (its main provider is only a fallback for them): metered here, since
    # only the agent loop's own calls arrive as llm:response events.
    await _serve_fallback_windows(settings, provider, window, StoredWindows(store.chat_settings),
                                  probe=probe_windows and settings.llm.configured)
    # Each summary call is charged, as it returns, to whoever caused the compaction (`gateway.policy.limits`).
    new_engine = _engine_factory(settings, MeteredProvider(provider, metrics, charge_summary),
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


def build_adapters(settings: Settings) -> list[Adapter]:
    """Every platform with a token configured; the console when there is none."""
    adapters: list[Adapter] = []
    discord_token = _secret(settings.discord.token)
    if discord_token:
        from adapters.discord_adapter import DiscordAdapter, DiscordSettings

        d = settings.discord
        adapters.append(DiscordAdapter(DiscordSettings(
            token=discord_token, allow_bots=d.allow_bots, admin_role_ids=tuple(int(i) for i in d.admin_role_ids),
            admin_role_names=tuple(d.admin_role_names), slash_commands=d.slash_commands, streaming=d.streaming,
            max_image_bytes=d.max_image_bytes, drain_seconds=d.drain_seconds,
            shard_count=d.shard_count, shard_ids=tuple(d.shard_ids))))
    telegram_token = _secret(settings.telegram.token)
    if telegram_token:
        from adapters.telegram_adapter import TelegramAdapter, TelegramSettings

        t = settings.telegram
        adapters.append(TelegramAdapter(TelegramSettings(
            token=telegram_token, api_base_url=t.api_base_url, mode=t.mode, webhook_url=t.webhook_url,
            webhook_listen=t.webhook_listen, webhook_port=t.webhook_port, webhook_path=t.webhook_path,
            webhook_secret=_secret(t.webhook_secret), check_chat_admins=t.check_chat_admins,
            admin_cache_seconds=t.admin_cache_seconds, drain_seconds=t.drain_seconds, parse_mode=t.parse_mode,
            streaming=t.streaming,
            # With Redis several workers may run: only the holder of the polling lease polls.
            poll_on_start=not (t.mode == "polling" and _secret(settings.redis.url)))))
    if not adapters:
        adapters.append(ConsoleAdapter(bot_name=settings.gateway.bot_name,
                                       history_path=settings.storage.data_dir / "console_history"))
    return adapters


@dataclass
class Gateway:
    """Router + scheduler + adapters over one runtime, with an explicit start / aclose lifecycle."""

    rt: Runtime
    adapters: Sequence[Adapter]
    sessions: SessionManager = field(init=False)
    router: Router = field(init=False)
    scheduler: GatewayScheduler = field(init=False)
    deliveries: Deliveries = field(init=False)
    inbox: Inbox = field(init=False)
    health: HealthServer | None = field(init=False, default=None)
    _started: list[Adapter] = field(init=False, default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)
    # Stops the background loops that talk to Redis (never cancelled mid-call: `gateway.intake.background`).
    _stopping: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _closed: bool = field(init=False, default=False)
    _heartbeat: asyncio.Task[None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        settings = self.rt.settings
        self.sessions = SessionManager(self.rt)
        self.deliveries = Deliveries.for_runtime(self.rt)
        self.inbox = Inbox.for_runtime(self.rt)
        self.router = Router(self.sessions, deliveries=self.deliveries, inbox=self.inbox)
        gw = settings.gateway
        self.scheduler = GatewayScheduler(
            expire_idle=partial(expire_idle, self.sessions), sweep=partial(sweep, self.sessions),
            idle_expiry_minutes=gw.idle_expiry_minutes, sweep_cron=gw.sweep_cron,
            recover_deliveries=self.recover_deliveries,
            recovery_seconds=min(60.0, max(1.0, settings.delivery.resend_after_seconds / 2)),
            # A third of the staleness window: a live worker renews its claims well before they look stale.
            recover_inbox=self.recover_inbox, inbox_seconds=max(1.0, settings.inbox.stale_after_seconds / 3),
            claims=self.rt.claims)
        port = settings.metrics.port
        if port is not None:
            self.health = HealthServer(self.rt.metrics.instruments.registry, self._readiness_checks(),
                                       listen=settings.metrics.listen, port=port)

    async def start(self) -> None:
        """Serve health checks, start the scheduler, connect every adapter, then resend the answers and handle
        the messages a crash left."""
        if self.health is not None:
            await self.health.start()
        if self.rt.mcp is not None:  # before the adapters, so the first messages find the tools
            await self.rt.mcp.start()
        self.scheduler.start()
        heartbeat = self.rt.settings.gateway.heartbeat_file
        if heartbeat is not None:
            self._heartbeat = asyncio.create_task(beat(heartbeat), name="heartbeat")
        for adapter in self.adapters:
            if isinstance(adapter, ConsoleAdapter):
                adapter.on_interrupt = self.router.cancel
            adapter.keep = self.inbox.keep if adapter.redelivers else self.inbox.keep_or_spool
            await adapter.start(partial(self.router.handle, adapter=adapter))
            self._started.append(adapter)
            log.info("adapter %s started", adapter.name)
            lease = self._polling_lease(adapter)
            if lease is not None:
                self._tasks.append(asyncio.create_task(
                    lease.hold(adapter.start_polling, adapter.stop_polling,  # type: ignore[attr-defined]
                               self._stopping), name=f"lease:{adapter.name}"))
        await self.recover_deliveries()
        await self.recover_inbox()

    async def recover_deliveries(self) -> None:
        """Send once more the answers a crashed worker stored but never had confirmed (logged, never raises)."""
        try:
            await self.deliveries.recover({a.name: a for a in self._started})
        except Exception as exc:
            log.warning("delivery recovery failed (%s); it runs again on schedule", type(exc).__name__)

    async def recover_inbox(self) -> None:
        """Handle the messages a stopped worker kept in the inbox but never handled (logged, never raises)."""
        adapters = {a.name: a for a in self._started}
        try:
            taken = await self.inbox.recover(tuple(adapters))
        except Exception as exc:
            log.warning("inbox recovery failed (%s); it runs again on schedule", type(exc).__name__)
            return
        for inbound in taken:
            adapters[inbound.platform].replay(inbound)

    def _polling_lease(self, adapter: Adapter) -> Lease | None:
        """The lease a polling Telegram adapter polls under when several workers may run."""
        settings = getattr(adapter, "settings", None)
        if getattr(settings, "poll_on_start", True) or not hasattr(adapter, "start_polling"):
            return None
        if self.rt.redis is None:
            return SoleLease()
        return RedisLease(self.rt.redis, f"{self.rt.settings.redis.key_prefix}lease:{adapter.name}-polling",
                          holder=self.rt.worker_id,
                          ttl_s=self.rt.settings.telegram.polling_lease_seconds,
                          on_error=self.rt.metrics.record_lock_error)

    def _readiness_checks(self) -> list[ReadinessCheck]:
        checks = [ReadinessCheck("database", self.rt.store.ping)]
        if self.rt.redis is not None:
            checks.append(ReadinessCheck("redis", self.rt.claims.ping))
        for adapter in self.adapters:
            checks.append(ReadinessCheck(f"adapter:{adapter.name}", partial(_connected, adapter)))
        return checks

    async def wait_closed(self) -> None:
        """Return when the console's input has ended (platform adapters run until a signal)."""
        consoles = [a for a in self.adapters if isinstance(a, ConsoleAdapter)]
        if consoles:
            await asyncio.gather(*(c.wait_closed() for c in consoles))
        else:
            await asyncio.Event().wait()

    async def wait_failed(self) -> str:
        """Return, with a one-line reason, once any started adapter's connection is lost for good."""
        waits = {asyncio.ensure_future(adapter.wait_failed()): adapter for adapter in self._started}
        if not waits:
            await asyncio.Event().wait()
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        first = done.pop()
        return f"{waits[first].name}: {first.result()}"

    async def aclose(self, grace_seconds: float = SHUTDOWN_GRACE_SECONDS) -> None:
        """Finish in-flight turns (up to ``grace_seconds``), then disconnect and release everything."""
        if self._closed:
            return
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await self.scheduler.aclose()
        # Intake stops first: a message fetched now could no longer be handled, and Telegram would count it
        # as delivered. Adapters keep sending, so the turns in flight still answer.
        for adapter in self._started:
            try:
                await adapter.stop_receiving()
            except Exception:
                log.warning("adapter %s: stop_receiving failed", adapter.name, exc_info=True)
        self._stopping.set()  # polling has stopped: the lease is released so another worker takes over now
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.router.aclose(grace_seconds)
        for adapter in reversed(self._started):
            with contextlib.suppress(Exception):
                await adapter.stop()
        if self.health is not None:
            await self.health.aclose()
        self.inbox.close()
        await _close_runtime(self.rt)


async def _connected(adapter: Adapter) -> bool:
    return adapter.connected


async def run_gateway(settings: Settings) -> int:
    """``concord run``: serve every configured adapter until SIGINT/SIGTERM (or the console's end of input).

    A signal during start-up (waiting for the database, migrating, retrying an unreachable platform) cancels
    the start-up at once and exits 0; once serving, it stops intake and lets the turns in flight finish."""
    if not settings.llm.configured:
        print(llm_setup_help(), file=sys.stderr)
        return EXIT_NOT_CONFIGURED
    stop = asyncio.Event()
    database = sqlite_path(settings.storage.url)
    with _stop_on_signals(stop), contextlib.ExitStack() as held:
        if database is not None and settings.redis.url is None:
            ensure_data_dir(database.parent)
            held.enter_context(hold_sqlite_lock(database))
        starting = asyncio.create_task(_start(settings), name="start-up")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not starting.done():
            starting.cancel()  # each step closes what it opened
        try:
            gateway = await starting
        except asyncio.CancelledError:
            if not stop.is_set():
                raise
            log.info("stopped by a signal during start-up")
            return 0
        except ConnectionError as exc:
            log.error("cannot start: %s", exc)
            return EXIT_PLATFORM_FAILED
        if gateway is None:
            print(NO_PLATFORM_HELP, file=sys.stderr)
            return EXIT_NOT_CONFIGURED
        return await _serve(gateway, stop)


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` while inside (where the event loop supports signal handlers)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)


async def _start(settings: Settings) -> Gateway | None:
    """Build the runtime and adapters and start them; None when the console has no input to read.

    Cancellable at every step: what was opened is closed before the cancellation goes on."""
    await check_engine(settings)
    store = await _open_store(settings)  # a storage problem is reported before the console's input
    try:
        adapters = build_adapters(settings)
        if any(isinstance(a, ConsoleAdapter) for a in adapters) and input_is_empty():
            # Under Docker or systemd stdin is /dev/null: a clean exit there would only be restarted, silently.
            await store.aclose()
            return None
        runtime = await build_runtime(settings, store=store)
    except BaseException:
        await store.aclose()
        raise
    try:
        gateway = Gateway(runtime, adapters)
    except BaseException:
        await _close_runtime(runtime)
        raise
    try:
        await gateway.start()
    except BaseException:
        await gateway.aclose()
        raise
    return gateway


async def _close_runtime(rt: Runtime) -> None:
    if rt.mcp is not None:
        await rt.mcp.aclose()
    await rt.provider.aclose()
    await rt.locks.aclose()
    await rt.arrivals.aclose()
    await rt.claims.aclose()
    await rt.limits.aclose()
    await rt.store.aclose()


async def _serve(gateway: Gateway, stop: asyncio.Event) -> int:
    """Run the started ``gateway`` until ``stop`` is set or the console ends; exit 2 when the console never got a
    line, 1 when a platform connection cannot be recovered."""
    status = 0
    try:
        closed = asyncio.create_task(gateway.wait_closed())
        stopping = asyncio.create_task(stop.wait())
        failed = asyncio.create_task(gateway.wait_failed())
        await asyncio.wait({closed, stopping, failed}, return_when=asyncio.FIRST_COMPLETED)
        for task in (closed, stopping, failed):
            task.cancel()
        if stop.is_set():
            log.info("signal received: finishing in-flight turns")
        elif failed.done() and not failed.cancelled():
            log.error("platform connection lost for good (%s); exiting so the service manager restarts Concord",
                      failed.result())
            status = EXIT_PLATFORM_FAILED
    finally:
        await gateway.aclose()
    if not stop.is_set() and any(isinstance(a, ConsoleAdapter) and not a.interactive and not a.received_input
                                 for a in gateway.adapters):
        # A pipe that closed without a line (`true | concord run`): nobody is there either.
        print(NO_PLATFORM_HELP, file=sys.stderr)
        return EXIT_NOT_CONFIGURED
    return status


class SweepSlotTaken(Exception):
    """``concord sweep`` found this run of ``gateway.sweep_cron`` already swept by another process."""

    def __init__(self, slot: str) -> None:
        super().__init__(f"the sweep of {slot} (gateway.sweep_cron) already ran in another process")
        self.slot = slot


async def run_sweep(settings: Settings, dry_run: bool = False, *, show_progress: bool = True,
                    force: bool = False) -> SweepReport:
    """``concord sweep [--dry-run] [--force]``: one hygiene sweep with a progress bar; print the report with
    `print_sweep_report`. Without an LLM configured only a dry run is possible.

    With Redis and ``gateway.sweep_cron`` set, the sweep first claims the schedule's current run, exactly as
    the workers' scheduler does, and raises `SweepSlotTaken` when a worker (or another ``concord sweep``) has
    swept it already — unless ``force``. A dry run changes nothing and claims nothing."""
    if not settings.llm.configured and not dry_run:
        raise RuntimeError("no LLM configured: a sweep needs the summary model (use --dry-run to only list)")
    rt = await build_runtime(settings, provider=None if settings.llm.configured else _NoProvider())
    try:
        cron = settings.gateway.sweep_cron
        if rt.redis is not None and cron and not (dry_run or force):
            slot, claimed = await claim_sweep_slot(rt.claims, cron)
            if not claimed:
                raise SweepSlotTaken(slot)
            log.info("sweep: claimed the run of %s", slot)
        sessions = SessionManager(rt)
        if not show_progress:
            return await sweep(sessions, dry_run=dry_run)
        with RichProgress(transient=True) as bar:
            task = bar.add_task("hygiene sweep", total=None)
            return await sweep(sessions, dry_run=dry_run,
                               progress=lambda done, total: bar.update(task, completed=done, total=total))
    finally:
        await _close_runtime(rt)


async def session_status(settings: Settings, store: Store, session_id: str) -> StatusFigures:
    """The /status figures of a stored session, computed exactly as the chat computes them (``sessions show``).

    Needs no LLM. The window is the one the gateway last ran this session with (stored with its engine state
    after every turn), so the thresholds are the chat's even where this command's environment names another
    model or none; the compression settings (``compression.*``, ``llm.max_tokens``) are this command's own.
    """
    record = await store.sessions.require(session_id)
    settings = with_stored_window(settings, record.engine.context_length)
    rt = await build_runtime(settings, provider=None if settings.llm.configured else _NoProvider(), store=store,
                             locks=InProcessLocks(), probe_windows=False)
    try:
        sessions = SessionManager(rt)
        return status_figures(sessions, await sessions.attach(record, None, remember=False))
    finally:
        await rt.provider.aclose()
        await rt.limits.aclose()  # the store is the caller's
        await rt.arrivals.aclose()
        await rt.claims.aclose()


def with_stored_window(settings: Settings, window: int | None) -> Settings:
    """``settings`` with ``llm.context_length`` set to the window a gateway stored for a session, when known."""
    if not window or window == context_length_for(settings.llm.model, settings.llm.context_length):
        return settings
    return settings.model_copy(update={"llm": settings.llm.model_copy(update={"context_length": window})})


class _NoProvider(Provider):
    """Stands in for the LLM in a dry-run sweep, which never calls it."""

    name = "none"
    model = ""

    async def complete(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
        raise RuntimeError("a dry-run sweep must not call the LLM")

