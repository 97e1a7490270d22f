"""The invariants over every real transcript of the corpus folder (``CONCORD_CORPUS_DIR``; skipped without it),
compressed once with the static summary.

Each transcript is compressed as ``concord compress --summary static`` would, with the window set to the
transcript's own size (so it is "full"); transcripts with 30+ messages must come out smaller.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.tokens import get_counter
from bench.corpus import Transcript, load_all
from tests.compression.helpers import check_invariants, make_compressor

_cache: dict[Path, list[Transcript]] = {}


def _transcripts(root: Path) -> list[Transcript]:
    if root not in _cache:
        _cache[root] = load_all(root)
    return _cache[root]


@pytest.mark.parametrize("kind", ["tau_bench", "miniswe", "claude_code", "irc", "locomo"])
def test_every_corpus_transcript_compresses_validly(corpus_root: Path, kind: str) -> None:
    transcripts = [t for t in _transcripts(corpus_root) if t.corpus == kind]
    assert transcripts, f"no {kind} transcripts loaded"
    counter = get_counter()
    compressed = 0
    for transcript in transcripts:
        tokens = counter.count_messages(transcript.messages)
        compressor = make_compressor(context_length=max(tokens, 4_000))
        result = asyncio.run(compressor.compress(transcript.messages, force=True))
        check_invariants(transcript.messages, result.messages, result.compressed)
        if len(transcript.messages) >= 30:
            assert result.compressed, f"{transcript.name}: {result.reason}"
        compressed += result.compressed
        if not result.compressed:
            assert result.reason.startswith(("nothing to compress", "compression would not reduce"))
    assert compressed >= len(transcripts) * 0.6
