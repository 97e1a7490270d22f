"""The worker's HTTP side for operators: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

Served on ``metrics.listen``:``metrics.port`` by aiohttp inside the gateway's event loop (off when the port is
unset). ``/healthz`` answers 200 while the process runs its loop; ``/readyz`` answers 200 only when every
readiness check passes (the database answers, Redis answers when configured, every adapter is connected) and
503 with the failing checks otherwise, so an orchestrator or load balancer stops sending work to a worker that
cannot do it. Neither body carries a URL, a token or an error text that could hold one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from adapters.listen import bind
from gateway.config import ConfigError

__all__ = ["HealthServer", "ReadinessCheck"]

log = logging.getLogger(__name__)

CHECK_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ReadinessCheck:
    """One thing a ready worker needs: ``probe`` returns True when it is there (it may raise: not ready)."""

    name: str
    probe: Callable[[], Awaitable[bool]]


class HealthServer:
    """``/metrics``, ``/healthz``, ``/readyz`` on one port; ``start`` / ``aclose`` (idempotent)."""

    def __init__(self, registry: CollectorRegistry, checks: Sequence[ReadinessCheck], *, listen: str,
                 port: int) -> None:
        self.registry = registry
        self.checks = list(checks)
        self.listen = listen
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind and serve; ``port`` 0 picks a free one (``self.port`` then holds it). A port that cannot be
        bound is a `ConfigError` (one line, exit 2)."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        try:
            runner = await bind(app, self.listen, self.port, f"metrics.port {self.port}")
        except OSError as exc:
            raise ConfigError(str(exc)) from None
        self._runner = runner
        self.port = runner.addresses[0][1]
        log.info("metrics and health checks on http://%s:%d (/metrics /healthz /readyz)", self.listen, self.port)

    async def aclose(self) -> None:
        """Stop serving."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def readiness(self) -> dict[str, bool]:
        """Each check's result, run concurrently, each bounded by ``CHECK_TIMEOUT_S``."""
        results = await asyncio.gather(*(self._run(check) for check in self.checks))
        return {check.name: ok for check, ok in zip(self.checks, results, strict=True)}

    @staticmethod
    async def _run(check: ReadinessCheck) -> bool:
        try:
            return bool(await asyncio.wait_for(check.probe(), CHECK_TIMEOUT_S))
        except Exception as exc:  # a probe that raises is a failed check, never a 500
            log.debug("readiness check %s failed: %s", check.name, type(exc).__name__)
            return False

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        results = await self.readiness()
        failing = sorted(name for name, ok in results.items() if not ok)
        if failing:
            return web.Response(status=503, text="not ready: " + ", ".join(failing) + "\n")
        return web.Response(text="ready\n")
