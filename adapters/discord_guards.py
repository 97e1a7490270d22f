"""What keeps one bad gateway event or frame from taking the Discord bot down, and its reconnects to one log line.

discord.py lets a parser's exception escape its websocket loop, and reads a frame before any parser runs with
exceptions it does not reconnect on: either ended ``Client.start`` or ``Client.connect``, and the connection was
rebuilt from login — a new session, to which Discord replays nothing sent meanwhile. `guard_parsers` and
`guard_frames` wrap discord.py's own hooks so such an event or frame costs only itself (at worst a RESUME);
`quiet_reconnects` turns discord.py's traceback per routine reconnect into one line with the cause.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import discord
from discord.gateway import ReconnectWebSocket, WebSocketClosure

from adapters.supervise import describe

__all__ = ["guard_frames", "guard_parsers", "quiet_reconnects"]

log = logging.getLogger(__name__)


def guard_parsers(client: discord.Client) -> None:
    """Make a gateway event discord.py cannot parse cost only that event.

    discord.py lets a parser's exception escape the websocket loop, which ends ``Client.start``; one
    malformed MESSAGE_CREATE would take the whole bot down. The parser table is discord.py's own
    ``ConnectionState.parsers``, stable across 2.x.
    """
    parsers: dict[str, Callable[[Any], None]] = client._connection.parsers

    def guarded(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(data: Any) -> None:
            try:
                parse(data)
            except Exception as exc:
                log.warning("discord: skipping malformed %s event (%s)", event, describe(exc))

        return run

    for event, parse in list(parsers.items()):
        parsers[event] = guarded(event, parse)


# What discord.py's own connection loops handle (reconnect, resume, give up): never swallowed here.
_LIBRARY_HANDLED = (ReconnectWebSocket, WebSocketClosure, discord.ConnectionClosed, discord.HTTPException,
                    discord.GatewayNotFound, aiohttp.ClientError, OSError, asyncio.TimeoutError)


class _BrokenStream(Exception):
    """The compressed gateway stream could not be inflated: every later frame depends on it."""


class _Inflater:
    """The socket's decompressor, with its failures told apart from a frame that inflated but is unreadable."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def decompress(self, data: bytes, /) -> str | None:
        try:
            return self._inner.decompress(data)  # type: ignore[no-any-return]
        except Exception as exc:
            raise _BrokenStream(describe(exc)) from None


def guard_frames(client: discord.Client) -> None:
    """Make a gateway frame discord.py cannot read cost that frame (or, at worst, a RESUME), never a new
    IDENTIFY.

    discord.py reads a frame in ``DiscordWebSocket.received_message`` before any parser runs: a frame that is
    not JSON, not an object, or a READY / RESUMED it cannot read raises there, with an exception discord.py does
    not reconnect on, so ``Client.connect`` ended and the connection was rebuilt from login — a new session,
    to which Discord replays nothing sent meanwhile. Each new gateway socket passes through the client state's
    ``_update_references`` (discord.py's own hook, 2.x) before it reads its first frame; there its
    ``received_message`` is wrapped: an unreadable frame is skipped with one line. A compressed stream that
    cannot be inflated is broken for every frame after it, so then the socket is closed for a RESUME, which
    replays the events from the last one read.
    """
    state = client._connection
    update_references = state._update_references

    def guard(ws: Any) -> None:
        update_references(ws)
        ws._decompressor = _Inflater(ws._decompressor)
        ws.received_message = _tolerant(ws, ws.received_message)

    state._update_references = guard  # type: ignore[method-assign]


def _tolerant(ws: Any, receive: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    async def received_message(msg: Any, /) -> None:
        try:
            await receive(msg)
        except _LIBRARY_HANDLED:
            raise
        except _BrokenStream as exc:
            log.warning("discord: a compressed gateway frame could not be inflated (%s); resuming the session",
                        exc)
            await ws.close(code=4000)  # not 1000: that would end the session instead of letting it resume
            raise ReconnectWebSocket(ws.shard_id, resume=True) from None
        except Exception as exc:
            log.warning("discord: skipping an unreadable gateway frame (%s)", describe(exc))

    return received_message


class _OneLineReconnects(logging.Filter):
    """discord.py logs every reconnect of the gateway with a full traceback; one line with the cause is enough
    (a dropped connection is routine, and a dead one is reported by our supervisor at ERROR)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Attempting a reconnect"):
            cause = record.exc_info[1]
            record.msg = f"discord: gateway connection dropped ({describe(cause) if cause else 'unknown'}); " \
                         "discord.py reconnects in %.2fs"
            record.exc_info = record.exc_text = None
        return True


def quiet_reconnects() -> None:
    library = logging.getLogger("discord.client")
    if not any(isinstance(f, _OneLineReconnects) for f in library.filters):
        library.addFilter(_OneLineReconnects())
