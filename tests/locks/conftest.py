"""Lock fixtures: both backends for shared behaviour, and a PRIVATE redis-server the fault tests may kill.

The private server runs on its own free port with no persistence and is stopped by its PID; the shared
Redis at ``CONCORD_TEST_REDIS_URL`` is never touched by fault tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from redis.exceptions import RedisError

from gateway.intake.locks import InProcessLocks, LockBackend, RedisLocks


@pytest.fixture(params=["inprocess", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[LockBackend]:
    """Each lock backend; Redis keys carry a unique prefix so runs never collide."""
    if request.param == "inprocess":
        yield InProcessLocks()
        return
    url: str = request.getfixturevalue("redis_url")
    locks = RedisLocks.from_url(url, prefix=f"concord-test:{uuid.uuid4().hex}:", turn_ttl=1.0,
                                compression_ttl=1.0)
    try:
        yield locks
    finally:
        await locks.aclose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateRedis:
    """A redis-server of our own; ``kill``/``start``/``pause``/``resume`` act on it by PID only."""

    binary: str
    port: int
    workdir: Path
    # Keep the data across a kill (an append-only file fsynced on every write), as a production Redis does.
    persistent: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.persistent else "no", "--appendfsync", "always",
             "--dir", str(self.workdir), "--daemonize", "no",
             # Redis 7 refuses DEBUG (the slow-Redis tests use DEBUG SLEEP) unless enabled at start.
             "--enable-debug-command", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = SyncRedis(port=self.port, socket_connect_timeout=0.2)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)


def _private_server(tmp_path: Path, *, persistent: bool) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server binary not found"
        if os.environ.get("CONCORD_REQUIRE_SERVICES", "") not in ("", "0", "false"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    server = PrivateRedis(binary=binary, port=_free_port(), workdir=tmp_path, persistent=persistent)
    server.start()
    try:
        yield server
    finally:
        if server.process is not None:
            server.resume()
        server.kill()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A running private redis-server (skips, or fails under CONCORD_REQUIRE_SERVICES, without one)."""
    yield from _private_server(tmp_path, persistent=False)


@pytest.fixture
def persistent_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private redis-server that keeps its data across a kill and a restart."""
    yield from _private_server(tmp_path, persistent=True)
