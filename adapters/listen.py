"""An aiohttp application served on one address inside the running event loop (the Telegram webhook, the
operator's health port): bound at start, closed once, a port that cannot be bound reported in one line."""

from __future__ import annotations

from aiohttp import web

__all__ = ["bind"]


async def bind(app: web.Application, listen: str, port: int, what: str) -> web.AppRunner:
    """Serve ``app`` on ``listen``:``port`` and return its runner (``runner.cleanup()`` stops it; the bound
    port is ``runner.addresses[0][1]``). A port that cannot be bound raises OSError naming ``what`` and the
    address, without a traceback's worth of detail."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, listen, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(f"{what} on {listen}:{port}: {exc.strerror or exc}") from None
    return runner
