"""Which redaction rules can match a text: every gate of `secret_rules.RULES` looked for at once.

A rule runs only where one of its literal gates occurs (against the A-Z-lower-cased text for folded rules).
With Hyperscan, every gate of every rule is found in one pass over the text's UTF-8 bytes, each gate
reported once however often it occurs: a folded rule's gates match ASCII case-insensitively, which is what
looking for a lower-case gate in the A-Z-lower-cased text means (UTF-8 bytes of other characters are never
ASCII letters), so the text is not even folded for the scan. Without Hyperscan (no wheel, or a CPU it does
not support), long gates are found in one Aho-Corasick pass per haystack (plain and folded) — a pass that
visits every occurrence, ten times slower on text where "key" or "token" recur — and gates of one or two
characters (":", "=", "--") by substring tests.

Either way the answer is every gate that occurs, by rule: the rules that can match (running a rule that
finds nothing would change nothing), and for a rule whose matches start at a gate, the gates to look for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import ahocorasick

from agent.compression.secret_rules import RULES, Rule, fold_ascii

__all__ = ["gates_present"]

Found = dict[int, set[str]]

log = logging.getLogger(__name__)

_SHORT_GATE = 2


class _AhoCorasickGates:
    """Which gates of ``rules`` (by index) occur in a haystack: long gates in one Aho-Corasick pass, short
    ones by substring tests."""

    def __init__(self, rules: Sequence[tuple[int, Rule]]) -> None:
        self._long = ahocorasick.Automaton()
        short: dict[str, list[int]] = {}
        for index, rule in rules:
            for gate in rule.gates:
                if len(gate) <= _SHORT_GATE:
                    short.setdefault(gate, []).append(index)
                elif gate in self._long:
                    self._long.get(gate)[1].append(index)
                else:
                    self._long.add_word(gate, (gate, [index]))
        self._long.make_automaton()
        self._short = [(gate, tuple(indexes)) for gate, indexes in short.items()]

    def add_found(self, haystack: str, found: Found) -> None:
        """Add to ``found`` each rule's gates that occur in ``haystack``."""
        for _, (gate, indexes) in self._long.iter(haystack):
            for index in indexes:
                found.setdefault(index, set()).add(gate)
        for gate, indexes in self._short:
            if gate in haystack:
                for index in indexes:
                    found.setdefault(index, set()).add(gate)


def _literal(gate: str) -> bytes:
    """``gate`` as a Hyperscan expression matching its UTF-8 bytes literally."""
    return "".join(f"\\x{byte:02x}" for byte in gate.encode("utf-8")).encode()


def _on_match(gate: int, start: int, end: int, flags: int, found: list[int]) -> None:
    found.append(gate)  # each gate reports once (HS_FLAG_SINGLEMATCH)


class _HyperscanGates:
    """Every gate of every rule in one Hyperscan pass over the text's bytes."""

    def __init__(self, database: object, gates: list[tuple[int, str]]) -> None:
        self._database = database
        self._gates = gates  # expression id → its rule's index and the gate
        self._local = threading.local()

    @classmethod
    def build(cls) -> _HyperscanGates | None:
        """The scanner, or None where Hyperscan is missing or cannot compile the gates here."""
        try:
            import hyperscan
        except ImportError:
            log.info("hyperscan is not installed: redaction gates are found with Aho-Corasick")
            return None
        expressions: list[bytes] = []
        flags: list[int] = []
        gates: list[tuple[int, str]] = []
        for index, rule in enumerate(RULES):
            for gate in rule.gates:
                expressions.append(_literal(gate))
                flags.append(hyperscan.HS_FLAG_SINGLEMATCH | (hyperscan.HS_FLAG_CASELESS if rule.folded else 0))
                gates.append((index, gate))
        try:
            database = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
            database.compile(expressions=expressions, ids=list(range(len(expressions))), flags=flags)
        except hyperscan.error as exc:  # e.g. a CPU without the instructions it needs
            log.warning("hyperscan cannot compile the redaction gates (%s): using Aho-Corasick", exc)
            return None
        return cls(database, gates)

    def found(self, text: str) -> Found:
        """Each rule's gates that occur in ``text`` (a folded rule's: case-insensitively)."""
        ids: list[int] = []
        # Surrogates (a library caller may pass them) encode to non-ASCII bytes, which no gate's ASCII holds.
        self._database.scan(text.encode("utf-8", "surrogatepass"), match_event_handler=_on_match,  # type: ignore[attr-defined]
                            context=ids, scratch=self._scratch())
        found: Found = {}
        for expression in ids:
            index, gate = self._gates[expression]
            found.setdefault(index, set()).add(gate)
        return found

    def _scratch(self) -> object:
        """One scratch space per thread: a scan writes into its scratch, so two threads may not share one."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            import hyperscan

            scratch = self._local.scratch = hyperscan.Scratch(self._database)
        return scratch


_PLAIN = _AhoCorasickGates([(i, rule) for i, rule in enumerate(RULES) if not rule.folded])
_FOLDED = _AhoCorasickGates([(i, rule) for i, rule in enumerate(RULES) if rule.folded])
_HYPERSCAN = _HyperscanGates.build()


def gates_present(text: str, *, one_pass: bool = True) -> Found:
    """Rule index (into `RULES`) → those of its gates that occur in ``text`` — for a folded rule, in its
    A-Z-lower-cased form; a rule none of whose gates occurs is absent. ``one_pass=False``: the Aho-Corasick
    scan even where Hyperscan is available."""
    if one_pass and _HYPERSCAN is not None:
        return _HYPERSCAN.found(text)
    found: Found = {}
    _PLAIN.add_found(text, found)
    _FOLDED.add_found(fold_ascii(text), found)
    return found
