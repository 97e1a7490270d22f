"""What `bench.reachability` looks for and how: one probe per fact, checked in the window and through the real
``search_history`` / ``read_history`` tools.

A probe is the exact text a fact leaves to find — from the ledger's own extractor or from the outside one
(`bench._independent_facts`) — with, for a command that exited non-zero, its exit code: then the window must
state the code beside the command (on one line, with an exit word), and a read must show the command and the
result's own line with the code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from agent.compression.evidence import Fact
from agent.compression.redact import redact_secrets
from bench._independent_facts import OutsideFact
from gateway.conversation.history import MAX_PAGE_CHARS, read_history_tool
from gateway.conversation.recall import MAX_QUERY_CHARS, recall_tool
from gateway.store import Store

__all__ = ["KIND_ORDER", "Probe", "RecallTools", "flat", "is_kept", "ledger_probes", "outside_probes"]

# The ledger calls a stated rule a "constraint".
_DISPLAY = {"constraint": "rule"}
KIND_ORDER = ("path", "command", "number", "error", "rule", "id", "url")
_HIT_RE = re.compile(r"^\[#(\d+) ", re.M)
_EXIT_WORDS = ("exit", "exited", "status", "returncode", "return code", "code")
READ_TOP = 3


def flat(text: str) -> str:
    """``text`` lower-cased with its whitespace collapsed: how every comparison here reads text."""
    return " ".join(text.split()).lower()


@dataclass(frozen=True, slots=True)
class Probe:
    """One fact to find: its kind (`KIND_ORDER`), its exact ``text``, the number of the message it came from,
    and for a command that exited non-zero the exit ``code`` and the result's line that states it."""

    kind: str
    text: str
    seq: int
    code: str = ""
    status: str = ""


def ledger_probes(facts: Iterable[Fact]) -> list[Probe]:
    """The ledger's facts as probes: a command without its exit note, a clipped fact without its ellipsis."""
    probes = []
    for fact in facts:
        text = fact.text.split(" → ")[0] if fact.kind == "command" else fact.text
        probes.append(Probe(_DISPLAY.get(fact.kind, fact.kind), text.removesuffix("…"), fact.seq))
    return probes


def outside_probes(facts: Iterable[OutsideFact], seq_of: dict[int, int]) -> list[Probe]:
    """The outside extractor's facts as probes (``seq_of``: message position → number). A fact that holds a
    secret is left out: the tools redact it, by design, so nothing could find it."""
    return [Probe(f.kind, f.text, seq_of[f.index], f.code, f.status) for f in facts
            if redact_secrets(f.text) == f.text and f.index in seq_of]


def _states_exit(line: str, command: str, code: str) -> bool:
    at = line.find(command)
    if at < 0:
        return False
    rest = line[at + len(command):]
    words = {w.strip(".,:;()[]<>'\"=") for w in rest.split()}
    return code in words and any(word in rest for word in _EXIT_WORDS)


def is_kept(probe: Probe, window: str, window_lines: list[str]) -> bool:
    """Whether the new window holds the probe word for word (``window`` and its ``window_lines``, `flat`)."""
    text = flat(probe.text)
    if probe.code:
        return any(_states_exit(line, text, probe.code) for line in window_lines)
    return text in window


class RecallTools:
    """The ``search_history`` and ``read_history`` tools of one session, as an agent calls them."""

    def __init__(self, store: Store, session_id: str) -> None:
        self._search = recall_tool(store, lambda: session_id).handler
        self._read = read_history_tool(store, lambda: session_id).handler

    async def search(self, query: str) -> tuple[str, list[int]]:
        """The tool's answer to ``query`` (cut to what the tool accepts) and the hits' numbers, best first."""
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS].rsplit(" ", 1)[0]
        answer = await self._search({"query": query})
        return answer, [int(n) for n in _HIT_RE.findall(answer)]

    def _shows(self, text: str, probe: Probe) -> bool:
        shown = flat(text)
        found = flat(probe.text) in shown
        return found and (not probe.status or flat(probe.status) in shown)

    async def exact(self, probe: Probe) -> bool:
        """Whether searching for the fact's own text returns it in a hit's snippet."""
        answer, _ = await self.search(probe.text)
        return flat(probe.text) in flat(answer)

    async def topic(self, probe: Probe, query: str, shift: int) -> tuple[bool, bool]:
        """(in a snippet, or in one of the top hits read once): search by ``query``; each of the top
        `READ_TOP` hits is opened by ``read_history`` (one page, the most it gives), with the ``shift``
        messages after it (before it when negative) — and the result after a command's call, for its code."""
        if not query:
            return False, False
        answer, seqs = await self.search(query)
        if self._shows(answer, probe):
            return True, True
        after = max(shift, 0) + (1 if probe.code else 0)
        for seq in seqs[:READ_TOP]:
            read = await self._read({"number": seq, "max_chars": MAX_PAGE_CHARS, "after": after,
                                     "before": max(-shift, 0)})
            if self._shows(read, probe):
                return False, True
        return False, False
