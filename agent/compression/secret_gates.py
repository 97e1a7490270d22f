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

from collections.abc import Sequence

import ahocorasick

from agent.compression.pattern_set import PatternSet
from agent.compression.secret_rules import RULES, Rule, fold_ascii

__all__ = ["gates_present"]

Found = dict[int, set[str]]

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


class _HyperscanGates:
    """Every gate of every rule in one Hyperscan pass over the text's bytes."""

    def __init__(self, patterns: PatternSet, gates: list[tuple[int, str]]) -> None:
        self._patterns = patterns
        self._gates = gates  # expression index → its rule's index and the gate

    @classmethod
    def build(cls) -> _HyperscanGates | None:
        """The scanner, or None where Hyperscan is missing or cannot compile the gates here."""
        gates = [(index, gate) for index, rule in enumerate(RULES) for gate in rule.gates]
        patterns = PatternSet.compile([_literal(gate) for _, gate in gates],
                                      caseless=[RULES[index].folded for index, _ in gates],
                                      what="redaction gates", otherwise="redaction gates are found with Aho-Corasick")
        return None if patterns is None else cls(patterns, gates)

    def found(self, text: str) -> Found:
        """Each rule's gates that occur in ``text`` (a folded rule's: case-insensitively)."""
        found: Found = {}
        for expression in self._patterns.occurring(text):
            index, gate = self._gates[expression]
            found.setdefault(index, set()).add(gate)
        return found


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
