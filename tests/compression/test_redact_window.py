"""Redacting only the shown part of a long text (`redacted_slice`): never a secret in part, same result as
redacting the whole text, pages that follow each other without a gap."""

from __future__ import annotations

import pytest

from agent.compression.redact import REDACTED, redact_secrets
from agent.compression.redact_window import SECRET_MARGIN, redacted_slice
from bench._redaction_corpus import Planted, positives
from bench.redaction import leaked

FILLER = "".join(f"line {i}: checked the deploy config, nothing to report\n" for i in range(16))
# Every kind of secret, each in up to four of the phrasings that carry it (and that whole-text redaction catches).
_BY_KIND: dict[str, list[Planted]] = {}
for _planted in positives(per_kind=1):
    if not leaked(_planted, redact_secrets(_planted.text)):
        _BY_KIND.setdefault(_planted.kind, []).append(_planted)
CAUGHT = [p for group in _BY_KIND.values() for p in group[:: max(1, len(group) // 4)][:4]]


def pages(text: str, first: int, size: int) -> list[tuple[int, int, str]]:
    """``text`` read as `read_history` pages it: ``[0, first)``, then pages of ``size`` from where each ended."""
    out, offset = [], 0
    while offset < len(text):
        start, end, shown = redacted_slice(text, offset, (first if offset == 0 else offset + size))
        assert start <= offset < end
        out.append((start, end, shown))
        offset = end
    return out


@pytest.mark.parametrize("planted", CAUGHT, ids=lambda p: f"{p.kind}-{p.phrasing}")
def test_page_edges_inside_a_secret_never_show_part_of_it(planted: Planted) -> None:
    text = FILLER + planted.text + "\n" + FILLER
    inside = len(FILLER) + planted.text.index(planted.secret)
    whole = redact_secrets(text)
    for cut in (inside + 1, inside + len(planted.secret) // 2):
        for size in (37, 400):
            read = pages(text, cut, size)
            assert not any(leaked(planted, shown) for _, _, shown in read), (cut, size)
            assert "".join(shown for _, _, shown in read) == whole  # no gap, no overlap


def test_text_without_secrets_is_sliced_as_is() -> None:
    text = FILLER * 100
    start, end, shown = redacted_slice(text, 50_000, 54_000)
    assert (start, end) == (50_000, 54_000) and shown == text[50_000:54_000]


def test_a_private_key_longer_than_the_page_is_redacted_on_every_page() -> None:
    body = "\n".join("".join(chr(65 + (i * 7 + j) % 26) for j in range(64)) for i in range(40))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    text = FILLER + pem + "\n" + FILLER
    for first in range(len(FILLER) + 10, len(FILLER) + len(pem), 700):
        read = pages(text, first, 500)
        shown = "".join(s for _, _, s in read)
        assert body[:40] not in shown and not any(line in shown for line in body.splitlines())
        assert shown == redact_secrets(text)


def test_only_a_window_of_a_huge_text_is_redacted() -> None:
    calls: list[int] = []

    def counting(text: str) -> str:
        calls.append(len(text))
        return redact_secrets(text)

    text = FILLER * 2_000  # ~2 MB
    redacted_slice(text, 1_000_000, 1_004_000, redact=counting)
    assert calls == [4_000 + 2 * SECRET_MARGIN]


def test_a_secret_that_no_cut_separates_hides_the_whole_range() -> None:
    # One unbroken line of tokens: a context rule's cue ("password") owns the value at the cut.
    text = "x" * 9_000 + " password=" + "Zq9" * 3_000 + "y" * 9_000

    def greedy(chunk: str) -> str:
        # A stand-in rule that joins everything after the cue: no narrower cut can match the region's result.
        at = chunk.find("password=")
        return chunk if at < 0 else chunk[: at + 9] + REDACTED

    assert redacted_slice(text, 12_000, 12_100, redact=greedy) == (12_000, 12_100, REDACTED)
