"""The data directory on disk: created with a one-line error when it cannot be, and held by one gateway at a time.

Two ``concord run`` on one SQLite database with in-process locks would interleave turns of the same session
(each process only serializes its own), so the second one is refused while the first holds the lock file.
With ``redis.url`` set, workers share Redis locks and may share the database; no lock file is taken then.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from gateway.store import StorageUnavailable

__all__ = ["DataDirInUse", "ensure_data_dir", "hold_sqlite_lock", "sqlite_path"]


class DataDirInUse(StorageUnavailable):
    """Another gateway process holds the SQLite database's lock file."""


def ensure_data_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed; `StorageUnavailable` with one line when that is impossible."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StorageUnavailable(f"storage.data_dir {path} exists but is not a directory") from None
    except OSError as exc:
        raise StorageUnavailable(f"cannot create storage.data_dir {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StorageUnavailable(f"storage.data_dir {path} is not writable by this user")
    return path


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite+aiosqlite:///…`` URL; None for other databases and in-memory SQLite."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


@contextlib.contextmanager
def hold_sqlite_lock(database: Path) -> Iterator[None]:
    """Hold ``<database>.lock`` (an advisory ``flock``, freed by the kernel when the process ends).

    Raises `DataDirInUse` naming the holder's pid when another process has it.
    """
    lock_path = database.with_name(database.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorageUnavailable(f"cannot create the lock file {lock_path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise DataDirInUse(f"another concord run (pid {holder}) is using {database}; stop it first, or set "
                               f"redis.url so several workers can share one database") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
