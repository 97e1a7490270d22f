"""Fact retention after compression, on LoCoMo's long conversations and their question set.

    python -m bench.retention                  # static summary (no LLM), windows at 100% and 50% of each conversation
    python -m bench.retention --summary llm    # the configured summary model (CONCORD_LLM__* / auxiliary.compression)

For every LoCoMo question with a literal answer that appears in the conversation, we ask two things of the
context the agent would see after one compression:
- evidence kept: every turn the question's evidence points to is still there verbatim;
- answer visible: the answer string is still somewhere in the context (verbatim turns or the summary).
The first is decided by the cut alone; the second also credits what the summary carried over. Both are
reported per question category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop), and against the
uncompressed conversation, which is 100% by construction. Nothing is lost on disk either way: the archived
turns stay searchable; this measures what stays *in the window*.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agent.compression.compressor import ContextCompressor
from agent.llm.base import Provider
from agent.tokens import get_counter, message_text
from bench.corpus import QA, Transcript, iter_transcripts

__all__ = ["Retention", "main", "measure"]

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_SPACE = re.compile(r"\s+")


def _normalize(text: str) -> str:
    return _SPACE.sub(" ", text.lower()).strip()


@dataclass
class Retention:
    """Counts for one (window, category) cell."""

    questions: int = 0
    evidence_kept: int = 0
    answer_visible: int = 0

    def add(self, other: Retention) -> None:
        """Accumulate another cell into this one."""
        self.questions += other.questions
        self.evidence_kept += other.evidence_kept
        self.answer_visible += other.answer_visible


def _answerable(qa: QA, full_text: str) -> bool:
    # Only literal answers that the conversation states can be checked by string search.
    return bool(qa.answer) and qa.category in CATEGORIES and _normalize(str(qa.answer)) in full_text


async def measure(transcript: Transcript, window_share: float,
                  summary_provider: Provider | None = None) -> tuple[dict[int, Retention], int, int]:
    """Compress ``transcript`` once with a window of ``window_share`` × its size; score its questions.

    Returns per-category counts and the token counts before and after.
    """
    messages = transcript.messages
    tokens = get_counter().count_messages(messages)
    compressor = ContextCompressor(context_length=max(int(tokens * window_share), 2_000),
                                   summary_provider=summary_provider)
    result = await compressor.compress(messages, force=True)
    kept = {id(m) for m in result.messages}
    kept_texts = {message_text(m) for m in result.messages}
    context = _normalize("\n".join(message_text(m) for m in result.messages))
    full = _normalize("\n".join(message_text(m) for m in messages))
    index: dict[str, int] = transcript.meta["dia_index"]
    cells: dict[int, Retention] = defaultdict(Retention)
    for qa in transcript.meta["qa"]:
        if not _answerable(qa, full):
            continue
        evidence = [messages[index[e]] for e in qa.evidence if e in index]
        cell = cells[qa.category]
        cell.questions += 1
        # Verbatim means the same turn survived: identity for untouched turns, text for re-created ones.
        cell.evidence_kept += bool(evidence) and all(id(m) in kept or message_text(m) in kept_texts for m in evidence)
        cell.answer_visible += _normalize(str(qa.answer)) in context
    return cells, result.tokens_before, result.tokens_after


def _pct(part: int, whole: int) -> str:
    return f"{part / whole:6.1%}" if whole else "     -"


async def run(windows: Sequence[float], provider_factory: Callable[[], Provider] | None) -> None:
    """Print the retention table for each window share."""
    transcripts = list(iter_transcripts(kinds=["locomo"]))
    if not transcripts:
        print("bench.retention: LoCoMo corpus not found; nothing to measure")
        return
    print(f"{'window':>7} {'category':<12}{'questions':>10}{'evidence kept':>15}{'answer visible':>16}"
          f"{'tokens after/before':>21}")
    for share in windows:
        totals: dict[int, Retention] = defaultdict(Retention)
        before = after = 0
        for transcript in transcripts:
            provider = provider_factory() if provider_factory else None
            try:
                cells, b, a = await measure(transcript, share, provider)
            finally:
                if provider is not None:
                    await provider.aclose()
            before, after = before + b, after + a
            for category, cell in cells.items():
                totals[category].add(cell)
        overall = Retention()
        for category in sorted(totals):
            cell = totals[category]
            overall.add(cell)
            print(f"{share:>6.0%} {CATEGORIES[category]:<12}{cell.questions:>10}"
                  f"{_pct(cell.evidence_kept, cell.questions):>15}{_pct(cell.answer_visible, cell.questions):>16}")
        print(f"{share:>6.0%} {'all':<12}{overall.questions:>10}{_pct(overall.evidence_kept, overall.questions):>15}"
              f"{_pct(overall.answer_visible, overall.questions):>16}{after / before:>21.2f}")


def _configured_summary_provider() -> Provider:
    from gateway.app.providers import summary_provider_for
    from gateway.config import load_settings

    settings = load_settings()
    if not settings.llm.configured:
        raise SystemExit("bench.retention --summary llm: set CONCORD_LLM__BASE_URL and CONCORD_LLM__MODEL first")
    return summary_provider_for(settings)


def main(argv: Sequence[str] | None = None) -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--summary", choices=("static", "llm"), default="static")
    parser.add_argument("--windows", type=float, nargs="+", default=[1.0, 0.5],
                        help="window as a share of each conversation's size (default: 1.0 0.5)")
    args = parser.parse_args(argv)
    factory: Callable[[], Any] | None = _configured_summary_provider if args.summary == "llm" else None
    asyncio.run(run(args.windows, factory))


if __name__ == "__main__":
    main()
