"""`concord run` stops within 2 s on SIGTERM or SIGINT at any point of start-up, exit 0, no traceback.

Real processes (``python -m gateway run``, what the ``concord`` script runs), each stopped at one point of its
start-up: while Concord is still being imported; in the wait between two login attempts of a Telegram or
Discord that refuses connections; while the login request hangs on a server that accepts and never answers;
while connecting to a database server that accepts and never answers; and while migrating, queued behind
another worker's migration lock on a real PostgreSQL. Before, a signal there was only noticed once start-up
was over (76 s when getMe gave up after 8 attempts).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway.store.database import create_engine
from tests.conftest import REPO_ROOT

SIGNALS = [pytest.param(signal.SIGTERM, id="SIGTERM"), pytest.param(signal.SIGINT, id="SIGINT")]
STOP_WITHIN_S = 2.0
# Nothing listens at the LLM's address: start-up never calls it.
LLM = {"CONCORD_LLM__BASE_URL": "http://127.0.0.1:9/v1", "CONCORD_LLM__MODEL": "gpt-4o",
       "CONCORD_GATEWAY__SWEEP_CRON": "off"}
MIGRATION_LOCK = 0x636F6E63  # gateway/store/migrate.py: the lock every worker migrates under


class Run:
    """One ``concord run`` process; its stderr lines are collected as they come."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CONCORD_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "run"], cwd=cwd, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env={**base, **LLM, "PYTHONPATH": str(REPO_ROOT), "CONCORD_STORAGE__DATA_DIR": str(cwd / "data"),
                 **env})
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, check: Callable[[], bool], what: str, within: float = 60) -> None:
        deadline = time.monotonic() + within
        while not check():
            assert self.proc.poll() is None, f"exited {self.proc.returncode} before {what}:\n{self.stderr}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.stderr}"
            time.sleep(0.02)

    def stop(self, sig: signal.Signals) -> tuple[int, float]:
        """Send ``sig``; the exit status and the seconds it took to exit."""
        sent = time.monotonic()
        self.proc.send_signal(sig)
        try:
            status = self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        return status, time.monotonic() - sent

    @property
    def stderr(self) -> str:
        return "".join(self.lines)


class Silent:
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a hung server)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._held.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: connecting is refused


def _assert_stopped(run: Run, sig: signal.Signals) -> None:
    status, seconds = run.stop(sig)
    assert status == 0, f"exit {status}:\n{run.stderr}"
    assert seconds < STOP_WITHIN_S, f"took {seconds:.1f} s:\n{run.stderr}"
    assert "Traceback" not in run.stderr and "Unclosed" not in run.stderr, run.stderr


def _catches_sigterm(pid: int) -> bool:
    """Whether the process has a SIGTERM handler yet (the console script's first act; the kernel shows it)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("sig", SIGNALS)
def test_stopped_while_loading(tmp_path: Path, sig: signal.Signals) -> None:
    run = Run({"CONCORD_TELEGRAM__TOKEN": "1:x", "CONCORD_TELEGRAM__API_BASE_URL": f"http://127.0.0.1:{_refused_port()}"},
              tmp_path)
    # Before that handler, the interpreter itself is starting: a signal there is the interpreter's business.
    run.wait_for(lambda: _catches_sigterm(run.proc.pid), "the console script to start")
    time.sleep(0.2)  # Concord is still being imported (that takes a second or more)
    assert "telegram" not in run.stderr  # no start-up step has logged yet
    _assert_stopped(run, sig)


def _platform(name: str, url: str) -> dict[str, str]:
    """Settings (and, for Discord, the fake-server redirect) that make ``name`` reach ``url`` at start-up."""
    if name == "telegram":
        return {"CONCORD_TELEGRAM__TOKEN": "1:x", "CONCORD_TELEGRAM__API_BASE_URL": url}
    return {"CONCORD_DISCORD__TOKEN": "fake-token", "FAKE_DISCORD_URL": url,
            "PYTHONPATH": f"{REPO_ROOT / 'tests' / 'fakes' / 'discord_redirect'}{os.pathsep}{REPO_ROOT}"}


PLATFORMS = [pytest.param("telegram", "telegram: getMe failed", id="telegram"),
             pytest.param("discord", "discord: login failed", id="discord")]


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize(("platform", "retrying"), PLATFORMS)
def test_stopped_between_login_retries(tmp_path: Path, platform: str, retrying: str, sig: signal.Signals) -> None:
    run = Run(_platform(platform, f"http://127.0.0.1:{_refused_port()}"), tmp_path)
    run.wait_for(lambda: retrying in run.stderr, "the first retry")
    _assert_stopped(run, sig)


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("platform", ["telegram", "discord"])
def test_stopped_while_login_hangs(tmp_path: Path, silent: Silent, platform: str, sig: signal.Signals) -> None:
    run = Run(_platform(platform, f"http://127.0.0.1:{silent.port}"), tmp_path)
    run.wait_for(silent.accepted.is_set, "the login request to reach the silent server")
    time.sleep(0.2)
    _assert_stopped(run, sig)


@pytest.mark.parametrize("sig", SIGNALS)
def test_stopped_while_the_database_does_not_answer(tmp_path: Path, silent: Silent, sig: signal.Signals) -> None:
    run = Run({"CONCORD_STORAGE__DATABASE_URL": f"postgresql+asyncpg://concord:pw@127.0.0.1:{silent.port}/concord",
               "CONCORD_TELEGRAM__TOKEN": "1:x", "CONCORD_TELEGRAM__API_BASE_URL": "http://127.0.0.1:9"}, tmp_path)
    run.wait_for(silent.accepted.is_set, "the database connection attempt")
    time.sleep(0.2)
    _assert_stopped(run, sig)


async def _admin(url: str, statement: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


@pytest.fixture
def private_database(postgres_url: str) -> Iterator[str]:
    name = f"concord_signals_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(postgres_url, f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(postgres_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(_admin(postgres_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


# Another worker in the middle of its migration: holds the lock until its stdin closes.
HOLD_MIGRATION_LOCK = f"""
import asyncio, sys
import asyncpg

async def main():
    conn = await asyncpg.connect(sys.argv[1])
    await conn.execute("SELECT pg_advisory_lock({MIGRATION_LOCK})")
    print("locked", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await conn.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("sig", SIGNALS)
def test_stopped_while_waiting_to_migrate(tmp_path: Path, private_database: str, sig: signal.Signals) -> None:
    plain = make_url(private_database).set(drivername="postgresql").render_as_string(hide_password=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_MIGRATION_LOCK, plain], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        run = Run({"CONCORD_STORAGE__DATABASE_URL": private_database, "CONCORD_TELEGRAM__TOKEN": "1:x",
                   "CONCORD_TELEGRAM__API_BASE_URL": "http://127.0.0.1:9"}, tmp_path)
        run.wait_for(lambda: _waiting_for_lock(private_database), "the migration to queue behind the lock")
        _assert_stopped(run, sig)
    finally:
        holder.communicate("", timeout=30)


def _waiting_for_lock(url: str) -> bool:
    """Whether a session of this database waits for an advisory lock (the migration queued behind the holder)."""
    async def check() -> bool:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                result = await conn.exec_driver_sql(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())")
                return bool(result.scalar())
        finally:
            await engine.dispose()

    return asyncio.run(check())
