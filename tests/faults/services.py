"""Private services the fault tests may break: a PostgreSQL cluster of our own and a small full-able tmpfs.

Never the shared PostgreSQL / Redis. The cluster runs on a free port from a temporary data directory
(initdb as the ``postgres`` user when we are root: the server refuses to run as root) and is stopped by the
PID in its ``postmaster.pid``. The tmpfs is mounted in a temporary directory and unmounted after.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PrivatePostgres", "SmallDisk", "free_port", "private_postgres", "small_disk"]


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster of our own; ``stop``/``start`` act on it by the postmaster's PID."""

    bindir: Path
    datadir: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        subprocess.run([*_as_postgres(), str(self.bindir / "initdb"), "-D", str(self.datadir), "-U", "postgres",
                        "-A", "trust", "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.datadir} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        subprocess.run([*_as_postgres(), str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-o", options,
                        "-l", str(self.datadir / "server.log"), "-w", "-t", "60", "start"], check=True,
                       capture_output=True, timeout=90)

    def pid(self) -> int | None:
        pidfile = self.datadir / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            return int(pidfile.read_text().split("\n", 1)[0])
        return None

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster): clients are disconnected, nothing is accepted."""
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def _postgres_bindir() -> Path | None:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres | str]:
    """A running private cluster, or the reason there cannot be one (the caller skips with it)."""
    bindir = _postgres_bindir()
    if bindir is None:
        yield "initdb/pg_ctl not found"
        return
    if os.geteuid() == 0:
        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            yield "running as root and there is no postgres user to run the server as"
            return
    workdir = Path(tempfile.mkdtemp(prefix="concord-pg-"))
    server = PrivatePostgres(bindir, workdir / "data", free_port())
    try:
        if os.geteuid() == 0:
            os.chown(workdir, owner.pw_uid, owner.pw_gid)
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class SmallDisk:
    """A mounted tmpfs of ``size_mb``; `fill` takes every free byte, `free` gives them back."""

    path: Path

    def fill(self) -> None:
        chunk = b"\0" * (1 << 16)
        with (self.path / "filler").open("wb") as out:
            try:
                while True:
                    out.write(chunk)
                    out.flush()
            except OSError:
                pass

    def free(self) -> None:
        (self.path / "filler").unlink(missing_ok=True)


@contextlib.contextmanager
def small_disk(size_mb: int) -> Iterator[SmallDisk | str]:
    """A fresh tmpfs, or the reason it cannot be mounted here (the caller skips with it)."""
    path = Path(tempfile.mkdtemp(prefix="concord-tmpfs-"))
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        path.rmdir()
        yield f"cannot mount a tmpfs here ({(result.stderr or result.stdout).strip() or 'mount failed'})"
        return
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
        with contextlib.suppress(OSError):
            path.rmdir()
