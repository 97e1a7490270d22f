"""The part of a message a search hit shows: the whole line(s) of the match, on one line.

Where the query occurs verbatim (an error line, a rule, a command looked up by its exact text) the snippet
is centred on that occurrence; otherwise on the spot with the most distinct query terms near it. The lines
holding it are shown whole up to ``WHOLE_LINES_CHARS``; a longer line is cut around the match with "…" and
the hit says where the line goes on (``more_at``, a character offset ``read_history`` takes), so an exact
text is never shown cut without saying so. Only the shown range (and a margin) is redacted
(`redacted_slice`): a 1 MB message costs what a short one does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agent.compression.redact_window import redacted_slice
from agent.compression.secret_rules import fold_ascii

__all__ = ["WHOLE_LINES_CHARS", "Snippet", "cut_snippet"]

WHOLE_LINES_CHARS = 500
_RADIUS = 60
# Occurrences considered when picking the spot (a term repeated all over a log).
_MAX_SPOTS = 200


@dataclass(frozen=True, slots=True)
class Snippet:
    """The shown text (one line) and, when the line it was cut from goes on, the offset where it does."""

    text: str
    more_at: int | None = None


def _phrase_span(folded: str, phrase: str) -> tuple[int, int] | None:
    """Where ``phrase`` occurs in the case-folded body (runs of whitespace aside), first occurrence."""
    words = fold_ascii(phrase).split()
    if not words:
        return None
    found = re.search(r"\s+".join(map(re.escape, words)), folded)
    return found.span() if found else None


def _best_spot(folded: str, terms: Sequence[str]) -> tuple[int, int] | None:
    """(start, end) of the best-matching term in the case-folded body: the occurrence with the most distinct
    query terms near it, then the longest term (the most distinctive), then the earliest; None when no term
    occurs."""
    spots: list[tuple[int, int, int]] = []  # (position, length, term index)
    for index, term in enumerate(fold_ascii(t) for t in terms):
        at = folded.find(term) if term else -1
        found = 0
        while at >= 0 and found < _MAX_SPOTS:
            spots.append((at, len(term), index))
            found += 1
            at = folded.find(term, at + len(term))
    if not spots:
        return None
    spots.sort()
    # Distinct terms within the window around each spot, by a window sliding over the sorted spots.
    counts: Counter[int] = Counter()
    low = high = 0
    best: tuple[int, int, int] = (-1, 0, 0)
    best_spot = spots[0]
    for spot in spots:
        while high < len(spots) and spots[high][0] <= spot[0] + 2 * _RADIUS:
            counts[spots[high][2]] += 1
            high += 1
        while spots[low][0] < spot[0] - 2 * _RADIUS:
            counts[spots[low][2]] -= 1
            if not counts[spots[low][2]]:
                del counts[spots[low][2]]
            low += 1
        score = (len(counts), spot[1], -spot[0])
        if score > best:
            best, best_spot = score, spot
    return best_spot[0], best_spot[0] + best_spot[1]


def _shown_range(body: str, start: int, end: int) -> tuple[int, int]:
    """The whole lines around ``[start, end)`` when they fit in ``WHOLE_LINES_CHARS``; else a window of about
    that size around the match (the match itself first: as much of it as fits)."""
    line_start = body.rfind("\n", 0, start) + 1
    line_end = body.find("\n", end)
    line_end = len(body) if line_end < 0 else line_end
    if line_end - line_start <= WHOLE_LINES_CHARS:
        return line_start, line_end
    if end - start >= WHOLE_LINES_CHARS:
        return start, start + WHOLE_LINES_CHARS
    spare = WHOLE_LINES_CHARS - (end - start)
    low = max(line_start, start - min(spare // 2, _RADIUS * 2))
    high = min(line_end, low + WHOLE_LINES_CHARS)
    return max(line_start, high - WHOLE_LINES_CHARS), high


def cut_snippet(body: str, terms: Sequence[str], phrase: str = "", *,
                redact: Callable[[str], str] | None = None) -> Snippet:
    """The snippet of ``body`` for a query of ``terms`` (``phrase``: the query as typed, see the module
    docstring); ``redact`` rewrites the shown range (with a margin) before it is shown."""
    folded = fold_ascii(body)  # A-Z lowered, every position kept: cheap on a megabyte, unlike str.lower()
    span = (_phrase_span(folded, phrase) if len(terms) > 1 else None) or _best_spot(folded, terms)
    # No term as typed (a stem or a diacritic matched it): the beginning of the message.
    low, high = _shown_range(body, *span) if span else (0, min(len(body), 2 * _RADIUS))
    if redact is not None:
        low, high, shown = redacted_slice(body, low, high, redact=redact)
    else:
        shown = body[low:high]
    line_end = body.find("\n", high)
    goes_on = high < (len(body) if line_end < 0 else line_end)
    # "…" marks a line cut short, never a whole line shown without the lines around it.
    cut_before = low > 0 and body[low - 1] != "\n"
    text = ("…" if cut_before else "") + " ".join(shown.split()) + ("…" if goes_on else "")
    return Snippet(text, high if goes_on else None)
