"""Redaction benchmark: recall and false-positive rate on the labelled corpus, and speed on real transcripts.

Recall: share of planted-secret lines (16 kinds × their phrasings, ``bench/_redaction_corpus.py``) from which
the secret is gone, per kind and per phrasing. False positives: share of non-secret lines that were changed
at all — the hand-picked hard negatives, and every line of the real corpus (``bench.corpus``) when it is
there (``--show`` prints the changed real lines for review). Speed: the gated redactor (`redact_secrets`)
against applying every rule unconditionally, over each corpus transcript serialized as for the summary
model, with the slowest rules listed.

    python -m bench.redaction [--show N] [--rounds N]

Targets: recall ≥ 99%, ≤ 1% of non-secret lines changed.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from agent.compression.messages import content_text, tool_calls_of
from agent.compression.redact import apply_rule, redact_secrets, unescape_non_ascii
from agent.compression.secret_rules import RULES
from bench._redaction_corpus import Planted, negatives, positives
from bench.corpus import corpus_dir, iter_transcripts

__all__ = ["TARGET_FP", "TARGET_RECALL", "leaked", "main", "redact_ungated"]

TARGET_RECALL = 0.99
TARGET_FP = 0.01


def redact_ungated(text: str) -> str:
    """Every rule in order, none skipped: what the gates must not change."""
    readable = unescape_non_ascii(text) if text else text
    redacted = readable
    for rule in RULES:
        redacted = apply_rule(rule, redacted)
    return text if redacted == readable else redacted


def leaked(planted: Planted, output: str) -> bool:
    """Whether ``output`` still shows the secret, or a 12-character piece of it."""
    secret = planted.secret
    if secret in output:
        return True
    return any(secret[i : i + 12] in output for i in range(0, max(len(secret) - 11, 1), 4)) if len(secret) > 12 \
        else False


def _rate(hits: int, total: int) -> str:
    return f"{hits / total:.1%}" if total else "n/a"


def _recall_tables(console: Console, lines: list[Planted]) -> float:
    missed = [p for p in lines if leaked(p, redact_secrets(p.text))]
    for field in ("kind", "phrasing"):
        totals = Counter(getattr(p, field) for p in lines)
        misses = Counter(getattr(p, field) for p in missed)
        table = Table(title=f"recall by {field}")
        for column in (field, "lines", "caught", "recall"):
            table.add_column(column, justify="left" if column == field else "right")
        for name, total in totals.items():
            table.add_row(name, str(total), str(total - misses[name]), _rate(total - misses[name], total))
        console.print(table)
    for p in missed[:10]:
        console.print(f"[red]missed[/red] {p.kind}/{p.phrasing}: {p.text[:120]!r}")
    return 1 - len(missed) / len(lines)


def _raw_text(message: dict[str, Any]) -> str:
    """A message as the summary serializer lays it out, before redaction."""
    parts = [content_text(message)]
    parts += [str((call.get("function") or {}).get("arguments") or "") for call in tool_calls_of(message)]
    return f"[{str(message.get('role') or '').upper()}] " + "\n".join(p for p in parts if p)


def _corpus_texts() -> list[str]:
    root = corpus_dir()
    return [] if root is None else [_raw_text(m) for t in iter_transcripts(root) for m in t.messages]


def _real_lines(texts: Sequence[str]) -> list[str]:
    seen = dict.fromkeys(line for text in texts for line in text.splitlines() if line.strip())
    return list(seen)


def _false_positives(console: Console, name: str, lines: Sequence[str], show: int) -> float:
    changed = [(line, out) for line in lines if (out := redact_secrets(line)) != line]
    console.print(f"{name}: {len(changed):,} of {len(lines):,} non-secret lines changed ({_rate(len(changed), len(lines))})")
    for line, out in changed[:show]:
        console.print(f"  [yellow]changed[/yellow] {line[:160]!r}\n       → {out[:160]!r}")
    return len(changed) / len(lines) if lines else 0.0


def _median_time(fn: Callable[[str], str], texts: Sequence[str], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        for text in texts:
            fn(text)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _speed(console: Console, texts: Sequence[str], rounds: int) -> None:
    if not texts:
        console.print("[yellow]corpus not found (set CONCORD_CORPUS_DIR): speed not measured[/yellow]")
        return
    size = sum(map(len, texts)) / 1e6
    gated = _median_time(redact_secrets, texts, rounds)
    ungated = _median_time(redact_ungated, texts, rounds)
    console.print(f"speed over {len(texts):,} corpus messages ({size:.1f} MB), median of {rounds}: "
                  f"gated {gated:.2f} s ({size / gated:.1f} MB/s), every rule {ungated:.2f} s "
                  f"({size / ungated:.1f} MB/s): {ungated / gated:.1f}× faster")
    per_rule = []
    for rule in RULES:
        started = time.perf_counter()
        for text in texts:
            apply_rule(rule, text)
        per_rule.append((time.perf_counter() - started, rule.name))
    table = Table(title="slowest rules when run unconditionally (one pass)")
    table.add_column("rule")
    table.add_column("seconds", justify="right")
    for seconds, name in sorted(per_rule, reverse=True)[:6]:
        table.add_row(name, f"{seconds:.3f}")
    console.print(table)


def main(argv: Sequence[str] | None = None) -> None:
    """Print recall, false-positive rates and speed."""
    parser = argparse.ArgumentParser(prog="python -m bench.redaction", description=__doc__.split("\n")[0])
    parser.add_argument("--show", type=int, default=10, help="changed real-corpus lines to print")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds (median)")
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    lines = positives()
    recall = _recall_tables(console, lines)
    fp_hard = _false_positives(console, "hard negatives", negatives(), show=len(negatives()))
    texts = _corpus_texts()
    fp_real = _false_positives(console, "real corpus lines", _real_lines(texts), show=args.show)
    console.print(f"recall {recall:.2%} on {len(lines):,} planted secrets (target ≥ {TARGET_RECALL:.0%}); "
                  f"false positives {fp_hard:.2%} hard / {fp_real:.2%} real (target ≤ {TARGET_FP:.0%})")
    _speed(console, texts, args.rounds)


if __name__ == "__main__":
    main()
