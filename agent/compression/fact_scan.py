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

from collections.abc import Sequence

from agent.compression.fact_patterns import Scanner
from agent.compression.pattern_set import PatternSet

__all__ = ["GateScan"]


class GateScan:
    """The names of the scanners whose gate occurs in a text (a scanner without a gate always counts)."""

    def __init__(self, scanners: Sequence[Scanner]) -> None:
        self._always = frozenset(s.name for s in scanners if s.gate is None)
        self._everything = frozenset(s.name for s in scanners)
        self._gated = [s for s in scanners if s.gate is not None]
        self._names = [s.name for s in self._gated]
        self._set = PatternSet.compile([s.gate for s in self._gated], what="evidence gates",
                                       otherwise="every evidence pattern scans every text")

    @property
    def active(self) -> bool:
        """Whether the one-pass scan is in use (False: every scanner runs on every text)."""
        return self._set is not None

    def present(self, text: str) -> frozenset[str]:
        """The names of the scanners that may find something in ``text``."""
        if self._set is None or not text:
            return self._everything if self._set is None else self._always
        names = self._names
        return self._always.union([names[index] for index in self._set.occurring(text)])
