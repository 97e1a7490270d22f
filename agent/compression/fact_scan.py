"""Which evidence finders can find anything in a text: every gate of `fact_patterns.SCANNERS`, one pass.

CPython's regex engine costs 10–30 ns per character and pattern even where nothing matches, and most texts
hold no fact of most kinds (a log line has no UUID, a chat line no path): scanning every text with every
pattern was most of the ledger's time. Hyperscan matches all the gates together in one pass over the
text's UTF-8 bytes, at a few bytes per nanosecond, and each gate stops at its first match; only the finders
whose gate occurs then run, with the exact Python patterns, over the whole text — so the facts are those
the finders alone would give, in the same order.

Without hyperscan (no wheel for the platform, or a CPU it does not support) every finder runs: the same
facts, as slowly as before.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from agent.compression.fact_patterns import Scanner

__all__ = ["GateScan"]

log = logging.getLogger(__name__)


def _on_match(index: int, start: int, end: int, flags: int, found: list[int]) -> None:
    found.append(index)  # each gate reports once (HS_FLAG_SINGLEMATCH)


class GateScan:
    """The names of the scanners whose gate occurs in a text (a scanner without a gate always counts)."""

    def __init__(self, scanners: Sequence[Scanner]) -> None:
        self._always = frozenset(s.name for s in scanners if s.gate is None)
        self._everything = frozenset(s.name for s in scanners)
        self._gated = [s for s in scanners if s.gate is not None]
        self._names = [s.name for s in self._gated]
        self._local = threading.local()
        self._database = self._compile(self._gated)

    @staticmethod
    def _compile(gated: Sequence[Scanner]) -> object | None:
        try:
            import hyperscan
        except ImportError:
            log.info("hyperscan is not installed: every evidence pattern scans every text")
            return None
        try:
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            database.compile(expressions=[s.gate for s in gated], ids=list(range(len(gated))),
                             flags=hyperscan.HS_FLAG_SINGLEMATCH)
        except hyperscan.error as exc:  # e.g. a CPU without the instructions it needs
            log.warning("hyperscan cannot compile the evidence gates (%s): every pattern scans every text", exc)
            return None
        return database

    @property
    def active(self) -> bool:
        """Whether the one-pass scan is in use (False: every scanner runs on every text)."""
        return self._database is not None

    def present(self, text: str) -> frozenset[str]:
        """The names of the scanners that may find something in ``text``."""
        database = self._database
        if database is None or not text:
            return self._everything if database is None else self._always
        found: list[int] = []
        # Surrogates (which the gateway replaces where text enters, but a library caller may pass) encode to
        # non-ASCII bytes like any other character a gate treats as "could be anything".
        data = text.encode("utf-8", "surrogatepass")
        database.scan(data, match_event_handler=_on_match, context=found,  # type: ignore[attr-defined]
                      scratch=self._scratch())
        names = self._names
        return self._always.union([names[index] for index in found])

    def _scratch(self) -> object:
        """One scratch space per thread: a scan writes into its scratch, so two threads may not share one."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan

            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch

