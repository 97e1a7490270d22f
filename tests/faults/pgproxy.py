"""A TCP proxy between a worker and PostgreSQL that loses a connection inside COMMIT.

Everything is forwarded as it is, and the PostgreSQL wire protocol is followed only as far as needed: the
statements each connection prepares (Parse) and runs (Bind, simple Query), and where a transaction begins and
commits. While armed, a transaction that ran a statement containing every one of ``markers`` has its COMMIT
forwarded to the server; the proxy reads the server's answer up to ReadyForQuery — so the COMMIT went through —
and then resets both connections without forwarding that answer. The client sees exactly what a network cut at
that instant gives: its COMMIT failed, and it cannot know whether it committed.

The client must not use TLS (``ssl`` off on the server, or ``?ssl=disable``): the proxy reads the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass, field

from sqlalchemy.engine import make_url

__all__ = ["CommitCutter"]

_SSL_REQUEST = 80877103
_GSS_REQUEST = 80877104


@dataclass
class _Connection:
    statements: dict[bytes, bytes] = field(default_factory=dict)  # prepared statement name → its SQL
    marked: set[bytes] = field(default_factory=set)  # markers the open transaction's statements contained
    cut: asyncio.Event = field(default_factory=asyncio.Event)  # its COMMIT is on its way: cut after the answer


@dataclass
class CommitCutter:
    """Proxy ``upstream`` (a database URL); `url` is the same database through the proxy."""

    upstream: str
    markers: tuple[bytes, ...]
    armed: int = 0  # how many more COMMITs to cut
    cuts: int = 0
    _server: asyncio.Server | None = None

    def url(self) -> str:
        """The upstream URL, through this proxy."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return make_url(self.upstream).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        target = make_url(self.upstream)
        try:
            server_in, server_out = await asyncio.open_connection(target.host or "127.0.0.1", target.port or 5432)
        except OSError:
            client_out.close()
            return
        state = _Connection()
        pumps = [asyncio.create_task(self._from_client(client_in, server_out, state)),
                 asyncio.create_task(self._from_server(server_in, client_out, state))]
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for writer in (client_out, server_out):
            with contextlib.suppress(Exception):
                writer.transport.abort()

    async def _from_client(self, reader: asyncio.StreamReader, server: asyncio.StreamWriter,
                           state: _Connection) -> None:
        # Start-up messages carry no type byte: an SSL / GSS request (which the server refuses with one byte,
        # forwarded by the other pump), then the startup message itself.
        while True:
            length = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack("!I", length)[0] - 4)
            server.write(length + body)
            await server.drain()
            if struct.unpack("!I", body[:4])[0] not in (_SSL_REQUEST, _GSS_REQUEST):
                break
        while True:
            kind = await reader.readexactly(1)
            length = await reader.readexactly(4)
            body = await reader.readexactly(struct.unpack("!I", length)[0] - 4)
            self._note(kind, body, state)
            server.write(kind + length + body)
            await server.drain()

    def _note(self, kind: bytes, body: bytes, state: _Connection) -> None:
        if kind == b"P":  # Parse: name \0 query \0 …
            name, query = body.split(b"\0", 2)[:2]
            state.statements[name] = query
            return
        if kind == b"B":  # Bind: portal \0 statement \0 …
            statement = body.split(b"\0", 2)[1]
            self._ran(state.statements.get(statement, b""), state)
            return
        if kind != b"Q":
            return
        query = body.rstrip(b"\0").strip().upper()
        if query.startswith((b"BEGIN", b"START TRANSACTION", b"ROLLBACK")):
            state.marked.clear()
        elif query.startswith(b"COMMIT"):
            if self.armed and all(marker in state.marked for marker in self.markers):
                self.armed -= 1
                state.cut.set()
            state.marked.clear()
        else:
            self._ran(body, state)

    def _ran(self, query: bytes, state: _Connection) -> None:
        state.marked.update(marker for marker in self.markers if marker in query)

    async def _from_server(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter,
                           state: _Connection) -> None:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return
            if state.cut.is_set():
                await self._swallow_answer(chunk, reader)
                self.cuts += 1
                return  # both connections are reset: the client never hears that COMMIT answered
            client.write(chunk)
            await client.drain()

    @staticmethod
    async def _swallow_answer(chunk: bytes, reader: asyncio.StreamReader) -> None:
        """Read the COMMIT's answer (CommandComplete, then ReadyForQuery) so it has certainly been processed."""
        data = chunk
        while True:
            offset = 0
            while offset + 5 <= len(data):
                kind, length = data[offset:offset + 1], struct.unpack("!I", data[offset + 1:offset + 5])[0]
                if offset + 1 + length > len(data):
                    break
                if kind == b"Z":
                    return
                offset += 1 + length
            more = await reader.read(65536)
            if not more:
                return
            data += more
