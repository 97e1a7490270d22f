"""Redacting the part of a long text that is shown, not the whole text.

A search snippet shows a few hundred characters and a ``read_history`` page a few thousand, but the message
they come from may be a megabyte (a pasted diff or log): redacting all of it costs about half a second each
time, for text nobody sees. Only the shown range plus ``SECRET_MARGIN`` characters on each side is
redacted instead, which finds every secret that overlaps the range as long as the secret (with the cue
words a context rule needs in front of it) is shorter than the margin — the longest shapes the rules know,
PEM private keys, are about 3,300 characters for RSA-4096, and a key whose beginning or end falls outside
the margin is still caught by its other end (``pem_private_key_tail``).

A secret that crosses the shown range's edge is never shown in part: the range is widened to line
boundaries until redacting the three pieces (before, shown, after) apart gives exactly what redacting them
together gives, so no secret spans a cut.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.compression.redact import REDACTED, redact_secrets

__all__ = ["SECRET_MARGIN", "redacted_slice"]

SECRET_MARGIN = 4_096
# Line boundaries tried on each side before the whole redacted region is used.
_WIDENINGS = 4


def _line_starts_before(text: str, at: int, floor: int) -> list[int]:
    points = []
    while at > floor and len(points) < _WIDENINGS:
        at = max(text.rfind("\n", floor, at - 1) + 1, floor)
        points.append(at)
    return points


def _line_ends_after(text: str, at: int, ceiling: int) -> list[int]:
    points = []
    while at < ceiling and len(points) < _WIDENINGS:
        found = text.find("\n", at + 1, ceiling)
        at = ceiling if found < 0 else found
        points.append(at)
    return points


def redacted_slice(text: str, start: int, end: int, *,
                   redact: Callable[[str], str] = redact_secrets) -> tuple[int, int, str]:
    """``text[start:end]`` with its secrets replaced: ``(shown_start, shown_end, shown)``, where the raw range
    ``[shown_start, shown_end)`` holds ``[start, end)`` and is wider only when a secret crosses an edge.

    ``redact`` must leave a text without secrets as the very same string (as `redact_secrets` does); that
    makes the common case — no secret near the range — a single redaction of the range and its margins.
    """
    start, end = max(0, min(start, len(text))), max(0, min(end, len(text)))
    low, high = max(0, start - SECRET_MARGIN), min(len(text), end + SECRET_MARGIN)
    region = text[low:high]
    whole = redact(region)
    if whole is region:
        return start, end, text[start:end]
    lefts = [start, *_line_starts_before(text, start, low)]
    rights = [end, *_line_ends_after(text, end, high)]
    for index in range(max(len(lefts), len(rights))):
        left, right = lefts[min(index, len(lefts) - 1)], rights[min(index, len(rights) - 1)]
        shown = redact(text[left:right])
        if redact(text[low:left]) + shown + redact(text[right:high]) == whole:
            return left, right, shown
    # Nothing narrower splits cleanly: the whole redacted region, less its first and last lines when they are
    # cut from the text around it (a secret crossing the region's own edge would show there in part).
    first = whole.find("\n") + 1 if low > 0 else 0
    last = whole.rfind("\n") if high < len(text) else len(whole)
    cut_low = low + (region.find("\n") + 1 if low > 0 else 0)
    cut_high = high - (len(region) - region.rfind("\n") if high < len(text) else 0)
    if (first <= 0 and low > 0) or last < first:
        return start, end, REDACTED  # one unbroken line around the range, secrets in it: show none of it
    return cut_low, max(cut_high, cut_low), whole[first:last]
