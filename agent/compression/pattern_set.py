"""Many expressions found in one pass: a Hyperscan database that any thread may scan.

The evidence gates and the redaction gates both ask the same question of a text — which of these
expressions occur in it at all — and both fall back to their own slower scan where Hyperscan is missing
(no wheel for the platform) or cannot compile (a CPU without the instructions it needs).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

__all__ = ["PatternSet"]

log = logging.getLogger(__name__)


def _on_match(index: int, start: int, end: int, flags: int, found: list[int]) -> None:
    found.append(index)  # each expression reports once (HS_FLAG_SINGLEMATCH)


class PatternSet:
    """Compiled expressions; `occurring` names those found in a text, each once."""

    def __init__(self, database: object) -> None:
        self._database = database
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
        try:
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            database.compile(expressions=[e.encode() if isinstance(e, str) else e for e in expressions],
                             ids=list(range(len(expressions))), flags=flags)
        except hyperscan.error as exc:
            log.warning("hyperscan cannot compile the %s (%s): %s", what, exc, otherwise)
            return None
        return cls(database)

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
            import hyperscan

            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch
