"""Can the agent still reach every exact fact after a compaction? Over every corpus transcript
(``bench.corpus``), for two sets of facts side by side: the ledger's own and an outside extractor's.

    python -m bench.reachability                     # every corpus, up to 25 facts per kind and transcript
    python -m bench.reachability --part held-out     # the third of the transcripts nothing was tuned on
    python -m bench.reachability --kinds irc --misses 5    # one corpus, with 5 missed facts per kind shown
    python -m bench.reachability --sample 0          # every fact (slow)

Each transcript is stored as a session, compressed once through the store (window = the transcript's own
size, static summary, so it runs without a model; the archived rows exist as in a live gateway), and then,
for each fact of the compacted middle that occurs nowhere in the kept head and tail (what compaction put at
risk):
- facts, two sets: the **ledger**'s (its own extractor: paths, commands, numbers, errors, rules; ids and URLs
  too), which measures the ledger against its own reading, and the **outside** set
  (`bench._independent_facts`: line and token heuristics written apart from the ledger, its precision and
  recall tested on a hand-labelled sample), which measures what the ledger misses;
- kept: the fact is in the new window word for word (the summary with its evidence ledger); a command that
  exited non-zero is kept when one line states the command with its exit code;
- exact: the real ``search_history`` tool, asked for the fact itself, shows it in a snippet;
- topic + read: ``search_history`` with two distinctive words of the message that held the fact (the rarest
  words of that message in its transcript, none taken from the fact) shows it in a snippet, or one of the
  top 3 hits, opened once with ``read_history`` (one page, the most it gives), shows it. A message that is the
  fact and little else (a one-line chat message, a bare error output) has no other words: its query comes
  from the nearest of the three messages before it (then the two after it), and each hit is opened with its
  neighbours up to the fact (``after`` / ``before``); a command's exit code is read with the result after it;
- reachable: kept, or topic + read — what an agent that does not know the value can get.
Per corpus and fact kind, with the compression ratio (all transcripts, and those over 100K tokens). LoCoMo's
questions: how many evidence turns of the compacted middle (LoCoMo's own labels) are in the top 5 hits of a
search by the question as asked, and by two of its distinctive words (target ≥ 50%).
Targets on the outside set: kept ≥ 90% for paths and commands, ≥ 80% for errors and rules; reachable ≥ 95% for
every kind; compression ≥ 5× on transcripts over 100K tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.compression.evidence import extract_facts
from agent.compression.messages import plain_text
from agent.tokens import get_counter
from bench._independent_facts import outside_facts
from bench._reach_probe import (
    KIND_ORDER,
    READ_TOP,
    Probe,
    RecallTools,
    flat,
    is_kept,
    ledger_probes,
    outside_probes,
)
from bench.corpus import KINDS, Transcript, iter_transcripts
from bench.locomo_search import QUESTION, evidence_hits, variants
from bench.locomo_search import TARGET as LOCOMO_TARGET
from bench.locomo_search import TOP as LOCOMO_TOP
from gateway.conversation.rerank import meaning_rerank
from gateway.store import Store

__all__ = ["FACT_SETS", "Cell", "TranscriptResult", "held_out", "main", "measure_transcript", "topic_query"]

Messages = list[dict[str, Any]]
FACT_SETS = ("ledger", "outside")
TARGET_KEPT = {"path": 0.90, "command": 0.90, "error": 0.80, "rule": 0.80}
TARGET_REACHABLE = 0.95
TARGET_RATIO = 5.0
LONG_TOKENS = 100_000
PARTS = ("all", "held-out", "dev")
# Whole words of letters as the word index splits them (not the tail of a hex id such as 0x7f3a…).
_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{4,}(?![A-Za-z0-9])")
_STOP = frozenset("""
about above after again against also among another because been before being below between both could does
doing down during each either every from further have having here hers herself himself into itself just
might more most must myself never none only other ought ours over same shall should some such than that
their theirs them themselves then there these they this those through under until very want were what when
where which while whom will with within without would your yours yourself yeah okay sure thanks thank please
""".split())
_READ_TOP = READ_TOP
_LOOK_BACK = 3
_LOOK_AHEAD = 2
_COMMON_SHARE = 0.2


@dataclass
class Cell:
    """Counts for one (corpus, fact set, kind)."""

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
    """What one transcript contributed: ``cells[fact set][kind]``, and the outside facts it missed
    (not kept, not reachable)."""

    cells: dict[str, dict[str, Cell]]
    tokens_before: int
    tokens_after: int
    evidence: Counter[str] = field(default_factory=Counter)  # LoCoMo: "turns", and found per query variant
    missed: list[tuple[str, Probe, bool]] = field(default_factory=list)


def held_out(transcript: Transcript) -> bool:
    """Whether ``transcript`` is in the third nothing was tuned on (the labelled sample of the outside
    extractor and the ledger's patterns were worked out on the other two thirds)."""
    return zlib.crc32(f"{transcript.corpus}:{transcript.name}".encode()) % 3 == 0


def topic_query(source: str, probe: str, document_frequency: Counter[str], messages: int = 0) -> str:
    """Two distinctive words of ``source`` that are not part of ``probe``: the rarest in the transcript
    (then the longest), leaving out words in more than a fifth of its ``messages`` (a wrapper such as
    "returncode" in every tool output distinguishes nothing); '' when the message has no such word."""
    inside = flat(probe)
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


def _sample(probes: list[Probe], limit: int) -> list[Probe]:
    if limit <= 0 or len(probes) <= limit:
        return probes
    step = len(probes) / limit
    return [probes[int(i * step)] for i in range(limit)]


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


async def measure_transcript(store: Store, transcript: Transcript, sample: int) -> TranscriptResult:
    """Compress one transcript through ``store`` and score both fact sets (see the module docstring)."""
    session_id, framed, result, first_seq = await _store_and_compress(store, transcript)
    cells: dict[str, dict[str, Cell]] = {name: defaultdict(Cell) for name in FACT_SETS}
    scored = TranscriptResult(cells, result.tokens_before, result.tokens_after)
    if not result.compressed:
        return scored
    offset = 1 if framed and framed[0].get("role") == "system" else 0
    head, tail = framed[: result.head_end], framed[result.tail_start :]
    middle = framed[result.head_end : result.tail_start]
    outside = flat("\n".join(plain_text(m) for m in (*head, *tail)))
    window_lines = [flat(line) for m in result.messages for line in plain_text(m).splitlines()]
    window = flat("\n".join(window_lines))
    texts = {first_seq + i - offset: plain_text(m) for i, m in enumerate(framed) if i >= offset}
    frequency: Counter[str] = Counter()
    for text in texts.values():
        frequency.update({w.lower() for w in _WORD.findall(text)})
    seq_of = {i: first_seq + result.head_end + i - offset for i in range(len(middle))}
    fact_sets = {"ledger": ledger_probes(extract_facts(middle, seq_of.__getitem__)),
                 "outside": outside_probes(outside_facts(middle), seq_of)}
    tools = RecallTools(store, session_id)
    for name, probes in fact_sets.items():
        at_risk: dict[str, list[Probe]] = defaultdict(list)
        for probe in probes:
            if len(probe.text) >= 3 and flat(probe.text) not in outside:
                at_risk[probe.kind].append(probe)
        for kind, kind_probes in at_risk.items():
            cell = cells[name][kind]
            for probe in _sample(kind_probes, sample):
                cell.facts += 1
                kept = is_kept(probe, window, window_lines)
                cell.kept += kept
                cell.exact += await tools.exact(probe)
                query, shift = _topic(texts, probe.seq, probe.text, frequency)
                topic, read = await tools.topic(probe, query, shift)
                cell.topic += topic
                cell.topic_read += read
                cell.reachable += kept or read
                if name == "outside" and not (kept and read):
                    scored.missed.append((transcript.name, probe, kept))
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


def _row(cell: Cell | None) -> str:
    if cell is None or not cell.facts:
        return f"{'':>7}{'':>8}{'':>8}{'':>12}{'':>11}"
    return (f"{cell.facts:>7}{_pct(cell.kept, cell.facts):>8}{_pct(cell.exact, cell.facts):>8}"
            f"{_pct(cell.topic_read, cell.facts):>12}{_pct(cell.reachable, cell.facts):>11}")


def _print_table(rows: dict[str, dict[str, dict[str, Cell]]]) -> dict[str, dict[str, Cell]]:
    """One line per corpus and kind, the ledger's facts and the outside ones side by side; the totals."""
    columns = f"{'facts':>7}{'kept':>8}{'exact':>8}{'topic+read':>12}{'reachable':>11}"
    print(f"{'':<22}{'the ledger’s own facts':^46}   {'outside facts':^46}")
    print(f"{'corpus':<12}{'kind':<10}{columns}   {columns}")
    totals: dict[str, dict[str, Cell]] = {name: defaultdict(Cell) for name in FACT_SETS}
    for corpus, sets in [*rows.items(), ("all", totals)]:
        for kind in KIND_ORDER:
            if not any(sets[name].get(kind) and sets[name][kind].facts for name in FACT_SETS):
                continue
            if corpus != "all":
                for name in FACT_SETS:
                    if kind in sets[name]:
                        totals[name][kind].add(sets[name][kind])
            print(f"{corpus:<12}{kind:<10}{_row(sets['ledger'].get(kind))}   {_row(sets['outside'].get(kind))}")
    return totals


def _verdicts(totals: dict[str, dict[str, Cell]], long_ratio: float | None) -> list[str]:
    lines = []
    for name in FACT_SETS:
        for kind, target in TARGET_KEPT.items():
            cell = totals[name].get(kind)
            if cell and cell.facts:
                share = cell.kept / cell.facts
                lines.append(f"{name} kept {kind}: {share:.1%} (target ≥ {target:.0%}) "
                             f"{'met' if share >= target else 'NOT met'}")
        for kind in KIND_ORDER:
            cell = totals[name].get(kind)
            if cell and cell.facts:
                share = cell.reachable / cell.facts
                lines.append(f"{name} reachable {kind}: {share:.1%} (target ≥ {TARGET_REACHABLE:.0%}) "
                             f"{'met' if share >= TARGET_REACHABLE else 'NOT met'}")
    if long_ratio is not None:
        lines.append(f"compression over {LONG_TOKENS // 1000}K tokens: {long_ratio:.1f}× (target ≥ {TARGET_RATIO:.0f}×) "
                     f"{'met' if long_ratio >= TARGET_RATIO else 'NOT met'}")
    return lines


def _print_misses(missed: list[tuple[str, Probe, bool]], per_kind: int) -> None:
    """Up to ``per_kind`` outside facts of each kind the window lost and no search reached."""
    shown: Counter[str] = Counter()
    print("\nOutside facts not reachable (not kept, not found by topic + read):")
    for name, probe, _ in missed:
        if shown[probe.kind] < per_kind:
            shown[probe.kind] += 1
            code = f"  [exit {probe.code}]" if probe.code else ""
            print(f"  {probe.kind:<8} {name} #{probe.seq}: {probe.text[:150]}{code}")


async def run(kinds: Iterable[str], sample: int, root: Path | None = None, *, part: str = "all",
              misses: int = 0) -> int:
    """Measure every transcript of ``kinds`` (of ``part``) and print the tables; 0 (figures, not a pass/fail test)."""
    rows: dict[str, dict[str, dict[str, Cell]]] = defaultdict(lambda: {n: defaultdict(Cell) for n in FACT_SETS})
    ratios: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    long_before = long_after = 0
    evidence: Counter[str] = Counter()
    unreached: list[tuple[str, Probe, bool]] = []
    with tempfile.TemporaryDirectory(prefix="concord-reach-") as tmp:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp}/reach.db")
        try:
            for transcript in iter_transcripts(root, kinds=kinds):
                if part != "all" and held_out(transcript) != (part == "held-out"):
                    continue
                scored = await measure_transcript(store, transcript, sample)
                for name, cells in scored.cells.items():
                    for kind, cell in cells.items():
                        rows[transcript.corpus][name][kind].add(cell)
                unreached += [m for m in scored.missed if not m[2]]
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
    print(f"transcripts: {part}\n")
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
    if misses:
        _print_misses(unreached, misses)
    print()
    print("\n".join(_verdicts(totals, long_ratio)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.reachability", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--sample", type=int, default=25,
                        help="facts scored per kind, set and transcript, evenly spread (0 = all; default 25)")
    parser.add_argument("--part", choices=PARTS, default="all",
                        help="all transcripts, the held-out third nothing was tuned on, or the other two thirds")
    parser.add_argument("--misses", type=int, default=0, metavar="N",
                        help="also print N outside facts of each kind that were neither kept nor reached")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.kinds, args.sample, part=args.part, misses=args.misses))


if __name__ == "__main__":
    raise SystemExit(main())
