"""Split a long reply into platform-sized chunks without breaking Markdown code fences.

Boundaries are preferred in this order: paragraph, line, sentence, word; a hard cut is the last resort.
A chunk that ends inside a ``` fence is closed, and the next chunk reopens the fence with the same
language tag, so every chunk renders on its own. Lengths are measured by a caller-supplied function
because platforms count differently (Discord: characters; Telegram: UTF-16 code units).

Only backtick fences are tracked; a fence line is any line whose first non-blank characters are ```.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

LengthFn = Callable[[str], int]

_SENTENCE_END = re.compile(r"[.!?…][)\]\"'»”’]*\s")
_WHITESPACE = re.compile(r"\s")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units, the unit Telegram uses for its 4,096 limit and entity offsets."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class _Fence:
    ticks: int
    lang: str

    def open_line(self, with_lang: bool = True) -> str:
        return "`" * self.ticks + (self.lang if with_lang else "")

    def close_line(self) -> str:
        return "`" * self.ticks


def _fence_marker(line: str) -> tuple[int, str] | None:
    """(backtick count, info string) when ``line`` is a fence line, else None."""
    stripped = line.strip()
    if not stripped.startswith("```"):
        return None
    ticks = len(stripped) - len(stripped.lstrip("`"))
    return ticks, stripped[ticks:].strip()


def scan_fences(text: str, fence: _Fence | None = None) -> _Fence | None:
    """The fence still open after ``text``, given the one open before it (None when outside code)."""
    for line in text.split("\n"):
        marker = _fence_marker(line)
        if marker is None:
            continue
        ticks, info = marker
        if fence is None:
            fence = _Fence(ticks, info.split()[0] if info else "")
        elif ticks >= fence.ticks and not info:
            fence = None
    return fence


def _max_fit(text: str, budget: int, length: LengthFn) -> int:
    """Largest n with length(text[:n]) <= budget (length is monotonic in the prefix)."""
    if budget <= 0:
        return 0
    if length is len:
        return min(budget, len(text))
    lo, hi = 0, min(len(text), budget)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length(text[:mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, len(text) if end == -1 else end


def _next_start(text: str, pos: int, in_code: bool) -> int:
    """Where the next chunk starts after a cut at ``pos``: skip the break, keep code indentation."""
    if in_code:
        while pos < len(text) and text[pos] == "\n":
            pos += 1
        return pos
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def _cut_ok(text: str, cut: int, start: int) -> bool:
    """A cut must not fall inside a fence line nor make a mid-line ``` start a new chunk's first line."""
    if text[:cut].strip() == "":
        return False
    line_start, line_end = _line_bounds(text, cut)
    if line_start < cut < line_end and _fence_marker(text[line_start:line_end]):
        return False
    if start >= len(text):
        return True
    head_start, _ = _line_bounds(text, start)
    return text[head_start:start].strip() == "" or not text[start:].lstrip(" \t").startswith("```")


def _candidates(window: str) -> list[list[int]]:
    """Cut positions per boundary kind, best kind first, each list from the end of the window."""
    paragraphs = [m.start() for m in re.finditer(r"\n[ \t]*\n", window)]
    lines = [m.start() for m in re.finditer(r"\n", window)]
    sentences = [m.end() - 1 for m in _SENTENCE_END.finditer(window)]
    words = [m.start() for m in _WHITESPACE.finditer(window)]
    return [sorted(kind, reverse=True) for kind in (paragraphs, lines, sentences, words)]


def _choose_cut(text: str, fit: int, fence: _Fence | None) -> tuple[int, int]:
    """(end of this chunk's body, start of the rest) for a body of at most ``fit`` characters."""
    kinds = _candidates(text[: fit + 1])
    for min_pos, allowed in ((fit // 2, kinds), (1, kinds[-1:])):
        for positions in allowed:
            for cut in positions:
                if cut < min_pos or cut > fit:
                    continue
                in_code = scan_fences(text[:cut], fence) is not None
                start = _next_start(text, cut, in_code)
                if _cut_ok(text, cut, start):
                    return cut, start
    for cut in range(fit, 0, -1):
        if _cut_ok(text, cut, cut):
            return cut, cut
    # Only blank lines fit before a mid-line ```: a blank chunk beats one whose first line reads as a fence.
    safe = [cut for cut in range(fit, 0, -1) if not text[cut:].lstrip(" \t").startswith("```")]
    line_starts = [cut for cut in safe if text[cut - 1] == "\n"]  # keeps the next line's indentation
    if safe:
        return (line_starts or safe)[0], (line_starts or safe)[0]
    return fit, fit


def _head(prefix: str, fence: _Fence | None, body: str, room_for: Callable[[str], int]) -> str:
    """Continuation prefix and reopened fence line that start a chunk."""
    if fence is None:
        starts_with_fence = _fence_marker(body.split("\n", 1)[0]) is not None
        return prefix + "\n" if prefix and starts_with_fence and not prefix.endswith("\n") else prefix
    sep = "\n" if prefix and not prefix.endswith("\n") else ""
    full = prefix + sep + fence.open_line() + "\n"
    if room_for(full) > 0:
        return full
    # A very long language tag would leave no room for content: reopen the fence without it.
    return prefix + sep + fence.open_line(with_lang=False) + "\n"


def split_message(text: str, limit: int, length: LengthFn = len, continuation_prefix: str = "") -> list[str]:
    """Split ``text`` into chunks whose ``length`` is at most ``limit``.

    ``continuation_prefix`` (e.g. a mention of the user being answered) starts every chunk but the
    first. Empty or blank text gives no chunks. Raises ValueError when ``limit`` cannot hold the
    prefix, a reopened fence and at least one character.
    """
    rest = text.strip()
    all_ticks = [m[0] for line in rest.split("\n") if (m := _fence_marker(line))]
    # Room for a closing fence line is only needed when the text has fences at all.
    close_reserve = length("\n" + "`" * max(all_ticks)) if all_ticks else 0
    chunks: list[str] = []
    fence: _Fence | None = None
    while rest:
        prefix = continuation_prefix if chunks else ""
        head = _head(prefix, fence, rest, lambda h: limit - length(h) - close_reserve)
        room = limit - length(head)
        end_fence = scan_fences(rest, fence)
        tail = "\n" + end_fence.close_line() if end_fence else ""
        if length(rest) + length(tail) <= room:
            chunks.append(head + rest + tail)
            break
        fit = _max_fit(rest, room - close_reserve, length)
        if fit < 1:
            raise ValueError(f"limit {limit} is too small for the prefix and fence lines")
        cut, start = _choose_cut(rest, fit, fence)
        body = rest[:cut].rstrip()
        fence_after = scan_fences(body, fence)
        closing = "\n" + fence_after.close_line() if fence_after else ""
        chunks.append(head + body + closing)
        rest = rest[start:]
        fence = fence_after
    return chunks
