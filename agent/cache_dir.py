"""Where Concord keeps what it can always make again: the tokenizer's files, compiled pattern sets.

Under systemd (``CacheDirectory=concord``, as the shipped units have) that is ``$CACHE_DIRECTORY``; elsewhere
``$XDG_CACHE_HOME/concord``, or ``~/.cache/concord``. Nothing there is needed: a place that cannot be
created or written only means making it again.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def _base() -> Path:
    systemd = os.environ.get("CACHE_DIRECTORY")  # several directories come colon-separated: ours is the first
    if systemd:
        return Path(systemd.split(":")[0])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "concord"


def cache_dir(name: str) -> Path | None:
    """The cache's subdirectory ``name``, created if need be; None where it cannot be."""
    try:
        path = _base() / name
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # RuntimeError: no home directory to expand
        return None
    return path
