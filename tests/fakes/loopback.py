"""Serving a fake platform or provider on a free loopback port (the only address tests may use)."""

from __future__ import annotations

from aiohttp import web

__all__ = ["serve_on_loopback"]


async def serve_on_loopback(app: web.Application, **runner_options: object) -> tuple[web.AppRunner, int]:
    """Start ``app`` on 127.0.0.1 at a free port; return its runner (``cleanup()`` stops it) and the port."""
    runner = web.AppRunner(app, **runner_options)  # type: ignore[arg-type]
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, runner.addresses[0][1]
