"""A liveness file for container health checks: the gateway touches it while its event loop runs.

`concord health` (the Docker ``HEALTHCHECK``) passes while the file is fresh. A stale file means the loop is
stuck or the process is gone, which a check of "the process exists" alone would not see.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

__all__ = ["BEAT_SECONDS", "beat", "heartbeat_age"]

log = logging.getLogger(__name__)

BEAT_SECONDS = 10.0


async def beat(path: Path, interval: float = BEAT_SECONDS) -> None:
    """Touch ``path`` now and every ``interval`` seconds until cancelled; the file is removed on the way out."""
    try:
        while True:
            try:
                path.touch()  # noqa: ASYNC240 - one metadata write every few seconds
            except OSError as exc:
                log.warning("cannot touch the heartbeat file %s: %s", path, exc.strerror)
            await asyncio.sleep(interval)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # noqa: ASYNC240


def heartbeat_age(path: Path) -> float | None:
    """Seconds since ``path`` was last touched; None when it does not exist."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except FileNotFoundError:
        return None
