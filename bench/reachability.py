"""Can the agent still reach every exact fact after a compaction? Over every corpus transcript
(``bench.corpus``).

    python -m bench.reachability                 # every corpus, static summary, up to 25 facts per kind each
    python -m bench.reachability --sample 0      # every fact (slow)
    python -m bench.reachability --kinds irc     # one corpus

Each transcript is stored as a session, compressed once through the store (window = the transcript's own
size, static summary, so it runs without a model; the archived rows exist as in a live gateway), and then:
- facts: the evidence extractor's exact facts of the compacted middle (paths, commands, numbers, errors,
  constraints; ids and URLs too) that occur nowhere in the kept head and tail — what compaction put at risk;
- kept: the fact is in the new window word for word (the summary with its evidence ledger);
- exact: ``search_history`` with the fact itself returns it in a snippet;
- topic: ``search_history`` with two distinctive words of the message that held the fact (the rarest words
  of that message in its transcript, none taken from the fact) returns it in a snippet; ``+read``: it is in
  one of the top 3 hits opened whole (``read_history``). A message that is the fact and little else (a
  one-line chat message, a bare error output) has no other words: its query comes from the nearest of the
  three messages before it (then the two after it), and each hit is opened with its neighbours up to the fact
  (``read_history`` with ``after`` / ``before``);
- reachable: kept, or topic + read — what an agent that does not know the value can get.
Per corpus and fact kind, with the compression ratio (all transcripts, and those over 100K tokens). LoCoMo's
questions: how many evidence turns of the compacted middle (LoCoMo's own labels) are in the top 5 hits of a
search by the question as asked, and by two of its distinctive words (target ≥ 50%, issue 31).
Targets (issue 16): kept ≥ 90% for paths and commands, ≥ 80% for errors and constraints; reachable by
topic + read ≥ 95% for every kind; compression ≥ 5× on transcripts over 100K tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.compression.evidence import FACT_KINDS, Fact, extract_facts
from agent.compression.messages import plain_text
from agent.compression.redact import redact_secrets
from agent.tokens import get_counter
from bench.corpus import KINDS, Transcript, iter_transcripts
from bench.locomo_search import QUESTION, evidence_hits, variants
from bench.locomo_search import TARGET as LOCOMO_TARGET
from bench.locomo_search import TOP as LOCOMO_TOP
from gateway.rerank import meaning_rerank
from gateway.store import Store

__all__ = ["Cell", "TranscriptResult", "main", "measure_transcript", "probe_of", "topic_query"]

Messages = list[dict[str, Any]]
TARGET_KEPT = {"path": 0.90, "command": 0.90, "error": 0.80, "constraint": 0.80}
TARGET_REACHABLE = 0.95
TARGET_RATIO = 5.0
LONG_TOKENS = 100_000
# Whole words of letters as the word index splits them (not the tail of a hex id such as 0x7f3a…).
_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{4,}(?![A-Za-z0-9])")
_STOP = frozenset("""
about above after again against also among another because been before being below between both could does
doing down during each either every from further have having here hers herself himself into itself just
might more most must myself never none only other ought ours over same shall should some such than that
their theirs them themselves then there these they this those through under until very want were what when
where which while whom will with within without would your yours yourself yeah okay sure thanks thank please
""".split())
_READ_TOP = 3
_LOOK_BACK = 3
_LOOK_AHEAD = 2
_COMMON_SHARE = 0.2


@dataclass
class Cell:
    """Counts for one (corpus, fact kind)."""

    facts: int = 0
    kept: int = 0
    exact: int = 0
    topic: int = 0
    topic_read: int = 0
    reachable: int = 0

    def add(self, other: Cell) -> None:
        """Accumulate ``other`` into this cell."""
        for name in ("facts", "kept", "exact", "topic", "topic_read", "reachable"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class TranscriptResult:
    """What one transcript contributed."""

    cells: dict[str, Cell]
    tokens_before: int
    tokens_after: int
    evidence: Counter[str] = field(default_factory=Counter)  # LoCoMo: "turns", and found per query variant


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def probe_of(fact: Fact) -> str:
    """The exact text to look for: a command without its exit note, a clipped fact without its ellipsis."""
    text = fact.text.split(" → ")[0] if fact.kind == "command" else fact.text
    return text.removesuffix("…")


def topic_query(source: str, probe: str, document_frequency: Counter[str], messages: int = 0) -> str:
    """Two distinctive words of ``source`` that are not part of ``probe``: the rarest in the transcript
    (then the longest), leaving out words in more than a fifth of its ``messages`` (a wrapper such as
    "returncode" in every tool output distinguishes nothing); '' when the message has no such word."""
    inside = _flat(probe)
    words = {w.lower() for w in _WORD.findall(source)} - _STOP
    common = messages * _COMMON_SHARE if messages else float("inf")
    candidates = [w for w in words if w not in inside and document_frequency[w] <= common]
    candidates.sort(key=lambda w: (document_frequency[w], -len(w), w))
    return " ".join(candidates[:2])


def _topic(texts: dict[int, str], seq: int, probe: str, frequency: Counter[str]) -> tuple[str, int]:
    """(query, offset of the fact from the message the query comes from). A message that is the fact and
    little else (a one-line chat message, a bare error output) has no topic words of its own: the query comes
    from the nearest of the three messages before it (then the two after it) that has two, and each hit is
    opened with its neighbours up to the fact."""
    own = topic_query(texts[seq], probe, frequency, len(texts))
    if len(own.split()) >= 2:
        return own, 0
    for shift in (*range(1, _LOOK_BACK + 1), *range(-1, -_LOOK_AHEAD - 1, -1)):
        query = topic_query(texts.get(seq - shift, ""), probe, frequency, len(texts))
        if len(query.split()) >= 2:
            return query, shift
    return own, 0


def _sample(facts: list[Fact], limit: int) -> list[Fact]:
    if limit <= 0 or len(facts) <= limit:
        return facts
    step = len(facts) / limit
    return [facts[int(i * step)] for i in range(limit)]


async def _store_and_compress(store: Store, transcript: Transcript) -> tuple[str, Messages, Any, int]:
    """Store the transcript, compress it once, persist the result; (session id, framed input, result, first seq)."""
    counter = get_counter()
    messages = transcript.messages
    system = messages[:1] if messages and messages[0].get("role") == "system" else []
    body = messages[len(system):]
    record = await store.sessions.get_or_create_active("bench", f"{transcript.corpus}:{transcript.name}")
    await store.messages.append(record.id, body, [counter.count_message(m) for m in body])
    active = await store.messages.load_active(record.id)
    framed = [*system, *active.messages]
    compressor = ContextCompressor(context_length=max(counter.count_messages(framed), 4_000), summary_provider=None)
    first_seq = active.watermark - len(active.messages) + 1
    compressor.number_messages(first_seq)
    result = await compressor.compress(framed, force=True)
    if result.compressed:
        kept = [m for m in result.messages if m.get("role") != "system"] if system else list(result.messages)
        await store.compactions.replace_active(record.id, kept, [counter.count_message(m) for m in kept],
                                               active.watermark)
    return record.id, framed, result, first_seq


async def _found_in(store: Store, session_id: str, query: str, probe: str, *,
                    shift: int = 0) -> tuple[bool, bool]:
    """(probe in a hit's snippet, probe in one of the top hits read whole — with the ``shift`` messages
    after it, or before it when negative)."""
    if not query:
        return False, False
    hits = await store.search(query, session_ids=[session_id], skip_active_of=session_id, limit=8,
                              redact=redact_secrets)
    flat = _flat(probe)
    in_snippet = any(flat in _flat(h.snippet) for h in hits)
    if in_snippet:
        return True, True
    for hit in hits[:_READ_TOP]:
        opened = await store.messages.around([session_id], hit.seq, after=max(shift, 0), before=max(-shift, 0))
        if any(flat in _flat(redact_secrets(plain_text(r.message))) for r in opened):
            return False, True
    return False, False


async def measure_transcript(store: Store, transcript: Transcript, sample: int) -> TranscriptResult:
    """Compress one transcript through ``store`` and score its facts (see the module docstring)."""
    session_id, framed, result, first_seq = await _store_and_compress(store, transcript)
    cells: dict[str, Cell] = defaultdict(Cell)
    if not result.compressed:
        return TranscriptResult(cells, result.tokens_before, result.tokens_after)
    offset = 1 if framed and framed[0].get("role") == "system" else 0
    head, tail = framed[: result.head_end], framed[result.tail_start :]
    middle = framed[result.head_end : result.tail_start]
    outside = _flat("\n".join(plain_text(m) for m in (*head, *tail)))
    window = _flat("\n".join(plain_text(m) for m in result.messages))
    texts = {first_seq + i - offset: plain_text(m) for i, m in enumerate(framed) if i >= offset}
    frequency: Counter[str] = Counter()
    for text in texts.values():
        frequency.update({w.lower() for w in _WORD.findall(text)})
    facts = extract_facts(middle, lambda i: first_seq + result.head_end + i - offset)
    at_risk: dict[str, list[Fact]] = defaultdict(list)
    for fact in facts:
        probe = probe_of(fact)
        if len(probe) >= 3 and _flat(probe) not in outside:
            at_risk[fact.kind].append(fact)
    for kind, kind_facts in at_risk.items():
        cell = cells[kind]
        for fact in _sample(kind_facts, sample):
            probe = probe_of(fact)
            cell.facts += 1
            kept = _flat(probe) in window
            cell.kept += kept
            exact, _ = await _found_in(store, session_id, probe, probe)
            cell.exact += exact
            query, shift = _topic(texts, fact.seq, probe, frequency)
            topic, read = await _found_in(store, session_id, query, probe, shift=shift)
            cell.topic += topic
            cell.topic_read += read
            cell.reachable += kept or read
    scored = TranscriptResult(cells, result.tokens_before, result.tokens_after)
    if transcript.corpus == "locomo":
        await _locomo(store, session_id, transcript, scored, result, offset, first_seq, frequency)
    return scored


async def _locomo(store: Store, session_id: str, transcript: Transcript, scored: TranscriptResult, result: Any,
                  offset: int, first_seq: int, frequency: Counter[str]) -> None:
    """Evidence turns of the compacted middle (LoCoMo's own labels) in the top hits of a search by the question's
    own words (`bench.locomo_search`)."""
    index: dict[str, int] = transcript.meta.get("dia_index", {})

    def seq_of(evidence: str) -> int | None:
        at = index.get(evidence)
        return first_seq + at - offset if at is not None and result.head_end <= at < result.tail_start else None

    def two_words(question: str, answer: str) -> str:
        return topic_query(question, answer, frequency, len(index))

    scored.evidence.update(await evidence_hits(store, session_id, transcript, seq_of, meaning_rerank(), two_words))


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:6.1%}" if whole else "     -"


def _print_table(rows: dict[str, dict[str, Cell]]) -> dict[str, Cell]:
    print(f"{'corpus':<14}{'kind':<12}{'facts':>7}{'kept':>8}{'exact':>8}{'topic':>8}{'topic+read':>12}"
          f"{'reachable':>11}")
    totals: dict[str, Cell] = defaultdict(Cell)
    for corpus, cells in rows.items():
        for kind in FACT_KINDS:
            cell = cells.get(kind)
            if cell is None or not cell.facts:
                continue
            totals[kind].add(cell)
            print(f"{corpus:<14}{kind:<12}{cell.facts:>7}{_pct(cell.kept, cell.facts):>8}"
                  f"{_pct(cell.exact, cell.facts):>8}{_pct(cell.topic, cell.facts):>8}"
                  f"{_pct(cell.topic_read, cell.facts):>12}{_pct(cell.reachable, cell.facts):>11}")
    for kind in FACT_KINDS:
        cell = totals.get(kind)
        if cell is not None and cell.facts:
            print(f"{'all':<14}{kind:<12}{cell.facts:>7}{_pct(cell.kept, cell.facts):>8}"
                  f"{_pct(cell.exact, cell.facts):>8}{_pct(cell.topic, cell.facts):>8}"
                  f"{_pct(cell.topic_read, cell.facts):>12}{_pct(cell.reachable, cell.facts):>11}")
    return totals


def _verdicts(totals: dict[str, Cell], long_ratio: float | None) -> list[str]:
    lines = []
    for kind, target in TARGET_KEPT.items():
        cell = totals.get(kind)
        if cell and cell.facts:
            share = cell.kept / cell.facts
            lines.append(f"kept {kind}: {share:.1%} (target ≥ {target:.0%}) {'met' if share >= target else 'NOT met'}")
    for kind in FACT_KINDS:
        cell = totals.get(kind)
        if cell and cell.facts:
            share = cell.topic_read / cell.facts
            lines.append(f"topic+read {kind}: {share:.1%} (target ≥ {TARGET_REACHABLE:.0%}) "
                         f"{'met' if share >= TARGET_REACHABLE else 'NOT met'}")
    if long_ratio is not None:
        lines.append(f"compression over {LONG_TOKENS // 1000}K tokens: {long_ratio:.1f}× (target ≥ {TARGET_RATIO:.0f}×) "
                     f"{'met' if long_ratio >= TARGET_RATIO else 'NOT met'}")
    return lines


async def run(kinds: Iterable[str], sample: int, root: Path | None = None) -> int:
    """Measure every transcript of ``kinds`` and print the tables; 0 (figures, not a pass/fail test)."""
    rows: dict[str, dict[str, Cell]] = defaultdict(lambda: defaultdict(Cell))
    ratios: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    long_before = long_after = 0
    evidence: Counter[str] = Counter()
    with tempfile.TemporaryDirectory(prefix="concord-reach-") as tmp:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp}/reach.db")
        try:
            for transcript in iter_transcripts(root, kinds=kinds):
                scored = await measure_transcript(store, transcript, sample)
                for kind, cell in scored.cells.items():
                    rows[transcript.corpus][kind].add(cell)
                figures = ratios[transcript.corpus]
                figures[0] += 1
                figures[1] += scored.tokens_before
                figures[2] += scored.tokens_after
                if scored.tokens_before > LONG_TOKENS:
                    long_before += scored.tokens_before
                    long_after += scored.tokens_after
                evidence.update(scored.evidence)
        finally:
            await store.aclose()
    if not ratios:
        print("bench.reachability: corpus not found; nothing to measure")
        return 0
    totals = _print_table(rows)
    print()
    for corpus, (count, before, after) in ratios.items():
        print(f"{corpus:<14}{count:>4} transcripts  {before:>10,} → {after:>9,} tokens  "
              f"{before / max(after, 1):5.1f}×")
    long_ratio = long_before / long_after if long_after else None
    if long_ratio is not None:
        print(f"{'> 100K tokens':<18}  {long_before:>10,} → {long_after:>9,} tokens  {long_ratio:5.1f}×")
    if evidence["turns"]:
        print(f"\nLoCoMo evidence turns in the compacted middle: {evidence['turns']:,}; in the top {LOCOMO_TOP} hits "
              f"of a search by")
        for name in variants(meaning_rerank(), two_words=True):
            share = evidence[name] / evidence["turns"]
            print(f"  {name:<42}{share:6.1%}" + (f"  (target ≥ {LOCOMO_TARGET:.0%}) {'met' if share >= LOCOMO_TARGET else 'NOT met'}"
                                                 if name == QUESTION else ""))
    print()
    print("\n".join(_verdicts(totals, long_ratio)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.reachability", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--sample", type=int, default=25,
                        help="facts scored per kind and transcript, evenly spread (0 = all; default 25)")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.kinds, args.sample))


if __name__ == "__main__":
    raise SystemExit(main())
