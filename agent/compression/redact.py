"""Secret redaction for every text that leaves the conversation: summaries, memory, logs, CLI output, errors.

Applied to the serialized middle before the summary call and to the model's output (R-C3, R-C4), because a
summary is re-sent on every later request and persisted; a key that slipped in would live forever. The
rules (`secret_rules.RULES`) catch secrets by shape (vendor key formats, PEM blocks, URL credentials) and by
context (``password=``, "my password is …", ``psql -W …``, 密码：…, a random string after a cue word).

Speed: a rule runs only when one of its literal gates occurs in the text (against the A-Z-lower-cased text
for folded rules) and its prefilter, if any, finds something; an anchored rule (every match starts with a
gate: the cue words) is tried only where a gate occurs instead of at every position. Which gates occur is
found for all rules at once (`secret_gates`: one Hyperscan pass) instead of one scan of the whole text per
rule: most long gates ("-----BEGIN ", "ghp_", "password") occur nowhere, and scanning for each in turn was
half of all redaction time. The result is that of applying every rule in order (``apply_rule`` on each),
which the tests hold it to: a redaction never adds a gate ("[REDACTED]" holds none), so the gates found
before the first one are a superset of those left after it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from agent.compression.secret_gates import gates_present
from agent.compression.secret_rules import RULES, Hit, Rule, fold_ascii

__all__ = ["REDACTED", "apply_rule", "redact_message", "redact_secrets", "unescape_non_ascii"]

REDACTED = "[REDACTED]"
_SECRET_GROUPS = ("s", "s1", "s2")


def apply_rule(rule: Rule, text: str) -> str:
    """``text`` with every accepted match of ``rule`` redacted: no gate, no anchor, a plain scan."""
    haystack = fold_ascii(text) if rule.folded else text
    return _redact_matches(rule, text, rule.finditer(haystack))


def _gate_starts(gates: Iterable[str], haystack: str) -> list[int]:
    """Every position where one of ``gates`` starts in ``haystack``, overlapping ones included, in order.

    One substring search per gate (a lookahead alternation tried at every position is ten times slower)."""
    found: set[int] = set()
    for gate in gates:
        at = haystack.find(gate)
        while at >= 0:
            found.add(at)
            at = haystack.find(gate, at + 1)
    return sorted(found)


def _anchored_matches(rule: Rule, haystack: str, gates: Iterable[str] | None = None) -> Iterator[re.Match[str]]:
    """What ``finditer`` finds, trying only the positions where a gate starts (and none inside a match);
    ``gates``: those of the rule's gates that occur in ``haystack``, when the caller knows."""
    end = 0
    for at in _gate_starts(rule.gates if gates is None else gates, haystack):
        if at < end:
            continue
        match = rule.pattern.match(haystack, at)
        if match is not None:
            yield match
            end = match.end()


def _redact_matches(rule: Rule, text: str, matches: Iterable[re.Match[str]]) -> str:
    groups = _GROUPS[rule.name]
    pieces: list[str] = []
    cursor = 0
    for match in matches:
        if rule.accept is not None and not rule.accept(Hit(match, text)):
            continue
        spans = [match.span(g) for g in groups if match.start(g) >= 0] or [match.span()]
        for start, end in sorted(spans):
            pieces += [text[cursor:start], REDACTED]
            cursor = end
    if not pieces:
        return text
    pieces.append(text[cursor:])
    return "".join(pieces)


_GROUPS = {rule.name: [g for g in _SECRET_GROUPS if g in rule.pattern.groupindex] for rule in RULES}


_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u([0-9a-fA-F]{4})")


def _unescaped(match: re.Match[str]) -> str:
    code = int(match.group(2), 16)
    keep = code < 0x80 or 0xD800 <= code < 0xE000  # quotes, control characters and surrogate halves stay escaped
    return match.group(0) if keep else match.group(1) + chr(code)


def unescape_non_ascii(text: str) -> str:
    """``text`` with JSON ``\\uXXXX`` escapes of non-ASCII characters written out.

    Tool arguments arrive as JSON encoded with such escapes; "\\u5bc6\\u7801\\u662fhunter2" hides both the cue
    (密码是) and the boundary before a token. Writing them out keeps the JSON valid (only characters that need
    no escaping are written out).
    """
    return _ESCAPE.sub(_unescaped, text) if "\\u" in text else text


def redact_secrets(text: str) -> str:
    """Replace API keys, tokens, passwords and private keys in ``text`` with ``[REDACTED]``.

    Text without a secret comes back unchanged (the very same string); text with one comes back with its
    JSON escapes of non-ASCII characters written out (see `unescape_non_ascii`).
    """
    if not text:
        return text
    readable = unescape_non_ascii(text)
    redacted = _redact_readable(readable)
    return text if redacted is readable else redacted


def _redact_readable(text: str) -> str:
    folded: str | None = None
    present = gates_present(text)
    for index in sorted(present):  # rule order; a short text gates few of the rules, most gate none
        rule = RULES[index]
        if rule.folded:
            if folded is None:
                folded = fold_ascii(text)
            haystack = folded
        else:
            haystack = text
        if rule.prefilter is not None and rule.prefilter.search(haystack) is None:
            continue
        if rule.anchored:
            # Gates found in the text before an earlier rule redacted part of it: a superset of those left.
            matches: Iterable[re.Match[str]] = _anchored_matches(rule, haystack, present[index])
        elif rule.find is None and rule.pattern.search(haystack) is None:  # the common case, without an iterator
            continue
        else:
            matches = rule.finditer(haystack)
        redacted = _redact_matches(rule, text, matches)
        if redacted is not text:
            text, folded = redacted, None
    return text


def redact_message(value: Any) -> Any:
    """A copy of a chat message (or any JSON-like value) with every string redacted; inline ``data:`` URLs
    (images) are left as they are."""
    if isinstance(value, str):
        return value if value.startswith("data:") else redact_secrets(value)
    if isinstance(value, dict):
        return {key: redact_message(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_message(item) for item in value]
    return value
