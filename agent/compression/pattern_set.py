"""Many expressions found in one pass: a Hyperscan database that any thread may scan.

The evidence gates and the redaction gates both ask the same question of a text — which of these
expressions occur in it at all — and both fall back to their own slower scan where Hyperscan is missing
(no wheel for the platform) or cannot compile (a CPU without the instructions it needs).

Compiling a set takes Hyperscan most of a second (the evidence gates), which every process paid at start-up:
a compiled set is kept in Concord's cache directory (`agent.cache_dir`) and loaded in a millisecond by the
next process. A file is named by a digest of everything the set is compiled from (Hyperscan's version, the
expressions, their flags) and carries a digest of its own bytes; one that is damaged, or that Hyperscan
refuses (another version, a CPU without the instructions it was compiled for), is compiled again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

from agent.cache_dir import cache_dir

__all__ = ["PatternSet"]

log = logging.getLogger(__name__)

_CACHE_NAME = "hyperscan"
_DIGEST_SIZE = 32


def _on_match(index: int, start: int, end: int, flags: int, found: list[int]) -> None:
    found.append(index)  # each expression reports once (HS_FLAG_SINGLEMATCH)


class PatternSet:
    """Compiled expressions; `occurring` names those found in a text, each once."""

    def __init__(self, database: object, new_scratch: Callable[[object], object]) -> None:
        self._database = database
        self._new_scratch = new_scratch
        self._local = threading.local()

    @classmethod
    def compile(cls, expressions: Sequence[str | bytes], *, caseless: Sequence[bool] | None = None,
                what: str, otherwise: str) -> PatternSet | None:
        """The set, or None (logged: "hyperscan … ``what`` …: ``otherwise``") where Hyperscan is missing or
        cannot compile ``expressions``; ``caseless[i]`` matches expression ``i`` ASCII case-insensitively."""
        try:
            import hyperscan
        except ImportError:
            log.info("hyperscan is not installed: %s", otherwise)
            return None
        folded = caseless or [False] * len(expressions)
        flags = [hyperscan.HS_FLAG_SINGLEMATCH | (hyperscan.HS_FLAG_CASELESS if f else 0) for f in folded]
        encoded = [e.encode() if isinstance(e, str) else e for e in expressions]
        name = _file_name(what, hyperscan.__version__, encoded, flags)
        database = _load(hyperscan, name)
        if database is None:
            try:
                database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
                database.compile(expressions=encoded, ids=list(range(len(encoded))), flags=flags)
            except hyperscan.error as exc:
                log.warning("hyperscan cannot compile the %s (%s): %s", what, exc, otherwise)
                return None
            _store(hyperscan, name, database)
        return cls(database, hyperscan.Scratch)

    def occurring(self, text: str) -> list[int]:
        """The indexes of the expressions that occur in ``text``'s UTF-8 bytes."""
        found: list[int] = []
        # Surrogates (which the gateway replaces where text enters, but a library caller may pass) encode to
        # non-ASCII bytes like any other character an expression treats as "could be anything".
        self._database.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=_on_match,  # type: ignore[attr-defined]
                            context=found, scratch=self._scratch())
        return found

    def _scratch(self) -> object:
        """One scratch space per thread: a scan writes into its scratch, so two threads may not share one."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = self._new_scratch(self._database)
        return scratch


def _file_name(what: str, version: str, expressions: Sequence[bytes], flags: Sequence[int]) -> str:
    """``<what>-<digest of what the set is compiled from>.db`` (in the cache's ``hyperscan`` directory)."""
    digest = hashlib.blake2b(repr((version, "block", list(expressions), list(flags))).encode(), digest_size=16)
    return f"{_slug(what)}-{digest.hexdigest()}.db"


def _slug(what: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", what.lower()).strip("-")


def _load(hyperscan: Any, name: str) -> object | None:
    """The set kept under ``name``, or None (none kept, damaged, or refused by this Hyperscan or CPU)."""
    directory = cache_dir(_CACHE_NAME)
    if directory is None:
        return None
    try:
        data = (directory / name).read_bytes()
    except OSError:
        return None
    digest, payload = data[:_DIGEST_SIZE], data[_DIGEST_SIZE:]
    if hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest() != digest:
        log.info("hyperscan: %s in the cache is damaged; compiling it again", name)
        return None
    try:
        return hyperscan.loadb(payload, hyperscan.HS_MODE_BLOCK)
    except hyperscan.error as exc:
        log.info("hyperscan cannot load %s (%s); compiling it again", name, exc)
        return None


def _store(hyperscan: Any, name: str, database: object) -> None:
    """Keep ``database`` under ``name`` (written whole, then renamed: a reader never sees half a file), and
    drop the sets this one replaces (the same set compiled from other expressions or by another version)."""
    directory = cache_dir(_CACHE_NAME)
    if directory is None:
        return
    payload = hyperscan.dumpb(database)
    temporary = directory / f".tmp-{os.getpid()}-{threading.get_ident()}-{name}"
    try:
        temporary.write_bytes(hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest() + payload)
        os.replace(temporary, directory / name)
        for replaced in directory.glob(f"{name.rsplit('-', 1)[0]}-*.db"):
            if replaced.name != name:
                replaced.unlink(missing_ok=True)
    except OSError as exc:
        log.debug("hyperscan: cannot keep %s in %s: %s", name, directory, exc)
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
