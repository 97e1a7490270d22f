"""Real-data corpus loaders: every sub-corpus of the corpus folder as OpenAI-format message lists.

The folder is ``$CONCORD_CORPUS_DIR`` (see `bench._corpus_common.corpus_dir`); its sub-folders are the kinds
below (``KINDS``): Claude Code and mini-SWE-agent sessions, tau-bench conversations, IRC logs and LoCoMo
dialogues with their questions. Without it the corpus benchmarks say so and the corpus tests skip.

Each folder's README describes its on-disk format and the mapping implemented here. Every transcript obeys the
internal message invariants (valid roles, each tool call answered exactly once right after its assistant
message, arguments as JSON strings); where a source genuinely lacks a result, a ``[no result recorded]`` tool
message is synthesized and counted in ``meta["synthesized_results"]``.

    python -m bench.corpus          # per-corpus counts
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from bench._corpus_agents import load_claude_code, load_miniswe, load_tau_bench
from bench._corpus_chats import load_irc, load_locomo
from bench._corpus_common import (
    NO_RESULT,
    QA,
    REPO_ROOT,
    CorpusFormatError,
    Transcript,
    corpus_dir,
    log,
)

__all__ = [
    "KINDS",
    "NO_RESULT",
    "QA",
    "CorpusFormatError",
    "Transcript",
    "corpus_dir",
    "iter_transcripts",
    "load_all",
    "load_claude_code",
    "load_irc",
    "load_locomo",
    "load_miniswe",
    "load_tau_bench",
    "main",
]


# ---------------------------------------------------------------------------------------------- discovery

Loader = Callable[[Path], list[Transcript]]

# kind → (folder name pattern, file patterns inside it, loader); folders are found by pattern so a renamed
# snapshot (e.g. another model's trajectories) is picked up too.
_SOURCES: dict[str, tuple[str, tuple[str, ...], Loader]] = {
    "claude_code": ("*claude-code*", ("**/*.jsonl",), load_claude_code),
    "miniswe": ("*miniswe*", ("**/*.traj.json",), load_miniswe),
    "tau_bench": ("*tau-bench*", ("*.json",), load_tau_bench),
    "irc": ("*irc*", ("**/*.raw.txt", "**/*.ascii.txt"), load_irc),
    "locomo": ("*locomo*", ("*.json",), load_locomo),
}
KINDS: tuple[str, ...] = tuple(_SOURCES)


def _files(root: Path, kind: str) -> list[Path]:
    folder_pattern, file_patterns, _ = _SOURCES[kind]
    found: set[Path] = set()
    for folder in root.glob(folder_pattern):
        if folder.is_dir():
            for pattern in file_patterns:
                found.update(p for p in folder.glob(pattern) if p.is_file())
    return sorted(found)


def iter_transcripts(root: Path | None = None, kinds: Iterable[str] | None = None) -> Iterator[Transcript]:
    """Yield every transcript of the chosen kinds (default: all of ``KINDS``), kind by kind, files sorted.

    With no corpus (``root`` None and ``corpus_dir()`` None, or ``root`` not a directory) it yields nothing
    and logs one warning. An unknown kind raises ``ValueError``.
    """
    chosen = list(KINDS if kinds is None else kinds)
    unknown = [k for k in chosen if k not in _SOURCES]
    if unknown:
        raise ValueError(f"unknown corpus kind(s) {unknown}; allowed: {', '.join(KINDS)}")
    base = Path(root) if root is not None else corpus_dir()
    if base is None or not base.is_dir():
        where = base or os.environ.get("CONCORD_CORPUS_DIR") or REPO_ROOT.parent / "shared" / "corpus"
        log.warning("corpus not found at %s; set CONCORD_CORPUS_DIR to use another location", where)
        return
    for kind in chosen:
        loader = _SOURCES[kind][2]
        for path in _files(base, kind):
            yield from loader(path)


def load_all(root: Path | None = None) -> list[Transcript]:
    """Every transcript of every kind, as a list (see ``iter_transcripts``)."""
    return list(iter_transcripts(root))


def main() -> None:
    """Print how many transcripts, messages and tool calls each sub-corpus yields."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    root = corpus_dir()
    if root is None:
        console.print("[yellow]corpus not found; set CONCORD_CORPUS_DIR[/yellow]")
        return
    table = Table(title=f"Corpus at {root}")
    for column in ("corpus", "transcripts", "messages", "tool calls", "synthesized results"):
        table.add_column(column, justify="left" if column == "corpus" else "right")
    for kind in KINDS:
        items = list(iter_transcripts(root, [kind]))
        messages = sum(len(t.messages) for t in items)
        calls = sum(len(m.get("tool_calls") or ()) for t in items for m in t.messages)
        synthesized = sum(t.meta["synthesized_results"] for t in items)
        table.add_row(kind, f"{len(items):,}", f"{messages:,}", f"{calls:,}", f"{synthesized:,}")
    console.print(table)


if __name__ == "__main__":
    main()

