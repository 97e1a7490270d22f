"""Redacting the part of a long text that is shown, not the whole text.

A search snippet shows a few hundred characters and a ``read_history`` page a few thousand, but the message
they come from may be a megabyte (a pasted diff or log): redacting all of it costs about half a second each
time, for text nobody sees. Only the shown range plus ``SECRET_MARGIN`` characters on each side is
redacted instead, which finds every secret that overlaps the range as long as the secret (with the cue
words a context rule needs in front of it) is shorter than the margin — the longest shapes the rules know,
PEM private keys, are about 3,300 characters for RSA-4096, and a key whose beginning or end falls outside
the margin is still caught by its other end (``pem_private_key_tail``).

A secret that crosses the shown range's edge is never shown in part: the range is widened to token, then
line boundaries until redacting the three pieces (before, shown, after) apart gives exactly what redacting
them together gives, so no secret spans a cut.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.compression.redact import REDACTED, redact_secrets

__all__ = ["SECRET_MARGIN", "redacted_slice"]

SECRET_MARGIN = 4_096
# Cut points tried on each side: token boundaries (a secret by shape is one token), then line boundaries (a
# context rule's cue and value share a line; a PEM block is whole lines).
_TOKEN_STEPS = 2
_LINE_STEPS = 4
_SPACES = " \t\n"


def _cuts_before(text: str, at: int, floor: int) -> list[int]:
    """``at``, then token starts and line starts before it, all above ``floor`` (or ``floor`` itself when that
    is the start of the text)."""
    cuts = [at]
    for _ in range(_TOKEN_STEPS):
        space = max(text.rfind(c, floor, cuts[-1] - 1) for c in _SPACES) if cuts[-1] - 1 > floor else -1
        if space < floor:
            break
        cuts.append(space + 1)
    line = at
    for _ in range(_LINE_STEPS):
        line = text.rfind("\n", floor, line - 1) if line - 1 > floor else -1
        if line < floor:
            break
        cuts.append(line + 1)
    if floor == 0:
        cuts.append(0)
    return sorted(set(cuts), reverse=True)


def _cuts_after(text: str, at: int, ceiling: int) -> list[int]:
    """``at``, then token ends and line ends after it, all below ``ceiling`` (or ``ceiling`` itself when that
    is the end of the text)."""
    cuts = [at]
    for _ in range(_TOKEN_STEPS):
        found = [i for i in (text.find(c, cuts[-1] + 1, ceiling) for c in _SPACES) if i >= 0]
        if not found:
            break
        cuts.append(min(found))
    line = at
    for _ in range(_LINE_STEPS):
        line = text.find("\n", line + 1, ceiling)
        if line < 0:
            break
        cuts.append(line)
    if ceiling == len(text):
        cuts.append(ceiling)
    return sorted(set(cuts))


def redacted_slice(text: str, start: int, end: int, *,
                   redact: Callable[[str], str] = redact_secrets) -> tuple[int, int, str]:
    """``text[start:end]`` with its secrets replaced: ``(shown_start, shown_end, shown)``, where the raw range
    ``[shown_start, shown_end)`` holds ``[start, end)`` and is wider only when a secret crosses an edge.

    ``redact`` must leave a text without secrets as the very same string (as `redact_secrets` does); that
    makes the common case — no secret near the range — a single redaction of the range and its margins.
    When no cut point near the range splits the text cleanly, the range is shown as one ``[REDACTED]``.
    """
    start, end = max(0, min(start, len(text))), max(0, min(end, len(text)))
    end = max(start, end)
    low, high = max(0, start - SECRET_MARGIN), min(len(text), end + SECRET_MARGIN)
    region = text[low:high]
    whole = redact(region)
    if whole is region:
        return start, end, text[start:end]
    lefts, rights = _cuts_before(text, start, low), _cuts_after(text, end, high)
    # Keeping the start first: a page then begins where the one before it ended (that cut was clean).
    tries = [*((start, r) for r in rights), *((left, end) for left in lefts[1:]),
             *zip(lefts[1:], rights[1:], strict=False)]
    for left, right in tries:
        shown = redact(text[left:right])
        if redact(text[low:left]) + shown + redact(text[right:high]) == whole:
            return left, right, shown
    return start, end, REDACTED
