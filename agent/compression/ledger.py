"""The evidence ledger: the exact facts of every compacted middle, bounded, merged into the summary.

One fixed line per fact, ``- #SEQ LABEL: TEXT`` — short facts of one message and kind share one, ``- #SEQ
paths: a.py b.py`` (the label in the plural) — under the template section it belongs to (paths under
Relevant Files, rules under Constraints & Preferences, everything else under Critical Context), plus one
coverage line at the top of the summary saying which messages it replaced and how to look them up. The
ledger is written by this code, never by the summary model: lines of this shape in a model's summary are
removed and the deterministic ones put back, after the model's text.

Bounded newest first by a token cap that scales with the summary budget. Each kind first gets its own share
of the cap (so a flood of numbers from one log cannot push every rule out), and the rules and the errors at
least their newest entry, however small the window (a 4K model's ledger is a few hundred tokens); then what
is left goes kind by kind — rules, errors, commands, paths before identifiers, URLs and numbers — newest
first. A command that failed (a non-zero exit) counts as an error: it is the error line of its tool result.
An iterative compression parses the previous summary's ledger and carries it over; when the cap is reached,
the oldest entries go first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from agent.compression.evidence import FACT_KINDS, Fact, extract_facts
from agent.compression.messages import Message
from agent.compression.summary import SECTIONS

__all__ = [
    "LEDGER_SHARE",
    "Ledger",
    "budget_kind",
    "build_ledger",
    "coverage_line",
    "ledger_cap",
    "ledger_line",
    "ledger_lines",
    "parse_coverage",
    "parse_ledger",
    "select_facts",
    "strip_ledger",
    "with_ledger",
]

# The ledger may take up to this share of the summary budget on top of the summary itself.
LEDGER_SHARE = 1.0
# Characters of the newest messages scanned for ids, URLs and numbers per token of the cap: the scan is the
# costly part, and the facts of older text would not fit the cap anyway (they stay searchable). Paths, fewer
# and cheaper to find, are read twice as far back: an old listing's names often still fit (and those a later
# command names cost nothing).
SCAN_PER_TOKEN = 40
PATH_SCAN_PER_TOKEN = 80
LABELS = {"constraint": "rule", "error": "error", "command": "cmd", "path": "path", "id": "id", "url": "url",
          "number": "num"}
# Short facts of one message and kind share a line, which spares each its "- #57 path: " (a third of a short
# fact's tokens); the plural label says the text is a list: paths and URLs (none holds a space) separated by
# a space, which costs no token, identifiers and numbers ("3.5 s", "PR #12") by " · ".
_GROUPED_LABELS = {"path": "paths", "id": "ids", "url": "urls", "number": "nums"}
_SEPARATOR = {"path": " ", "url": " ", "id": " · ", "number": " · "}
_KIND_OF = {label: kind for kind, label in (*LABELS.items(), *_GROUPED_LABELS.items())}
SECTION_OF = {"path": "Relevant Files", "constraint": "Constraints & Preferences"}
_DEFAULT_SECTION = "Critical Context"
# First-round share of the cap per kind; rules and errors are few and precious, numbers many and cheap.
_QUOTA = {"constraint": 0.15, "error": 0.2, "command": 0.3, "path": 0.2, "id": 0.05, "url": 0.05, "number": 0.05}
# Kinds whose newest entry goes in even when it alone is larger than the kind's share (while the cap allows).
_AT_LEAST_ONE = frozenset({"constraint", "error"})
# What is left of the cap goes to the kinds in this order: paths before commands, as a path costs a few tokens
# on a shared line and a command a line of its own.
_LEFTOVER_ORDER = ("constraint", "error", "path", "command", "id", "url", "number")
# A path stands whole in a text when no name character comes right before it nor after it ("." only when a name
# goes on after it: "a.py" is whole at a sentence's end, not in "a.py.bak").
_PATH_CHAR_RE = re.compile(r"[\w.+@-]")
_NAME_GOES_ON_RE = re.compile(r"[\w+@-]|\.[\w+@-]")
# A run of name characters without the dots it ends with.
_WORD_RE = re.compile(r"[\w.+@-]*[\w+@-]")
# Passes over what is left of the cap: each may free room by leaving out paths a later choice names whole.
_REFILLS = 2
_FAILED_RE = re.compile(r" → (?:exit (?!0$)-?\d+|failed)$")

_LINE_RE = re.compile(rf"^- #(\d+) ({'|'.join(sorted(_KIND_OF, key=len, reverse=True))}): (.+)$")
_COVERAGE_RE = re.compile(r"^Messages #(\d+)–#(\d+) of this conversation were compacted\b.*$")
# The title steps over runs of blanks and stars whole and the end is read without going back (the shortest title
# never ends inside such a run): the plain `(.+?)\s*\**\s*:?\s*$` tried every split of a run of blanks, 19 s for
# a summary line of 400 (a small model that loops writes such lines).
_HEADER_RE = re.compile(r"^\s*#{1,4}\s*\**\s*(.(?:[^\S\n]++|\*++|[^\s*])*?)\s*+\**+\s*+:?+\s*+$")
_NONE_RE = re.compile(r"^\s*(?:[-*]\s*)?(?:none|n/a|nothing)\.?\s*$", re.I)
_SECTION_ORDER = [title for title, _ in SECTIONS]
_SECTION_ORDER_LOWERED = [(title, title.lower()) for title in _SECTION_ORDER]
_BLANK_RUN_RE = re.compile(r"\n{3,}")


def ledger_cap(summary_budget: int) -> int:
    """Tokens the ledger may use for a summary of ``summary_budget`` tokens."""
    return int(summary_budget * LEDGER_SHARE)


def ledger_line(fact: Fact) -> str:
    """The one fixed line of a fact."""
    return f"- #{fact.seq} {LABELS[fact.kind]}: {fact.text}"


def _groupable(fact: Fact) -> bool:
    separator = _SEPARATOR.get(fact.kind)
    if separator is None:
        return False
    return fact.text.split() == [fact.text] if separator == " " else separator not in fact.text


def ledger_lines(facts: Sequence[Fact]) -> list[str]:
    """The lines of ``facts``, in their order: a line per fact, the short facts of one message and kind on the
    line of the first of them."""
    groupable = [_groupable(fact) for fact in facts]
    groups: dict[tuple[int, str], list[Fact]] = {}
    for fact, short in zip(facts, groupable, strict=True):
        if short:
            groups.setdefault((fact.seq, fact.kind), []).append(fact)
    lines: list[str] = []
    for fact, short in zip(facts, groupable, strict=True):
        group = groups.pop((fact.seq, fact.kind), None) if short else [fact]
        if group is None:
            continue  # on its group's line already
        if len(group) == 1:
            lines.append(ledger_line(fact))
        else:
            texts = _SEPARATOR[fact.kind].join(f.text for f in group)
            lines.append(f"- #{fact.seq} {_GROUPED_LABELS[fact.kind]}: {texts}")
    return lines


def coverage_line(first: int, last: int) -> str:
    """The summary's first line: which messages it replaced, and how to get them back word for word instead of
    guessing (the hint lives here, in the summary, so the system prompt never changes at a compaction)."""
    return (f"Messages #{first}–#{last} of this conversation were compacted and are kept word for word: look up "
            f"exact values from them (ids, numbers, error texts, constraints) with search_history, and open one "
            f"whole by its number (#N below) with read_history, instead of guessing.")


def parse_coverage(body: str | None) -> tuple[int, int] | None:
    """(first, last) message numbers of a summary's coverage line, None when it has none."""
    for line in (body or "").splitlines():
        match = _COVERAGE_RE.match(line.strip())
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def parse_ledger(body: str | None) -> list[Fact]:
    """The ledger facts written into a summary body, in the order they appear."""
    facts: list[Fact] = []
    for line in (body or "").splitlines():
        match = _LINE_RE.match(line.strip())
        if match:
            label, seq = match.group(2), int(match.group(1))
            kind = _KIND_OF[label]
            texts = match.group(3).split(_SEPARATOR[kind]) if label in _GROUPED_LABELS.values() else [match.group(3)]
            facts.extend(Fact(kind, text, seq) for text in texts if text)
    return facts


def strip_ledger(body: str) -> str:
    """``body`` without ledger and coverage lines (a model may echo them; only ours are kept)."""
    lines = [line for line in body.splitlines()
             if not _LINE_RE.match(line.strip()) and not _COVERAGE_RE.match(line.strip())]
    return "\n".join(lines).strip()


def merge_facts(older: Iterable[Fact], newer: Iterable[Fact]) -> list[Fact]:
    """One list, each (kind, text) once at its newest message number, ordered by message number."""
    best: dict[tuple[str, str], Fact] = {}
    for fact in (*older, *newer):
        key = (fact.kind, fact.text)
        if key not in best or fact.seq >= best[key].seq:
            best[key] = fact
    return sorted(best.values(), key=lambda f: f.seq)


def budget_kind(fact: Fact) -> str:
    """The kind whose share a fact takes: its own, but a command that failed is its result's error line."""
    return "error" if fact.kind == "command" and _FAILED_RE.search(fact.text) else fact.kind


def _whole_at(written: str, at: int, end: int) -> bool:
    """Whether ``written[at:end]`` is a whole path, not part of a longer name ("a.py" in "data.py" or in
    "a.py.bak"): a directory of a longer path ("src/pkg" in "src/pkg/a.py") or a file's name in one is whole."""
    before, after = written[at - 1 : at] if at else "", written[end : end + 2]
    return not (_PATH_CHAR_RE.match(before) or _NAME_GOES_ON_RE.match(after))


def _named_in(text: str, written: str) -> bool:
    """Whether the path ``text`` stands whole in ``written``."""
    at = written.find(text)
    while at >= 0:
        if _whole_at(written, at, at + len(text)):
            return True
        at = written.find(text, at + 1)
    return False


def _words(text: str) -> frozenset[str]:
    """The runs of name characters in ``text`` (the dots they end with cut off): a path standing whole in a
    text has each of its own among them."""
    return frozenset(_WORD_RE.findall(text))


class _Selection:
    """The facts chosen so far (indices into ``facts``), what each costs, and which chosen facts hold each word
    (a path is searched for only in the texts that hold its rarest word)."""

    def __init__(self, facts: Sequence[Fact], cost: Callable[[str], int],
                 text_cost: Callable[[str], int] | None) -> None:
        self.facts, self._cost = facts, cost
        self._text_cost = text_cost or (lambda text: cost(" " + text))
        self._heads: dict[str, int] = {}  # a line's start ("- #57 path:", " ·") → its cost
        self._groupable = [_groupable(fact) for fact in facts]
        self.chosen: dict[int, int] = {}  # index → the order it was chosen in (only compared: later is larger)
        self._next = 0
        self._opened: set[tuple[int, str]] = set()  # the (message, kind) lines a chosen short fact has started
        self._holders: dict[str, list[int]] = {}  # word → the chosen facts whose text holds it
        self._words: dict[int, frozenset[str]] = {}
        self._prices: dict[tuple[int, bool], int] = {}

    def words(self, index: int) -> frozenset[str]:
        """`_words` of a fact's text."""
        found = self._words.get(index)
        if found is None:
            found = self._words[index] = _words(self.facts[index].text)
        return found

    def _head(self, head: str) -> int:
        cost = self._heads.get(head)
        if cost is None:
            cost = self._heads[head] = self._cost(head)
        return cost

    def _price(self, index: int, joins: bool) -> int:
        """The cost of the fact's line (or of its place on a line started): that of the line's start ("- #57
        path:", or a separator's " ·") plus that of " " + its text. The tokenizers split a text into pieces before
        they encode them, and a ":" (or "·") that a space follows always ends a piece, whatever comes after it
        (the tests hold both encodings to it on the corpus's facts and on generated text); so many facts share
        the count of a start, and a text's count may be known already (`evidence.fact_tokens`)."""
        if (index, joins) not in self._prices:
            fact = self.facts[index]
            text = self._text_cost(fact.text)
            if joins:
                separator = _SEPARATOR[fact.kind].rstrip()
                price = text + (self._head(separator) if separator else 0)
            else:
                label = _GROUPED_LABELS[fact.kind] if self._groupable[index] else LABELS[fact.kind]
                price = self._head(f"- #{fact.seq} {label}:") + text + 1
            self._prices[index, joins] = price
        return self._prices[index, joins]

    def price(self, index: int) -> int:
        """What the fact adds: its own line (a list's line, for a short one), or its place on a line started."""
        fact = self.facts[index]
        return self._price(index, self._groupable[index] and (fact.seq, fact.kind) in self._opened)

    def _namers(self, index: int) -> list[int]:
        """The chosen facts that may name a path whole: those holding its rarest word ([] when one is held by
        none)."""
        rarest: list[int] | None = None
        for word in self.words(index):
            holders = self._holders.get(word)
            if not holders:
                return []  # (most paths: a word no chosen fact holds)
            if rarest is None or len(holders) < len(rarest):
                rarest = holders
        return rarest or []

    def named(self, index: int, *, chosen_after: int = -1) -> bool:
        """Whether the fact is a path that the chosen facts (those chosen after the ``chosen_after``-th) already
        name whole (it would add nothing)."""
        fact = self.facts[index]
        return fact.kind == "path" and any(self.chosen[j] > chosen_after and _named_in(fact.text, self.facts[j].text)
                                           for j in self._namers(index))

    def take(self, index: int) -> None:
        """Choose the fact."""
        fact = self.facts[index]
        self.chosen[index] = self._next
        self._next += 1
        for word in self.words(index):
            self._holders.setdefault(word, []).append(index)
        if self._groupable[index]:
            self._opened.add((fact.seq, fact.kind))

    def drop_named(self) -> int | None:
        """Leave out each chosen path that a fact chosen after it names whole (a longer path, a command); what
        the rest costs, or None when none was left out. (One chosen before it would have named it then.)"""
        named = [i for i, order in self.chosen.items() if self.named(i, chosen_after=order)]
        if not named:
            return None
        # The rest stay chosen in their order; only what the named paths added is taken back.
        for index in named:
            del self.chosen[index]
            for word in self.words(index):
                self._holders[word].remove(index)
        self._opened = {(self.facts[i].seq, self.facts[i].kind) for i in self.chosen if self._groupable[i]}
        return self._cost_of(list(self.chosen))

    def _cost_of(self, indices: list[int]) -> int:
        """What the facts cost together: in message order, each line's first fact pays for the line."""
        started: set[tuple[int, str]] = set()
        used = 0
        for index in sorted(indices):
            fact = self.facts[index]
            joins = self._groupable[index] and (fact.seq, fact.kind) in started
            used += self._price(index, joins)
            if self._groupable[index]:
                started.add((fact.seq, fact.kind))
        return used


def select_facts(facts: Sequence[Fact], cap_tokens: int, cost: Callable[[str], int],
                 text_cost: Callable[[str], int] | None = None) -> list[Fact]:
    """The facts that fit ``cap_tokens``: newest first per kind within its quota (the newest rule and error
    even beyond it), then the rest of the cap kind by kind (in `FACT_KINDS` order), newest first; returned in
    message order. A failed command takes the errors' share (`budget_kind`). A path that a chosen fact names
    whole (a command's argument, a directory of a longer path, a file's name in one) is in the window already
    and is not written again: what it would have cost goes to the facts after it.

    ``cost`` counts a text's tokens (a line as its start and its text apart, `_Selection._price`);
    ``text_cost(text)``: ``cost(" " + text)``, where the caller keeps those counts (`evidence.fact_tokens`)."""
    by_kind: dict[str, list[int]] = {kind: [] for kind in FACT_KINDS}
    for index, fact in enumerate(facts):
        by_kind[budget_kind(fact)].append(index)
    pick = _Selection(facts, cost, text_cost)
    used = 0
    for kind in FACT_KINDS:
        quota, spent = int(cap_tokens * _QUOTA[kind]), 0
        for index in reversed(by_kind[kind]):
            if pick.named(index):
                continue
            price = pick.price(index)
            beyond_share = spent + price > quota and not (not spent and kind in _AT_LEAST_ONE)
            if beyond_share or used + spent + price > cap_tokens:
                break
            pick.take(index)
            spent += price
        used += spent
    # What is left goes kind by kind in the same order (what a continuing agent needs most first), newest first;
    # then what the paths named by later choices leave free, again.
    for _ in range(_REFILLS):
        for kind in _LEFTOVER_ORDER:
            for index in reversed(by_kind[kind]):
                if index in pick.chosen:
                    continue
                price = pick.price(index)
                # (Whether a path is named already is asked only of one that fits: it is the costly check.)
                if used + price <= cap_tokens and not pick.named(index):
                    pick.take(index)
                    used += price
        freed = pick.drop_named()
        if freed is None:
            break
        used = freed
    return [facts[i] for i in sorted(pick.chosen)]


def _section_bounds(lines: list[str]) -> dict[str, tuple[int, int]]:
    """Template section title → (header line, end line exclusive) as found in ``lines``."""
    headers: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        match = _HEADER_RE.match(line)
        if match:
            headers.append((i, match.group(1).strip()))
    bounds: dict[str, tuple[int, int]] = {}
    for n, (i, title) in enumerate(headers):
        end = headers[n + 1][0] if n + 1 < len(headers) else len(lines)
        lowered = title.lower()
        for known, known_lowered in _SECTION_ORDER_LOWERED:
            if lowered.startswith(known_lowered) and known not in bounds:
                bounds[known] = (i, end)
    return bounds


def _insert_section(lines: list[str], title: str, entries: list[str]) -> list[str]:
    bounds = _section_bounds(lines)
    if title in bounds:
        start, end = bounds[title]
        body = [line for line in lines[start + 1 : end] if not _NONE_RE.match(line)]
        while body and not body[-1].strip():
            body.pop()
        return [*lines[:start + 1], *body, *entries, "", *lines[end:]]
    later = [bounds[t][0] for t in _SECTION_ORDER[_SECTION_ORDER.index(title) + 1 :] if t in bounds]
    at = min(later) if later else len(lines)
    return [*lines[:at], "", f"## {title}", *entries, "", *lines[at:]]


def with_ledger(body: str, facts: Sequence[Fact], coverage: tuple[int, int] | None) -> str:
    """``body`` with the coverage line first and each fact's line at the end of its section (sections the
    body lacks are added in template order); earlier ledger lines in ``body`` are replaced, and a bullet that
    is only a fact's text (the static summary's file list) gives way to the fact's line."""
    known = {fact.text for fact in facts}
    lines = [line for line in strip_ledger(body).splitlines()
             if not (line.startswith("- ") and line[2:].strip() in known)]
    for title in ("Constraints & Preferences", "Relevant Files", _DEFAULT_SECTION):
        entries = ledger_lines([f for f in facts if SECTION_OF.get(f.kind, _DEFAULT_SECTION) == title])
        if entries:
            lines = _insert_section(lines, title, entries)
    text = "\n".join(lines).strip()
    text = _BLANK_RUN_RE.sub("\n\n", text)
    return f"{coverage_line(*coverage)}\n\n{text}" if coverage else text


@dataclass(frozen=True, slots=True)
class Ledger:
    """The bounded facts of one compaction and the messages it covers; `merge` puts them into a body."""

    facts: tuple[Fact, ...]
    coverage: tuple[int, int] | None

    def merge(self, body: str) -> str:
        """``body`` (an LLM or static summary) with this ledger merged in after its text."""
        return with_ledger(body, self.facts, self.coverage)


def build_ledger(middle: Sequence[Message], numbers: Sequence[int], *, previous_summary: str | None,
                 cap_tokens: int, cost: Callable[[str], int], text_cost: Callable[[str], int] | None = None) -> Ledger:
    """The ledger for a compaction of ``middle`` (``numbers[i]`` numbering ``middle[i]``): its own facts plus
    the previous summary's ledger, bounded newest first to ``cap_tokens``; coverage runs from the previous
    summary's first message to the middle's last. ``cost`` and ``text_cost`` as for `select_facts`."""
    fresh = extract_facts(middle, lambda i: numbers[i], scan_chars=cap_tokens * SCAN_PER_TOKEN,
                          path_chars=cap_tokens * PATH_SCAN_PER_TOKEN)
    facts = select_facts(merge_facts(parse_ledger(previous_summary), fresh), cap_tokens, cost, text_cost)
    earlier = parse_coverage(previous_summary)
    coverage = None
    if numbers:
        first = min(earlier[0], numbers[0]) if earlier else numbers[0]
        coverage = (first, numbers[-1])
    return Ledger(tuple(facts), coverage)
