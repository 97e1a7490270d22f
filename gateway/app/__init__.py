"""The composition root: every concrete part of Concord is named and wired here, and only here.

`Gateway` adds the router, scheduler and adapters to a runtime and owns start-up and graceful shutdown;
`run_gateway` (``concord run``) serves until a signal. The parts it wires are built beside it:

- `gateway.app.providers` — the main model and its fallbacks, the summary model, their served windows and the
  context engine over them;
- `gateway.app.runtime_parts` — `build_runtime`: `Settings` into the shared dependencies (store with
  migrations applied, locks, claims, limits, engine and memory factories);
- `gateway.app.platforms` — `build_adapters`: the configured platforms, or the console;
- `gateway.app.maintenance` — `run_sweep` (``concord sweep``) and `session_status` (``concord sessions show``).

Any part can be passed in pre-built, which is how tests use a fake LLM server and scripted adapters.

May import every room below it (`gateway.router` and down) and `adapters`; `gateway.cli` imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

from adapters.base import Adapter
from adapters.console import ConsoleAdapter, input_is_empty
from gateway.app.platforms import build_adapters
from gateway.app.providers import check_engine
from gateway.app.runtime_parts import build_runtime, close_runtime, open_store
from gateway.config import Settings
from gateway.conversation.scheduler import GatewayScheduler
from gateway.conversation.session import SessionManager
from gateway.conversation.sweep import expire_idle, sweep
from gateway.delivery.delivery import Deliveries
from gateway.intake.inbox import Inbox
from gateway.intake.lease import Lease, RedisLease, SoleLease
from gateway.ops.data_dir import ensure_data_dir, hold_sqlite_lock, sqlite_path
from gateway.ops.health import HealthServer, ReadinessCheck
from gateway.ops.heartbeat import beat
from gateway.router import Router
from gateway.runtime import Runtime

__all__ = ["Gateway", "llm_setup_help", "run_gateway"]

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
        await close_runtime(self.rt)


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
    store = await open_store(settings)  # a storage problem is reported before the console's input
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
        await close_runtime(runtime)
        raise
    try:
        await gateway.start()
    except BaseException:
        await gateway.aclose()
        raise
    return gateway


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
